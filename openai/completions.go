package openai

import (
	"encoding/json"
	"net/http"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/openai/wire"
)

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	Prompt json.RawMessage `json:"prompt"`
	oaiParams
	completionUnsupported
}

// Completions serves POST /v1/completions.
func (a *API) Completions(w http.ResponseWriter, r *http.Request) {
	var body completionRequest
	if e := decodeBody(r, &body); e != nil {
		WriteError(w, e)
		return
	}
	if e := body.completionUnsupported.check(); e != nil { // before the model loads
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
	req, e := m.request(&body.oaiParams, body.MaxTokens, "max_tokens")
	if e != nil {
		WriteError(w, e)
		return
	}
	if req.Prompt, req.Tokens, e = parsePrompt(body.Prompt, m.info.VocabSize); e != nil {
		WriteError(w, e)
		return
	}
	req.AddSpecial, req.ParseSpecial = true, true
	f := &textResponder{h: m.header("cmpl-"), includeUsage: body.includeUsage()}
	a.generate(w, r, m, req, genMode{stream: body.Stream, doneMarker: true, promptParam: "prompt", grammarParam: "response_format", priority: body.Priority}, f)
}

// textResponder shapes text_completion objects, streamed or whole.
type textResponder struct {
	h            wire.Header
	includeUsage bool
}

func (f *textResponder) object(choices ...wire.TextChoice) *wire.TextCompletion {
	h := f.h
	h.Object = wire.ObjectTextCompletion
	return &wire.TextCompletion{Header: h, Choices: append([]wire.TextChoice{}, choices...)}
}

func (f *textResponder) streamStart() any { return nil }

func (f *textResponder) streamText(text string, _ engine.Chunk) any {
	return f.object(wire.TextChoice{Text: text})
}

func (f *textResponder) streamEnd(res engine.Result) []any {
	evs := []any{f.object(wire.TextChoice{FinishReason: finishReason(res)})}
	if f.includeUsage {
		c := f.object()
		c.Usage = UsageOf(res.Usage)
		evs = append(evs, c)
	}
	return evs
}

func (f *textResponder) whole(text string, res engine.Result) any {
	c := f.object(wire.TextChoice{Text: text, FinishReason: finishReason(res)})
	c.Usage = UsageOf(res.Usage)
	return c
}
