package openai

import (
	"net/http"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	Messages            []chat.Message `json:"messages"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	ToolFields
	TemplateArgs
	// Chunking asks for paced output (corral's extension; see paced.go).
	Chunking *ChunkingParams `json:"chunking"`
	// Logprobs asks for each content token's log-probability,
	// TopLogprobs (0 to MaxChatTopLogprobs) for the most likely tokens
	// at each step with it.
	Logprobs    *bool `json:"logprobs"`
	TopLogprobs *int  `json:"top_logprobs"`
	ReasoningParams
	oaiParams
	chatUnsupported
	// req is the request translated by Check.
	req serving.Request
}

// Check refuses what no model serves and what is over lim, before the
// model loads, and translates the request.
func (body *chatRequest) Check(lim *serving.Limits) *serving.Error {
	var e *serving.Error
	body.req, e = body.translate(lim)
	return e
}

// translate validates a chat completion request within lim and
// translates it.
func (body *chatRequest) translate(lim *serving.Limits) (serving.Request, *serving.Error) {
	if e := body.chatUnsupported.check(); e != nil {
		return serving.Request{}, e
	}
	if e := lim.CheckMessages(body.Messages); e != nil {
		return serving.Request{}, e
	}
	maxTokens, maxParam := body.MaxCompletionTokens, "max_completion_tokens"
	if maxTokens == nil {
		maxTokens, maxParam = body.MaxTokens, "max_tokens"
	}
	r, e := body.oaiParams.request(maxTokens, maxParam, lim)
	if e != nil {
		return r, e
	}
	r.Messages, r.Params.Prompt, r.Params.Logprobs = body.Messages, "messages", "logprobs"
	if r.Tools, e = body.ToolFields.Parse(lim); e != nil {
		return r, e
	}
	if r.Vars, e = body.TemplateArgs.Parse(); e != nil {
		return r, e
	}
	if r.ReasoningBudget, e = body.ReasoningParams.Budget(); e != nil {
		return r, e
	}
	if r.Logprobs, r.TopLogprobs, e = chatLogprobs(body.Logprobs, body.TopLogprobs); e != nil {
		return r, e
	}
	if r.TopLogprobs > 0 {
		r.Params.Logprobs = "top_logprobs"
	}
	if r.Chunking, r.PauseTimeout, e = body.Chunking.Engine(); e != nil {
		return r, e
	}
	return r, nil
}

// ChatCompletions serves POST /v1/chat/completions. With "chunking" and
// "stream": true the answer is paced: one event per sentence-sized chunk,
// each followed by a pause until POST .../{id}/continue (see paced.go).
func ChatCompletions(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, WriteError, false, serveChat)
}

func serveChat(x *serving.Exchange, body *chatRequest) *serving.Error {
	if body.req.Chunking != nil && !body.Stream {
		return serving.Invalid("chunking", "'chunking' paces a stream: it needs \"stream\": true")
	}
	m := x.Model
	req, g, e := x.Core.Build(m, &body.req)
	if e != nil {
		return e
	}
	f := &chatEncoder{h: header(m, "chatcmpl-"), includeUsage: body.includeUsage(), paced: req.Chunking != nil, reads: g.Plan.Reads(), logprobs: req.Logprobs}
	g.Framing = serving.SSEDone
	if f.paced {
		g.PacedID = f.h.ID
	}
	return x.Core.Generate(x, req, g, f)
}

// chatEncoder shapes chat.completion and chat.completion.chunk objects.
type chatEncoder struct {
	h            wire.Header
	includeUsage bool
	paced        bool                   // each text event is a chunk (wire.ChunkInfo), usage has PacedMetrics
	reads        bool                   // the answer is read: its deltas are merged into one
	logprobs     bool                   // text events and the message carry logprobs
	pending      []engine.TokenLogprobs // logprobs of text the answer's reader holds back
}

func (f *chatEncoder) chunk(choices ...wire.ChatChunkChoice) *wire.ChatCompletionChunk {
	h := f.h
	h.Object = wire.ObjectChatCompletionChunk
	return &wire.ChatCompletionChunk{Header: h, Choices: append([]wire.ChatChunkChoice{}, choices...)}
}

func (f *chatEncoder) Start() []any {
	empty := ""
	return []any{f.chunk(wire.ChatChunkChoice{Delta: wire.Delta{Role: "assistant", Content: &empty}})}
}

// Deltas merges the pieces the answer's reader decided into one chunk,
// with the logprobs of the tokens received since the last one; none when
// there are no pieces.
func (f *chatEncoder) Deltas(ds []wire.Delta, _ []wire.ToolCall, c engine.Chunk) []any {
	choice := wire.ChatChunkChoice{}
	lps := c.Logprobs
	if f.reads {
		f.pending = append(f.pending, c.Logprobs...)
		if len(ds) == 0 {
			return nil
		}
		choice.Delta, lps, f.pending = model.Merge(ds), f.pending, nil
	} else {
		choice.Delta = ds[0]
	}
	if f.logprobs {
		choice.Logprobs = chatLogprobsOf(lps)
	}
	ev := f.chunk(choice)
	if f.paced {
		ev.Chunk = &wire.ChunkInfo{Index: c.Index, Held: c.Held, Last: c.Last}
	}
	return []any{ev}
}

// End sends the logprobs the reader's last pieces did not carry, the
// finish reason and the usage.
func (f *chatEncoder) End(res engine.Result, finish string) []any {
	var evs []any
	if f.logprobs && len(f.pending) > 0 {
		evs = append(evs, f.chunk(wire.ChatChunkChoice{Logprobs: chatLogprobsOf(f.pending)}))
	}
	evs = append(evs, f.chunk(wire.ChatChunkChoice{FinishReason: &finish}))
	if f.includeUsage {
		c := f.chunk()
		c.Usage = UsageOf(res.Usage)
		if f.paced {
			m := serving.PacedMetricsOf(res)
			c.Usage.Paced = &m
		}
		evs = append(evs, c)
	}
	return evs
}

func (f *chatEncoder) Whole(a serving.Answer, res engine.Result) any {
	h := f.h
	h.Object = wire.ObjectChatCompletion
	msg := wire.Message{Role: "assistant", Content: a.Content, ReasoningContent: a.Reasoning, ToolCalls: a.Calls}
	choice := wire.ChatChoice{Message: msg, FinishReason: &a.Finish}
	if f.logprobs {
		choice.Logprobs = chatLogprobsOf(a.Logprobs)
	}
	return &wire.ChatCompletion{Header: h, Choices: []wire.ChatChoice{choice}, Usage: UsageOf(res.Usage)}
}

func (f *chatEncoder) Error(e *serving.Error) any { return Envelope(e) }

func (f *chatEncoder) Ping() any { return nil }
