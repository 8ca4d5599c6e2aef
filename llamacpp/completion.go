// Package llamacpp serves llama-server's own endpoints (/completion,
// /tokenize, /detokenize, /apply-template, /slots, /props) in its shapes,
// on package serving's core, for the scripts and clients written against
// llama.cpp's server.
package llamacpp

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// llamaRequest is the body of llama-server's POST /completion.
type llamaRequest struct {
	Prompt      json.RawMessage `json:"prompt"`
	Model       string          `json:"model"`
	NPredict    *int            `json:"n_predict"`
	MaxTokens   *int            `json:"max_tokens"` // alias of n_predict
	Stream      bool            `json:"stream"`
	CachePrompt *bool           `json:"cache_prompt"`
	IDSlot      *int            `json:"id_slot"`
	Grammar     string          `json:"grammar"`
	JSONSchema  json.RawMessage `json:"json_schema"`
	NProbs      *int            `json:"n_probs"`
	CacheSalt   *string         `json:"cache_salt"` // as on /v1/completions
	openai.SamplingParams
	// req is the request translated by Check.
	req serving.Request
}

// Check validates the request within lim and translates it, before the
// model loads.
func (body *llamaRequest) Check(lim *serving.Limits) *serving.Error {
	var e *serving.Error
	body.req, e = body.translate(lim)
	return e
}

// Lease names the model and the keep_alive the request asks.
func (body *llamaRequest) Lease() (string, *serving.KeepAlive, bool) {
	return body.Model, body.KeepAlive, true
}

// Completion serves llama-server's POST /completion. Its stream is
// llama.cpp's: "data: {content, stop:false}" events, then one with
// stop:true and the totals; no [DONE] marker.
func Completion(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, openai.WriteError, false, serveCompletion)
}

func serveCompletion(x *serving.Exchange, body *llamaRequest) *serving.Error {
	req, g, e := x.Core.Build(x.Model, &body.req)
	if e != nil {
		return e
	}
	f := &llamaEncoder{model: x.Model.Info().Name, probs: req.Logprobs}
	g.Framing = serving.SSE
	return x.Core.Generate(x, req, g, f)
}

// translate validates a /completion request within lim and translates
// it.
func (body *llamaRequest) translate(lim *serving.Limits) (serving.Request, *serving.Error) {
	r := serving.Request{
		IgnoreEOS:     body.IgnoreEOS,
		NoCachePrompt: body.CachePrompt != nil && !*body.CachePrompt,
		Grammar:       body.Grammar,
		Priority:      body.Priority,
		CacheSalt:     body.CacheSalt,
		Stream:        body.Stream,
		Params:        serving.Params{Prompt: "prompt", Grammar: "grammar", Logprobs: "n_probs"},
	}
	var e *serving.Error
	if r.Prompt, e = serving.ParsePrompt(body.Prompt); e != nil {
		return r, e
	}
	if e := lim.CheckPrompt(r.Prompt.Text, "prompt"); e != nil {
		return r, e
	}
	n, param := body.NPredict, "n_predict"
	if n == nil {
		n, param = body.MaxTokens, "max_tokens"
	}
	if n != nil {
		switch {
		case *n == -1:
			// unlimited: until the context is full
		case *n < 1:
			return r, serving.Invalid(param, "'%s' must be -1 (unlimited) or >= 1, got %d", param, *n)
		default:
			r.MaxTokens = *n
		}
	}
	if p := body.NProbs; p != nil && *p != 0 {
		if *p < 0 || *p > MaxNProbs {
			return r, serving.Invalid("n_probs", "'n_probs' must be in [0, %d], got %d", MaxNProbs, *p)
		}
		r.Logprobs, r.TopLogprobs = true, *p
	}
	if body.IDSlot != nil && *body.IDSlot >= 0 {
		r.Slot = body.IDSlot
	}
	if r.Sampling, e = body.Sampling(); e != nil {
		return r, e
	}
	if r.Stop, e = serving.ParseStop(body.Stop); e != nil {
		return r, e
	}
	if !serving.IsNull(body.JSONSchema) {
		if body.Grammar != "" {
			return r, serving.Invalid("json_schema", "give either 'grammar' or 'json_schema', not both")
		}
		r.Params.Grammar = "json_schema"
		if r.Grammar, e = serving.SchemaGrammar(body.JSONSchema, "json_schema", lim); e != nil {
			return r, e
		}
	}
	return r, nil
}

