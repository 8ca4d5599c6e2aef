package openai

import (
	"encoding/json"
	"net/http"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/serving"
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
	// req is the request translated by Check.
	req serving.Request
}

// Check refuses what no model serves, before the model loads, and
// translates the request.
func (body *completionRequest) Check(lim *serving.Limits) *serving.Error {
	if e := body.completionUnsupported.check(); e != nil {
		return e
	}
	var e *serving.Error
	r, e := body.oaiParams.request(body.MaxTokens, "max_tokens", lim)
	if e != nil {
		return e
	}
	r.Params.Prompt, r.Params.Logprobs = "prompt", "logprobs"
	if n := body.Logprobs; n != nil {
		if *n < 0 || *n > MaxCompletionLogprobs {
			return serving.Invalid("logprobs", "'logprobs' must be in [0, %d], got %d", MaxCompletionLogprobs, *n)
		}
		r.Logprobs, r.TopLogprobs = true, *n
	}
	if r.Prompt, e = serving.ParsePrompt(body.Prompt); e != nil {
		return e
	}
	if e := lim.CheckPrompt(r.Prompt.Text, "prompt"); e != nil {
		return e
	}
	body.req = r
	return nil
}

// Completions serves POST /v1/completions.
func Completions(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, WriteError, false, serveCompletion)
}

func serveCompletion(x *serving.Exchange, body *completionRequest) *serving.Error {
	req, g, e := x.Core.Build(x.Model, &body.req)
	if e != nil {
		return e
	}
	f := &textEncoder{h: header(x.Model, "cmpl-"), includeUsage: body.includeUsage(), logprobs: req.Logprobs}
	g.Framing = serving.SSEDone
	return x.Core.Generate(x, req, g, f)
}

// textEncoder shapes text_completion objects, streamed or whole.
type textEncoder struct {
	h            wire.Header
	includeUsage bool
	logprobs     bool        // text events and the choice carry logprobs
	offsets      textOffsets // text_offset across a stream's events
}

func (f *textEncoder) object(choices ...wire.TextChoice) *wire.TextCompletion {
	h := f.h
	h.Object = wire.ObjectTextCompletion
	return &wire.TextCompletion{Header: h, Choices: append([]wire.TextChoice{}, choices...)}
}

func (f *textEncoder) Start() []any { return nil }

// Deltas is the text of the one delta a plan that reads nothing gives.
func (f *textEncoder) Deltas(ds []wire.Delta, _ []wire.ToolCall, c engine.Chunk) []any {
	choice := wire.TextChoice{Text: ds[0].Text()}
	if f.logprobs {
		choice.Logprobs = completionLogprobsOf(c.Logprobs, &f.offsets)
	}
	return []any{f.object(choice)}
}

func (f *textEncoder) End(res engine.Result, finish string) []any {
	evs := []any{f.object(wire.TextChoice{FinishReason: &finish})}
	if f.includeUsage {
		c := f.object()
		c.Usage = UsageOf(res.Usage)
		evs = append(evs, c)
	}
	return evs
}

func (f *textEncoder) Whole(a serving.Answer, res engine.Result) any {
	choice := wire.TextChoice{Text: a.Text, FinishReason: &a.Finish}
	if f.logprobs {
		choice.Logprobs = completionLogprobsOf(a.Logprobs, &f.offsets)
	}
	c := f.object(choice)
	c.Usage = UsageOf(res.Usage)
	return c
}

func (f *textEncoder) Error(e *serving.Error) any { return Envelope(e) }

func (f *textEncoder) Ping() any { return nil }
