package openai

import (
	"encoding/json"
	"net/http"

	"github.com/corral-llm/corral/engine"
)

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	Prompt json.RawMessage `json:"prompt"`
	oaiParams
}

// Completions serves POST /v1/completions.
func (a *API) Completions(w http.ResponseWriter, r *http.Request) {
	var body completionRequest
	if e := decodeBody(r, &body); e != nil {
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
	h            header
	includeUsage bool
}

type textChoice struct {
	Text         string    `json:"text"`
	Index        int       `json:"index"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type textCompletion struct {
	header
	Choices []textChoice `json:"choices"`
	Usage   *Usage       `json:"usage,omitempty"`
}

func (f *textResponder) object(choices ...textChoice) *textCompletion {
	h := f.h
	h.Object = "text_completion"
	return &textCompletion{header: h, Choices: append([]textChoice{}, choices...)}
}

func (f *textResponder) streamStart() any { return nil }

func (f *textResponder) streamText(text string, _ engine.Chunk) any {
	return f.object(textChoice{Text: text})
}

func (f *textResponder) streamEnd(res engine.Result) []any {
	evs := []any{f.object(textChoice{FinishReason: finishReason(res)})}
	if f.includeUsage {
		c := f.object()
		c.Usage = UsageOf(res.Usage)
		evs = append(evs, c)
	}
	return evs
}

func (f *textResponder) whole(text string, res engine.Result) any {
	c := f.object(textChoice{Text: text, FinishReason: finishReason(res)})
	c.Usage = UsageOf(res.Usage)
	return c
}
