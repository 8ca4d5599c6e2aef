package responses

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// Routes are the endpoints of OpenAI's Responses API, keeping stored
// responses in st.
func Routes(st *Store) []serving.Route {
	h := handlers{st: st}
	return []serving.Route{
		{Method: http.MethodPost, Paths: []string{"/v1/responses", "/responses"}, Handler: h.create},
		{Method: http.MethodGet, Paths: []string{"GET /v1/responses/{id}", "GET /responses/{id}"}, Handler: h.get},
		{Method: http.MethodDelete, Paths: []string{"DELETE /v1/responses/{id}", "DELETE /responses/{id}"}, Handler: h.delete},
	}
}

// handlers serve the routes over one store.
type handlers struct{ st *Store }

// create serves POST /v1/responses: the Response object, or with
// "stream": true its server-sent events. The request's context carries
// what the caller may refer to in the store, for the translation
// (createRequest.CheckMedia).
func (h handlers) create(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	r = r.WithContext(context.WithValue(r.Context(), priorKey{}, h.st.Prior(callerOwner(r))))
	serving.Handle(c, w, r, writeError, false, func(x *serving.Exchange, body *createRequest) *serving.Error {
		return h.serve(x, body)
	})
}

// priorKey is the context key of the Prior a request's translation reads.
type priorKey struct{}

// overloadCode is OpenAI's code for a server too busy for the request
// now, which Codex retries (it reads a 503 with another code, or a
// response.failed with another code, as a failure of the request).
const overloadCode = "server_is_overloaded"

// writeError writes e in OpenAI's envelope, an overload
// (serving.Error.Overloaded) with code server_is_overloaded.
func writeError(w http.ResponseWriter, e *serving.Error) { openai.WriteError(w, words(e)) }

// words is e as the Responses API says it: an overload's code is
// server_is_overloaded.
func words(e *serving.Error) *serving.Error {
	if !e.Overloaded() {
		return e
	}
	c := *e
	c.Code = overloadCode
	return &c
}

