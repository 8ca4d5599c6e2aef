package openai

import (
	"net/http"
	"strings"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/wire"
)

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	Messages            []chat.Message `json:"messages"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	toolFields
	templateArgs
	// Chunking asks for paced output (corral's extension; see pace.go).
	Chunking *chunkingParams `json:"chunking"`
	// Logprobs asks for each content token's log-probability,
	// TopLogprobs (0 to MaxChatTopLogprobs) for the most likely tokens
	// at each step with it.
	Logprobs    *bool `json:"logprobs"`
	TopLogprobs *int  `json:"top_logprobs"`
	reasoningParams
	oaiParams
	chatUnsupported
}

// chatPlan is what a chat request asks of its answer: its tools, and how
// the answer is read.
type chatPlan struct {
	toolPlan
	answer model.Plan
}

// ChatCompletions serves POST /v1/chat/completions. With "chunking" and
// "stream": true the answer is paced: one event per sentence-sized chunk,
// each followed by a pause until POST .../{id}/continue (see pace.go).
func (a *API) ChatCompletions(w http.ResponseWriter, r *http.Request) {
	var body chatRequest
	if e := decodeBody(r, &body); e != nil {
		WriteError(w, e)
		return
	}
	if e := body.chatUnsupported.check(); e != nil { // before the model loads
		WriteError(w, e)
		return
	}
	if e := a.limits.checkChat(body.Messages, &body.toolFields); e != nil {
		WriteError(w, e)
		return
	}
	if _, _, e := chatLogprobs(body.Logprobs, body.TopLogprobs); e != nil {
		WriteError(w, e)
		return
	}
	l, e := a.acquire(r.Context(), body.Model, body.KeepAlive)
	if e != nil {
		WriteError(w, e)
		return
	}
	defer l.Release()
	m := l.Model()
	req, plan, e := newChatRequest(m, &body, &a.limits)
	if e != nil {
		WriteError(w, e)
		return
	}
	if req.Chunking != nil && !body.Stream {
		WriteError(w, invalid("chunking", "'chunking' paces a stream: it needs \"stream\": true"))
		return
	}
	f := &chatResponder{h: header(m, "chatcmpl-"), includeUsage: body.includeUsage(), paced: req.Chunking != nil, plan: plan.answer, logprobs: req.Logprobs}
	if plan.answer.Reads() {
		f.answer = plan.answer.Reader()
	}
	mode := genMode{stream: body.Stream, doneMarker: true, promptParam: "messages", grammarParam: "response_format", priority: body.Priority, cacheSalt: body.CacheSalt}
	if plan.grammar != "" {
		// A forced call's grammar comes from the tools; what forces it
		// is tool_choice.
		mode.grammarParam, mode.unwritableParam = "tools", "tool_choice"
	}
	if f.paced {
		mode.pacedID = f.h.ID
	}
	a.generate(w, r, m, req, mode, f)
}

// chatRequest validates a chat completion request within lim (its counts
// checked already: Limits.checkChat) and builds the engine request, its
// prompt rendered by the chat template, and what the request's tools ask
// of the answer and how it is read.
func newChatRequest(m *model.Model, body *chatRequest, lim *Limits) (engine.Request, chatPlan, *Error) {
	var plan chatPlan
	maxTokens, maxParam := body.MaxCompletionTokens, "max_completion_tokens"
	if maxTokens == nil {
		maxTokens, maxParam = body.MaxTokens, "max_tokens"
	}
	req, e := oaiRequest(m, &body.oaiParams, maxTokens, maxParam, lim)
	if e != nil {
		return req, plan, e
	}
	if req.Chunking, req.PauseTimeout, e = body.Chunking.engine(); e != nil {
		return req, plan, e
	}
	if req.Logprobs, req.TopLogprobs, e = chatLogprobs(body.Logprobs, body.TopLogprobs); e != nil {
		return req, plan, e
	}
	if req.Logprobs && req.Chunking != nil {
		return req, plan, invalid("logprobs", "'logprobs' cannot be combined with 'chunking'")
	}
	lpParam := "logprobs"
	if req.TopLogprobs > 0 {
		lpParam = "top_logprobs"
	}
	if e := lim.checkLogprobs(&req, m.Info().SlotCtx, lpParam); e != nil {
		return req, plan, e
	}
	budget, e := body.reasoningParams.budget()
	if e != nil {
		return req, plan, e
	}
	if plan.toolPlan, e = planTools(m, &body.toolFields, lim); e != nil {
		return req, plan, e
	}
	switch {
	case plan.parse && req.Chunking != nil:
		return req, plan, invalid("chunking", "'chunking' cannot pace an answer that may call tools: send \"tool_choice\": \"none\" or no 'tools'")
	case plan.grammar != "" && req.Grammar != "":
		return req, plan, invalid("tool_choice", "'tool_choice' %s forces tool calls, which 'response_format' cannot constrain as well", string(body.ToolChoice))
	case plan.grammar != "":
		req.Grammar = plan.grammar
	}
	kw, e := templateKwargs(m, &body.templateArgs)
	if e != nil {
		return req, plan, e
	}
	if req.Prompt, e = render(m, body.Messages, chat.Options{AddGenerationPrompt: true, Tools: plan.render, Kwargs: kw}, lim); e != nil {
		return req, plan, e
	}
	req.AddSpecial, req.ParseSpecial = true, true
	req.Plain = clientSpans(req.Prompt, body.Messages)
	req.Stop = append(req.Stop, m.Stops()...)
	plan.answer = m.AnswerPlan(&req, plan.render, plan.parse, plan.max, budget)
	return req, plan, nil
}

// render applies the chat template to the messages with opt (its BOS
// and EOS are the model's), for a prompt of at most lim.MaxPromptBytes:
// rendering stops past it.
func render(m *model.Model, msgs []chat.Message, opt chat.Options, lim *Limits) (string, *Error) {
	if len(msgs) == 0 {
		return "", invalid("messages", "'messages' must be a non-empty array")
	}
	opt.MaxBytes = lim.MaxPromptBytes
	prompt, err := m.Render(msgs, opt)
	if err != nil {
		return "", renderError(err, lim)
	}
	return prompt, nil
}

// clientSpans finds the message contents in the rendered prompt, in
// order, so that the engine tokenizes them as plain text: a user who types
// "<|im_end|><|im_start|>system" gets those characters, not control
// tokens, while the template's own markers stay special. A content the
// template changed beyond trimming is not found and not marked.
//
// It takes linear time: a search that finds nothing reads the rest of the
// prompt, so once such searches have read four prompts' worth, the
// messages left are not looked for.
func clientSpans(prompt string, msgs []chat.Message) []engine.Span {
	var spans []engine.Span
	at := 0
	budget := 4 * len(prompt) // bytes that failed searches may still read
	for _, m := range msgs {
		text, err := m.Text()
		if err != nil {
			continue
		}
		for _, t := range []string{text, strings.TrimSpace(text)} {
			if t == "" {
				break
			}
			if i := strings.Index(prompt[at:], t); i >= 0 {
				spans = append(spans, engine.Span{Start: at + i, End: at + i + len(t)})
				at += i + len(t)
				break
			}
			if budget -= len(prompt) - at; budget < 0 {
				return spans
			}
		}
	}
	return spans
}

// chatResponder shapes chat.completion and chat.completion.chunk objects.
type chatResponder struct {
	h            wire.Header
	includeUsage bool
	paced        bool // each text event is a chunk (wire.ChunkInfo), usage has PacedMetrics
	plan         model.Plan
	answer       *model.Reader          // reads a stream's reasoning and calls; nil when the answer is passed on as it is
	logprobs     bool                   // text events and the message carry logprobs
	pending      []engine.TokenLogprobs // logprobs of text the answer reader holds back
}

func (f *chatResponder) chunk(choices ...wire.ChatChunkChoice) *wire.ChatCompletionChunk {
	h := f.h
	h.Object = wire.ObjectChatCompletionChunk
	return &wire.ChatCompletionChunk{Header: h, Choices: append([]wire.ChatChunkChoice{}, choices...)}
}

func (f *chatResponder) streamStart() any {
	empty := ""
	return f.chunk(wire.ChatChunkChoice{Delta: wire.Delta{Role: "assistant", Content: &empty}})
}

func (f *chatResponder) streamText(text string, c engine.Chunk) any {
	if f.answer != nil {
		f.pending = append(f.pending, c.Logprobs...)
		return f.deltas(f.answer.Push(text), false)
	}
	choice := wire.ChatChunkChoice{Delta: wire.Delta{Content: &text}}
	if f.logprobs {
		choice.Logprobs = chatLogprobsOf(c.Logprobs)
	}
	ev := f.chunk(choice)
	if f.paced {
		ev.Chunk = &wire.ChunkInfo{Index: c.Index, Held: c.Held, Last: c.Last}
	}
	return ev
}

// deltas merges the pieces the answer reader decided into one chunk,
// with the logprobs of the tokens received since the last one; nil when
// there are none, unless at the end logprobs are still to be sent.
func (f *chatResponder) deltas(ds []wire.Delta, end bool) any {
	if len(ds) == 0 && !(end && f.logprobs && len(f.pending) > 0) {
		return nil
	}
	choice := wire.ChatChunkChoice{Delta: model.Merge(ds)}
	if f.logprobs {
		choice.Logprobs = chatLogprobsOf(f.pending)
		f.pending = f.pending[:0]
	}
	return f.chunk(choice)
}

func (f *chatResponder) streamEnd(res engine.Result) []any {
	var evs []any
	finish := finishReason(res)
	if f.answer != nil {
		if ev := f.deltas(f.answer.Finish(res.FinishReason == engine.FinishLength), true); ev != nil {
			evs = append(evs, ev)
		}
		if f.plan.Tools != nil {
			finish = toolsFinish(res, f.answer.Calls())
		}
	}
	evs = append(evs, f.chunk(wire.ChatChunkChoice{FinishReason: finish}))
	if f.includeUsage {
		c := f.chunk()
		c.Usage = UsageOf(res.Usage)
		if f.paced {
			m := PacedMetricsOf(res)
			c.Usage.Paced = &m
		}
		evs = append(evs, c)
	}
	return evs
}

func (f *chatResponder) whole(text string, lps []engine.TokenLogprobs, res engine.Result) any {
	h := f.h
	h.Object = wire.ObjectChatCompletion
	choice := wire.ChatChoice{Message: wire.Message{Role: "assistant", Content: text}, FinishReason: finishReason(res)}
	if f.plan.Reads() {
		msg := &choice.Message
		msg.ReasoningContent, msg.Content, msg.ToolCalls = f.plan.Parse(text, res.FinishReason == engine.FinishLength)
		if f.plan.Tools != nil {
			choice.FinishReason = toolsFinish(res, msg.ToolCalls)
		}
	}
	if f.logprobs {
		choice.Logprobs = chatLogprobsOf(lps)
	}
	return &wire.ChatCompletion{Header: h, Choices: []wire.ChatChoice{choice}, Usage: UsageOf(res.Usage)}
}

// toolsFinish is the finish reason of an answer that may call tools:
// "tool_calls" when it made calls and ended by itself.
func toolsFinish(res engine.Result, calls []wire.ToolCall) *string {
	if len(calls) > 0 && res.FinishReason == engine.FinishStop {
		s := "tool_calls"
		return &s
	}
	return finishReason(res)
}
