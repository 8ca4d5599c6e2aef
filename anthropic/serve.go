package anthropic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// Routes are the endpoints of Anthropic's Messages API.
func Routes() []serving.Route {
	return []serving.Route{
		{Method: http.MethodPost, Paths: []string{"/v1/messages"}, Handler: Messages},
		{Method: http.MethodPost, Paths: []string{"/v1/messages/count_tokens"}, Handler: CountTokens},
	}
}

// Messages serves POST /v1/messages: the answer as a Message object, or
// with "stream": true as Messages server-sent events.
func Messages(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, WriteError, false, serveMessages)
}

// CountTokens serves POST /v1/messages/count_tokens: the tokens of the
// prompt the same Messages request would have, rendered by the model's
// chat template with its tools; nothing is generated.
func CountTokens(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, WriteError, false, serveCountTokens)
}

// StatusOverloaded is the status of Anthropic's overloaded_error, which
// its clients retry (as they retry every 5xx, 408, 409 and 429).
const StatusOverloaded = 529

// WriteError writes e in Anthropic's error envelope, with the status that
// picks its type (see NewError): an overload (serving.Error.Overloaded)
// is a 529 (the other dialects answer it 503),
// and it and any 503 carry Retry-After: 1, as the other dialects' 503s
// do.
func WriteError(w http.ResponseWriter, e *serving.Error) {
	status := statusOf(e)
	if status == http.StatusServiceUnavailable || status == StatusOverloaded {
		w.Header().Set("Retry-After", "1")
	}
	serving.WriteJSON(w, status, errorEnvelope(e))
}

// statusOf is the status Anthropic's API answers e with.
func statusOf(e *serving.Error) int {
	if e.Overloaded() {
		return StatusOverloaded
	}
	return e.Status
}

// errorEnvelope is e as Anthropic's error envelope. A prompt longer than
// the context is told in Anthropic's words, "prompt is too long: N
// tokens > M maximum", which Claude Code reads to compact its
// conversation by the difference.
func errorEnvelope(e *serving.Error) ErrorEnvelope {
	var pt *engine.PromptTooLongError
	if errors.As(e, &pt) {
		return NewError(e.Status, e.Code, PromptTooLong(pt.Tokens, pt.Max), "", "")
	}
	return NewError(statusOf(e), e.Code, e.Message, e.Param, "")
}

// PromptTooLong is Anthropic's message for a prompt of tokens tokens,
// more than max.
func PromptTooLong(tokens, max int) string {
	return fmt.Sprintf("prompt is too long: %d tokens > %d maximum", tokens, max)
}

// messagesRequest is the body of POST /v1/messages, translated as it is
// decoded (ParseMessages); a body the translation refuses keeps its
// error for Check.
type messagesRequest struct {
	req *Request
	err *Error
	// core is req in the core's words (Check).
	core serving.Request
}

// countRequest is the body of POST /v1/messages/count_tokens
// (ParseCountTokens).
type countRequest struct {
	messagesRequest
}

// UnmarshalJSON translates the body, one JSON value.
func (body *messagesRequest) UnmarshalJSON(b []byte) error {
	body.req, body.err = ParseMessages(b)
	return nil
}

// UnmarshalJSON translates the body, one JSON value.
func (body *countRequest) UnmarshalJSON(b []byte) error {
	body.req, body.err = ParseCountTokens(b)
	return nil
}