// get serves GET /v1/responses/{id}: a response stored by the caller.
func (h handlers) get(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	s, err := h.st.Get(callerOwner(r), r.PathValue("id"))
	if err != nil {
		openai.WriteError(w, storeError(err, r.PathValue("id")))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(s.Response)
}

// delete serves DELETE /v1/responses/{id}: OpenAI's deletion object.
func (h handlers) delete(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := h.st.Delete(callerOwner(r), id); err != nil {
		openai.WriteError(w, storeError(err, id))
		return
	}
	serving.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response.deleted", "deleted": true})
}

// callerOwner is whose responses a request sees: its API key's, or everyone's
// when the server has no keys.
func callerOwner(r *http.Request) string {
	if k := gate.FromContext(r.Context()).Key; k != nil {
		return k.ID
	}
	return ""
}

// storeError is a store's error as the API reports it.
func storeError(err error, id string) *serving.Error {
	if errors.Is(err, ErrNotFound) {
		return &serving.Error{Status: http.StatusNotFound, Code: "not_found",
			Message: "Response with id '" + id + "' not found."}
	}
	return &serving.Error{Status: http.StatusInternalServerError, Message: err.Error()}
}

// createRequest is the body of POST /v1/responses, decoded (Decode) as it
// is read; a body Decode refuses keeps its error for Check.
type createRequest struct {
	req *Request
	err *Error
	// t is req translated, media its media decoded (CheckMedia).
	t     *Translation
	media []engine.Media
}

// UnmarshalJSON decodes the body, one JSON value.
func (body *createRequest) UnmarshalJSON(b []byte) error {
	body.req, body.err = Decode(b)
	return nil
}

// Check refuses a body Decode refused, and one over lim before the model
// loads: more tools or input items than lim allows, instructions or an
// input text longer than a prompt may be. Translate counts again what
// only it sees (a namespace's functions), and what the request expands to
// once what it refers to in the store is resolved: the previous
// response's messages, the referenced items, each time it refers to one.
func (body *createRequest) Check(lim *serving.Limits) *serving.Error {
	if body.err != nil {
		return neutral(body.err)
	}
	r := body.req
	if r == nil {
		return serving.Invalid("", "request body must be a JSON object")
	}
	if len(r.Tools) > lim.MaxTools {
		return serving.OverLimit("tools", "max-tools", lim.MaxTools, "tools", "'tools' has %d tools", len(r.Tools))
	}
	if r.Instructions != nil {
		if e := lim.CheckPrompt(*r.Instructions, "instructions"); e != nil {
			return e
		}
	}
	switch in := bytes.TrimSpace(r.Input); {
	case len(in) > 0 && in[0] == '"':
		if len(in) > lim.MaxPromptBytes {
			return serving.OverLimit("input", "max-prompt-bytes", lim.MaxPromptBytes, "bytes", "'input' is %d bytes long", len(in))
		}
	case len(in) > 0 && in[0] == '[':
		var items []json.RawMessage
		if json.Unmarshal(in, &items) == nil && len(items) > lim.MaxMessages {
			return serving.OverLimit("input", "max-messages", lim.MaxMessages, "items", "'input' has %d items", len(items))
		}
	}
	return nil
}

// CheckMedia translates the request (Translate), what it refers to in
// the store resolved with the Prior in ctx, and decodes its images and
// sounds within lim: both before the model is leased, so that a request
// turned away whatever the model loads none (and evicts none). The
// translation is here rather than in Check since only here is there a
// context to carry the store.
func (body *createRequest) CheckMedia(ctx context.Context, lim *serving.Limits) *serving.Error {
	prior, _ := ctx.Value(priorKey{}).(Prior)
	t, te := Translate(body.req, prior, Limits{MaxItems: lim.MaxMessages, MaxTools: lim.MaxTools, MaxBytes: lim.MaxPromptBytes})
	if te != nil {
		return neutral(te)
	}
	var e *serving.Error
	if body.media, e = lim.DecodeMedia(ctx, t.Media, "input"); e != nil {
		return e
	}
	body.t = t
	return nil
}

// Media returns the images and sounds CheckMedia decoded.
func (body *createRequest) Media() []engine.Media { return body.media }

// Lease names the model the request is for.
func (body *createRequest) Lease() (string, *serving.KeepAlive, bool) {
	return body.req.Model, nil, true
}

// neutral is e as the core's error.
func neutral(e *Error) *serving.Error {
	return &serving.Error{Status: e.Status, Param: e.Param, Code: e.Code, Message: e.Message}
}

// serve answers the translated request (CheckMedia) through the core's
// generation loop and stores the response when asked to.
func (h handlers) serve(x *serving.Exchange, body *createRequest) *serving.Error {
	r, t := body.req, body.t
	lim := x.Core.Limits()
	own := callerOwner(x.R)
	if len(t.Dropped) > 0 {
		x.Core.Logger().Debug("responses: offered tools the model does not see", "types", t.Dropped)
	}
	c, e := coreRequest(r, t, lim)
	if e != nil {
		return e
	}
	c.Media = body.media
	req, g, e := x.Core.Build(x.Model, &c)
	if e != nil {
		return e
	}
	g.Framing = serving.SSE
	// A prompt over the context fails the response in its stream, as
	// OpenAI's does: Codex compacts its conversation on a response.failed
	// of code context_length_exceeded, and takes a 400 for a broken
	// request.
	g.InStream = func(e *serving.Error) bool { return e.Code == "context_length_exceeded" }
	resp := NewResponse(NewID("resp"), r.Model, time.Now().Unix(), r, t)
	enc := &encoder{s: NewStream(resp, t.Namespaces)}
	if e := x.Core.Generate(x, req, g, enc); e != nil {
		return e
	}
	if t.Store {
		// A response the store cannot keep (over its budget) is still
		// answered; it cannot be continued.
		s, err := Record(r, t, enc.s.Response())
		if err == nil {
			err = h.st.Put(own, resp.ID, s)
		}
		if err != nil {
			x.Core.Logger().Info("responses: not stored", "id", resp.ID, "err", err)
		}
	}
	return nil
}

// coreRequest is the translated request t (of r) in the core's words;
// text.format's schema is made a grammar within lim.
func coreRequest(r *Request, t *Translation, lim *serving.Limits) (serving.Request, *serving.Error) {
	c := serving.Request{
		Messages:  t.Messages,
		Tools:     serving.Tools{Defined: t.Tools, Choice: t.ToolChoice},
		Vars:      serving.TemplateVars{ReasoningEffort: t.ReasoningEffort},
		Sampling:  serving.Sampling{Temperature: t.Temperature, TopP: t.TopP},
		MaxTokens: t.MaxOutputTokens,
		CacheSalt: r.CacheSalt,
		Priority:  r.Priority,
		Stream:    r.Stream,
		Params:    serving.Params{Prompt: "input", Logprobs: "top_logprobs"},
	}
	if t.Format.JSON {
		c.Grammar, c.Params.Grammar = lim.JSONObjectGrammar(), "text.format"
		if t.Format.Schema != nil {
			var e *serving.Error
			if c.Grammar, e = serving.SchemaGrammar(t.Format.Schema, "text.format", lim); e != nil {
				return c, e
			}
		}
	}
	return c, nil
}

// encoder frames the core's answer through a Stream.
type encoder struct {
	s       *Stream
	started bool // Start's events were sent
}

// events are a Stream's events as the core writes them: each frames
// itself (serving.SSEAppender).
func events(evs []Event) []any {
	out := make([]any, len(evs))
	for i, e := range evs {
		out[i] = e
	}
	return out
}

// Start is response.created and response.in_progress.
func (f *encoder) Start() []any {
	f.started = true
	return events(f.s.Start())
}

// Deltas are the events of each piece of the answer.
func (f *encoder) Deltas(ds []wire.Delta, _ []wire.ToolCall, _ engine.Chunk) []any {
	var out []any
	for _, d := range ds {
		out = append(out, events(f.s.Delta(d))...)
	}
	return out
}

// End closes the open item and the response, with its usage.
func (f *encoder) End(res engine.Result, finish string) []any {
	return events(f.s.End(End{FinishReason: finish, Usage: usageOf(res.Usage)}, time.Now().Unix()))
}

// Whole is the Response of a whole answer: its pieces go through the
// Stream, whose response they complete.
func (f *encoder) Whole(a serving.Answer, res engine.Result) any {
	f.s.Start()
	if a.Reasoning != "" {
		f.s.Delta(wire.Delta{ReasoningContent: &a.Reasoning})
	}
	if a.Content != "" {
		f.s.Delta(wire.Delta{Content: &a.Content})
	}
	for i, c := range a.Calls {
		f.s.Delta(wire.Delta{ToolCalls: []wire.ToolCallDelta{{Index: i, ID: c.ID, Type: "function",
			Function: wire.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments}}}})
	}
	f.s.End(End{FinishReason: a.Finish, Usage: usageOf(res.Usage)}, time.Now().Unix())
	return f.s.Response()
}

