package openai

import (
	"encoding/json"
	"net/http"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/wire"
)

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	Prompt json.RawMessage `json:"prompt"`
	// Logprobs asks for each token's log-probability and that many (0 to
	// MaxCompletionLogprobs) of the most likely tokens at each step.
	Logprobs *int `json:"logprobs"`
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
	if n := body.Logprobs; n != nil && (*n < 0 || *n > MaxCompletionLogprobs) {
		WriteError(w, invalid("logprobs", "'logprobs' must be in [0, %d], got %d", MaxCompletionLogprobs, *n))
		return
	}
	l, e := a.acquire(r.Context(), body.Model, body.KeepAlive)
	if e != nil {
		WriteError(w, e)
		return
	}
	defer l.Release()
	m := l.Model()
	req, e := oaiRequest(m, &body.oaiParams, body.MaxTokens, "max_tokens", &a.limits)
	if e != nil {
		WriteError(w, e)
		return
	}
	if req.Prompt, req.Tokens, e = parsePrompt(body.Prompt, m.Info().VocabSize); e != nil {
		WriteError(w, e)
		return
	}
	if e := a.limits.checkPrompt(req.Prompt, "prompt"); e != nil {
		WriteError(w, e)
		return
	}
	req.AddSpecial, req.ParseSpecial = true, true
	if body.Logprobs != nil {
		req.Logprobs, req.TopLogprobs = true, *body.Logprobs
	}
	if e := a.limits.checkLogprobs(&req, m.Info().SlotCtx, "logprobs"); e != nil {
		WriteError(w, e)
		return
	}
	f := &textResponder{h: header(m, "cmpl-"), includeUsage: body.includeUsage(), logprobs: req.Logprobs}
	mode := genMode{stream: body.Stream, doneMarker: true, promptParam: "prompt", grammarParam: "response_format", priority: body.Priority, cacheSalt: body.CacheSalt}
	a.generate(w, r, m, req, mode, f)
}

// textResponder shapes text_completion objects, streamed or whole.
type textResponder struct {
	h            wire.Header
	includeUsage bool
	logprobs     bool        // text events and the choice carry logprobs
	offsets      textOffsets // text_offset across a stream's events
}

func (f *textResponder) object(choices ...wire.TextChoice) *wire.TextCompletion {
	h := f.h
	h.Object = wire.ObjectTextCompletion
	return &wire.TextCompletion{Header: h, Choices: append([]wire.TextChoice{}, choices...)}
}

func (f *textResponder) streamStart() any { return nil }

func (f *textResponder) streamText(text string, c engine.Chunk) any {
	choice := wire.TextChoice{Text: text}
	if f.logprobs {
		choice.Logprobs = completionLogprobsOf(c.Logprobs, &f.offsets)
	}
	return f.object(choice)
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

func (f *textResponder) whole(text string, lps []engine.TokenLogprobs, res engine.Result) any {
	choice := wire.TextChoice{Text: text, FinishReason: finishReason(res)}
	if f.logprobs {
		choice.Logprobs = completionLogprobsOf(lps, &f.offsets)
	}
	c := f.object(choice)
	c.Usage = UsageOf(res.Usage)
	return c
}
