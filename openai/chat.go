package openai

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/openai/wire"
)

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	Messages            []chat.Message  `json:"messages"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Tools               []chat.Tool     `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	// Chunking asks for paced output (corral's extension; see pace.go).
	Chunking *chunkingParams `json:"chunking"`
	// Logprobs asks for each content token's log-probability,
	// TopLogprobs (0 to MaxChatTopLogprobs) for the most likely tokens
	// at each step with it.
	Logprobs    *bool `json:"logprobs"`
	TopLogprobs *int  `json:"top_logprobs"`
	oaiParams
	chatUnsupported
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
	req, e := m.chatRequest(&body)
	if e != nil {
		WriteError(w, e)
		return
	}
	if req.Chunking != nil && !body.Stream {
		WriteError(w, invalid("chunking", "'chunking' paces a stream: it needs \"stream\": true"))
		return
	}
	f := &chatResponder{h: m.header("chatcmpl-"), includeUsage: body.includeUsage(), paced: req.Chunking != nil, logprobs: req.Logprobs}
	mode := genMode{stream: body.Stream, doneMarker: true, promptParam: "messages", grammarParam: "response_format", priority: body.Priority}
	if f.paced {
		mode.pacedID = f.h.ID
	}
	a.generate(w, r, m, req, mode, f)
}

// chatRequest validates a chat completion request and builds the engine
// request, its prompt rendered by the chat template.
func (m *Model) chatRequest(body *chatRequest) (engine.Request, *Error) {
	maxTokens, maxParam := body.MaxCompletionTokens, "max_completion_tokens"
	if maxTokens == nil {
		maxTokens, maxParam = body.MaxTokens, "max_tokens"
	}
	req, e := m.request(&body.oaiParams, maxTokens, maxParam)
	if e != nil {
		return req, e
	}
	if req.Chunking, req.PauseTimeout, e = body.Chunking.engine(); e != nil {
		return req, e
	}
	if req.Logprobs, req.TopLogprobs, e = chatLogprobs(body.Logprobs, body.TopLogprobs); e != nil {
		return req, e
	}
	if req.Logprobs && req.Chunking != nil {
		return req, invalid("logprobs", "'logprobs' cannot be combined with 'chunking'")
	}
	if req.Prompt, e = m.render(body); e != nil {
		return req, e
	}
	req.AddSpecial, req.ParseSpecial = true, true
	req.Plain = clientSpans(req.Prompt, body.Messages)
	req.Stop = append(req.Stop, m.tmpl.Stops()...)
	return req, nil
}

// render applies the chat template to the request's messages.
func (m *Model) render(body *chatRequest) (string, *Error) {
	if len(body.Messages) == 0 {
		return "", invalid("messages", "'messages' must be a non-empty array")
	}
	opt := chat.Options{AddGenerationPrompt: true, BOSToken: m.bos, EOSToken: m.eos}
	var choice string
	if json.Unmarshal(body.ToolChoice, &choice) != nil || choice != "none" {
		opt.Tools = body.Tools
	}
	prompt, err := m.tmpl.Render(body.Messages, opt)
	if err != nil {
		if errors.Is(err, chat.ErrInvalidMessages) {
			return "", invalid("messages", "%v", err)
		}
		return "", &Error{Status: http.StatusInternalServerError, Type: TypeServer, Message: "render chat template: " + err.Error()}
	}
	// Templates often start with the BOS text; the tokenizer adds BOS
	// itself (AddSpecial), so a second one would change the prompt.
	if m.info.AddBOS && m.bos != "" {
		prompt = strings.TrimPrefix(prompt, m.bos)
	}
	return prompt, nil
}

// clientSpans finds the message contents in the rendered prompt, in
// order, so that the engine tokenizes them as plain text: a user who types
// "<|im_end|><|im_start|>system" gets those characters, not control
// tokens, while the template's own markers stay special. A content the
// template changed beyond trimming is not found and not marked.
func clientSpans(prompt string, msgs []chat.Message) []engine.Span {
	var spans []engine.Span
	at := 0
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
		}
	}
	return spans
}

// chatResponder shapes chat.completion and chat.completion.chunk objects.
type chatResponder struct {
	h            wire.Header
	includeUsage bool
	paced        bool // each text event is a chunk (wire.ChunkInfo), usage has PacedMetrics
	logprobs     bool // text events and the message carry logprobs
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

func (f *chatResponder) streamEnd(res engine.Result) []any {
	evs := []any{f.chunk(wire.ChatChunkChoice{FinishReason: finishReason(res)})}
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
	if f.logprobs {
		choice.Logprobs = chatLogprobsOf(lps)
	}
	return &wire.ChatCompletion{Header: h, Choices: []wire.ChatChoice{choice}, Usage: UsageOf(res.Usage)}
}