// Check refuses a body the translation refused, and one with more
// messages, tools or prompt text than lim allows, before the model loads.
func (body *messagesRequest) Check(lim *serving.Limits) *serving.Error {
	if body.err != nil {
		return &serving.Error{Status: body.err.Status, Param: body.err.Param, Message: body.err.Message}
	}
	if body.req == nil {
		return serving.Invalid("", "request body must be a JSON object")
	}
	r := body.req
	if len(r.Messages) > lim.MaxMessages {
		return serving.OverLimit("messages", "max-messages", lim.MaxMessages, "messages", "messages: %d messages", len(r.Messages))
	}
	if e := lim.CheckTools(r.Tools); e != nil {
		return e
	}
	// The text the template will render, bounded before it renders.
	n := 0
	for _, m := range r.Messages {
		n += len(m.Content) + len(m.ReasoningContent)
		for _, c := range m.ToolCalls {
			n += len(c.Function.Arguments)
		}
	}
	for _, t := range r.Tools {
		n += len(t.Function.Description) + len(t.Function.Parameters)
	}
	if n > lim.MaxPromptBytes {
		return serving.OverLimit("messages", "max-prompt-bytes", lim.MaxPromptBytes, "bytes", "messages: the messages and tools have %d bytes of text", n)
	}
	var e *serving.Error
	body.core, e = coreRequest(r, lim)
	return e
}

// CheckMedia decodes the request's images (image blocks) within lim,
// before the model is leased: the core's Media.
func (body *messagesRequest) CheckMedia(ctx context.Context, lim *serving.Limits) *serving.Error {
	var e *serving.Error
	body.core.Media, e = lim.DecodeMedia(ctx, body.req.Media, "messages")
	return e
}

// Media returns the images CheckMedia decoded.
func (body *messagesRequest) Media() []engine.Media { return body.core.Media }

// Lease names the model the request is for. With one model served, any
// name is served by it (see registry.Registry.Acquire): Claude Code's
// own model names reach the model corral serves.
func (body *messagesRequest) Lease() (string, *serving.KeepAlive, bool) {
	return body.req.Model, nil, true
}

// serveMessages answers a Messages request through the core's generation
// loop, framed by an encoder over Stream (or Whole).
func serveMessages(x *serving.Exchange, body *messagesRequest) *serving.Error {
	r := body.req
	req, g, e := x.Core.Build(x.Model, &body.core)
	if e != nil {
		return e
	}
	meta := Meta{ID: NewID(), Model: r.Model, StopSequences: r.StopSequences, OmitThinking: r.OmitThinking}
	g.Framing = serving.SSE
	return x.Core.Generate(x, req, g, newEncoder(meta))
}

// serveCountTokens renders the prompt a Messages request would have and
// counts its tokens, an image's placeholder cells included.
func serveCountTokens(x *serving.Exchange, body *countRequest) *serving.Error {
	req, _, e := x.Core.Build(x.Model, &body.core)
	if e != nil {
		return e
	}
	if len(req.Media) > 0 {
		// The tokens generation would evaluate: the text between images
		// tokenized piece by piece, each image's cells as the projector
		// makes them. A prompt over the context is refused, with its
		// count so far, as a generation's would be.
		toks, err := x.Model.Engine().Render(x.Context(), req)
		if err != nil {
			return serving.SubmitError(err, "messages")
		}
		serving.WriteJSON(x.W, http.StatusOK, TokenCount{InputTokens: len(toks)})
		return nil
	}
	// The prompt as generation tokenizes it; client text that spells the
	// model's special tokens counts here as those tokens, where a
	// generation reads it as plain text (engine.Request.Plain).
	toks, err := x.Model.Engine().Tokenize(req.Prompt, req.AddSpecial, req.ParseSpecial)
	if err != nil {
		return serving.SubmitError(err, "messages")
	}
	serving.WriteJSON(x.W, http.StatusOK, TokenCount{InputTokens: len(toks)})
	return nil
}

// coreRequest is r in the core's words; output_config.format's schema
// is made a grammar within lim.
func coreRequest(r *Request, lim *serving.Limits) (serving.Request, *serving.Error) {
	c := serving.Request{
		Messages:        r.Messages,
		Tools:           serving.Tools{Defined: r.Tools, Choice: r.ToolChoice},
		Vars:            serving.TemplateVars{Thinking: r.Thinking, ReasoningEffort: r.Effort},
		ReasoningBudget: r.Budget,
		Sampling:        serving.Sampling{Temperature: r.Temperature, TopP: r.TopP, TopK: r.TopK},
		MaxTokens:       r.MaxTokens,
		Stop:            r.StopSequences,
		CacheSalt:       r.CacheSalt,
		Priority:        r.Priority,
		Stream:          r.Stream,
		Params:          serving.Params{Prompt: "messages", Logprobs: "logprobs"},
	}
	if r.Format != nil {
		c.Params.Grammar = "output_config.format"
		var e *serving.Error
		if c.Grammar, e = serving.SchemaGrammar(r.Format, "output_config.format", lim); e != nil {
			return c, e
		}
	}
	return c, nil
}