// Error fails the response of a stream already begun: the open item
// closes, and response.failed carries the error's code (its type's name
// when it has none: server_error, invalid_request_error) and message,
// after response.created and response.in_progress when the stream had
// sent only pings. Codex reads a response's failure there (and no
// "error" event): code context_length_exceeded makes it compact its
// conversation, any other retry.
func (f *encoder) Error(e *serving.Error) any {
	var evs eventList
	if !f.started {
		f.started = true
		evs = f.s.Start()
	}
	code := words(e).Code
	if code == "" {
		code = wire.ErrorType(e.Status)
	}
	return append(evs, f.s.Fail(code, e.Message)...)
}

// eventList is events the core writes as one (serving.SSEAppender).
type eventList []Event

// AppendSSE appends each event.
func (l eventList) AppendSSE(dst []byte) []byte {
	for _, e := range l {
		dst = e.AppendSSE(dst)
	}
	return dst
}

// Ping keeps the stream alive with an SSE comment.
func (f *encoder) Ping() any { return nil }

// usageOf is the engine's usage in the stream's terms.
func usageOf(u engine.Usage) TokenUsage {
	return TokenUsage{PromptTokens: u.PromptTokens, CachedPromptTokens: u.CachedTokens, CompletionTokens: u.CompletionTokens, ReasoningTokens: u.ReasoningTokens}
}

// Ensure the adapters fit the core.
var (
	_ serving.Body        = (*createRequest)(nil)
	_ serving.MediaBody   = (*createRequest)(nil)
	_ serving.Encoder     = (*encoder)(nil)
	_ serving.SSEAppender = Event{}
	_ serving.SSEAppender = eventList{}
)