// llamaEncoder shapes llama-server's /completion objects.
type llamaEncoder struct {
	model     string
	predicted int  // tokens streamed so far
	probs     bool // n_probs: events and the answer carry completion_probabilities
}

type llamaPartial struct {
	Content         string `json:"content"`
	Stop            bool   `json:"stop"`
	TokensPredicted int    `json:"tokens_predicted"`
	// Probs has the entries of the tokens whose text begins in Content.
	Probs []llamaProb `json:"completion_probabilities,omitempty"`
}

type llamaFinal struct {
	Content string `json:"content"`
	// Probs has every token's entry when not streaming (a stream's final
	// event has none, as llama-server's).
	Probs           []llamaProb  `json:"completion_probabilities,omitempty"`
	Stop            bool         `json:"stop"`
	Model           string       `json:"model"`
	IDSlot          int          `json:"id_slot"`
	TokensPredicted int          `json:"tokens_predicted"`
	TokensEvaluated int          `json:"tokens_evaluated"`
	TokensCached    int          `json:"tokens_cached"`
	StopType        string       `json:"stop_type"` // "eos", "word", "limit"
	StoppingWord    string       `json:"stopping_word"`
	Truncated       bool         `json:"truncated"`
	Timings         llamaTimings `json:"timings"`
}

// llamaTimings are llama-server's per-request timings.
type llamaTimings struct {
	PromptN             int     `json:"prompt_n"`
	PromptMS            float64 `json:"prompt_ms"`
	PromptPerTokenMS    float64 `json:"prompt_per_token_ms"`
	PromptPerSecond     float64 `json:"prompt_per_second"`
	PredictedN          int     `json:"predicted_n"`
	PredictedMS         float64 `json:"predicted_ms"`
	PredictedPerTokenMS float64 `json:"predicted_per_token_ms"`
	PredictedPerSecond  float64 `json:"predicted_per_second"`
}

func (f *llamaEncoder) Start() []any { return nil }

// Deltas is the text of the one delta a plan that reads nothing gives.
func (f *llamaEncoder) Deltas(ds []wire.Delta, _ []wire.ToolCall, c engine.Chunk) []any {
	f.predicted += c.Tokens
	p := &llamaPartial{Content: ds[0].Text(), TokensPredicted: f.predicted}
	if f.probs {
		p.Probs = llamaProbsOf(c.Logprobs)
	}
	return []any{p}
}

func (f *llamaEncoder) End(res engine.Result, _ string) []any { return []any{f.final("", nil, res)} }

func (f *llamaEncoder) Whole(a serving.Answer, res engine.Result) any {
	return f.final(a.Text, a.Logprobs, res)
}

func (f *llamaEncoder) Error(e *serving.Error) any { return openai.Envelope(e) }

func (f *llamaEncoder) Ping() any { return nil }

// final is the last object: the totals, and the whole text and its
// probabilities when not streamed.
func (f *llamaEncoder) final(text string, lps []engine.TokenLogprobs, res engine.Result) any {
	stopType := "limit"
	if res.FinishReason == engine.FinishStop {
		stopType = "eos"
		if res.StopWord != "" {
			stopType = "word"
		}
	}
	u := res.Usage
	var probs []llamaProb
	if f.probs && lps != nil {
		probs = llamaProbsOf(lps)
	}
	return &llamaFinal{
		Content:         text,
		Probs:           probs,
		Stop:            true,
		Model:           f.model,
		IDSlot:          res.Slot,
		TokensPredicted: u.CompletionTokens,
		TokensEvaluated: u.PromptTokens,
		TokensCached:    u.CachedTokens,
		StopType:        stopType,
		StoppingWord:    res.StopWord,
		Timings:         timingsOf(res),
	}
}

func timingsOf(res engine.Result) llamaTimings {
	t := llamaTimings{
		PromptN:     res.Usage.PromptTokens - res.Usage.CachedTokens,
		PromptMS:    ms(res.Timings.Prefill),
		PredictedN:  res.Usage.CompletionTokens,
		PredictedMS: ms(res.Timings.Decode),
	}
	t.PromptPerTokenMS, t.PromptPerSecond = rates(t.PromptN, t.PromptMS)
	t.PredictedPerTokenMS, t.PredictedPerSecond = rates(t.PredictedN, t.PredictedMS)
	return t
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// rates returns milliseconds per token and tokens per second, zero when
// either is unknown.
func rates(n int, msTotal float64) (perToken, perSecond float64) {
	if n == 0 || msTotal == 0 {
		return 0, 0
	}
	return msTotal / float64(n), float64(n) * 1000 / msTotal
}