// encoder frames the core's answer through a Stream (or Whole): the
// Stream writes each event into events, whence it goes to the core as
// an event that frames itself.
type encoder struct {
	meta   Meta
	events sseEvents
	s      *Stream
}

func newEncoder(m Meta) *encoder {
	f := &encoder{meta: m}
	f.s = NewStream(&f.events, m)
	return f
}

// Start opens the message. Its usage is written with message_delta: the
// prompt's tokens are not known to the encoder yet.
func (f *encoder) Start() []any {
	f.s.Start(Usage{})
	return f.events.take()
}

// Deltas writes each piece of the answer; the complete calls came as
// deltas already.
func (f *encoder) Deltas(ds []wire.Delta, _ []wire.ToolCall, _ engine.Chunk) []any {
	for _, d := range ds {
		f.s.Delta(d)
	}
	return f.events.take()
}

// End closes the message, with its stop reason and usage.
func (f *encoder) End(res engine.Result, finish string) []any {
	f.s.End(End{Finish: finish, StopWord: res.StopWord, Usage: usageOf(res.Usage)})
	return f.events.take()
}

// Whole is the Message of a whole answer.
func (f *encoder) Whole(a serving.Answer, res engine.Result) any {
	msg := wire.Message{Role: "assistant", Content: a.Content, ReasoningContent: a.Reasoning, ToolCalls: a.Calls}
	return Whole(f.meta, msg, End{Finish: a.Finish, StopWord: res.StopWord, Usage: usageOf(res.Usage)})
}

// Error is the error event of a stream already begun.
func (f *encoder) Error(e *serving.Error) any {
	f.s.Error(errorEnvelope(e))
	return f.events.one()
}

// Ping is Anthropic's ping event.
func (f *encoder) Ping() any {
	f.s.Ping()
	return f.events.one()
}

// usageOf is the engine's usage in the encoder's terms.
func usageOf(u engine.Usage) Usage {
	return Usage{PromptTokens: u.PromptTokens, CachedTokens: u.CachedTokens, CompletionTokens: u.CompletionTokens, ReasoningTokens: u.ReasoningTokens}
}

// sseEvents collects what a Stream writes: each Write is one event.
type sseEvents struct{ evs []any }

// Write keeps a copy of b, one event.
func (c *sseEvents) Write(b []byte) (int, error) {
	c.evs = append(c.evs, sseEvent(bytes.Clone(b)))
	return len(b), nil
}

// take returns the events written since the last take.
func (c *sseEvents) take() []any {
	evs := c.evs
	c.evs = nil
	return evs
}

// one returns the one event written since the last take (an empty one
// when the Stream wrote nothing, having ended).
func (c *sseEvents) one() any {
	evs := c.take()
	if len(evs) == 0 {
		return sseEvent(nil)
	}
	return evs[0]
}

// sseEvent is one server-sent event as a Stream framed it.
type sseEvent []byte

// AppendSSE appends the event (serving.SSEAppender).
func (e sseEvent) AppendSSE(dst []byte) []byte { return append(dst, e...) }

// Ensure the adapters fit the core.
var (
	_ serving.Body        = (*messagesRequest)(nil)
	_ serving.Body        = (*countRequest)(nil)
	_ serving.MediaBody   = (*messagesRequest)(nil)
	_ serving.MediaBody   = (*countRequest)(nil)
	_ serving.Encoder     = (*encoder)(nil)
	_ serving.SSEAppender = sseEvent(nil)
)
