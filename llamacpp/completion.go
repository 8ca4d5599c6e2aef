// Package llamacpp serves llama-server's own endpoints (/completion,
// /tokenize, /detokenize, /apply-template, /slots, /props) in its shapes,
// on package serving's core, for the scripts and clients written against
// llama.cpp's server.
package llamacpp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/media"
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
	// req is the request translated by Check; media are the prompt's
	// multimodal_data (Check), which CheckMedia decodes into req.Media.
	req   serving.Request
	media []serving.MediaSource
}

// Check validates the request within lim and translates it, before the
// model loads.
func (body *llamaRequest) Check(lim *serving.Limits) *serving.Error {
	var e *serving.Error
	body.req, e = body.translate(lim)
	return e
}

// CheckMedia decodes the prompt's multimodal_data within lim, before the
// model is leased.
func (body *llamaRequest) CheckMedia(ctx context.Context, lim *serving.Limits) *serving.Error {
	var e *serving.Error
	body.req.Media, e = lim.DecodeMedia(ctx, body.media, "prompt.multimodal_data")
	return e
}

// Lease names the model and the keep_alive the request asks.
// Media returns the media CheckMedia decoded.
func (body *llamaRequest) Media() []engine.Media { return body.req.Media }

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
	if r.Prompt, body.media, e = parsePrompt(body.Prompt); e != nil {
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

// MediaMarker is where the prompt_string of a prompt with
// multimodal_data puts each medium: libmtmd's default marker, which
// llama-server takes when LLAMA_MEDIA_MARKER is set to it (it draws one
// at random otherwise, and tells it in /props).
const MediaMarker = "<__media__>"

// mediaPrompt is llama-server's prompt object: the prompt's text, and
// the media its markers stand for, in base64.
type mediaPrompt struct {
	PromptString   *string           `json:"prompt_string"`
	MultimodalData []json.RawMessage `json:"multimodal_data"`
}

// parsePrompt reads the prompt: what serving.ParsePrompt reads, or
// llama-server's prompt object (alone or the one element of an array),
// {"prompt_string": text, "multimodal_data": [base64, ...]}, the k-th
// MediaMarker of the text standing for the k-th medium (an image or a
// sound, told by its bytes). Each marker becomes chat.MediaMarker(k),
// which Build puts the medium in place of; markers and media that do not
// pair up are a 400. Without multimodal_data the text is a plain prompt,
// markers and all, as llama-server reads it.
func parsePrompt(raw json.RawMessage) (*serving.Prompt, []serving.MediaSource, *serving.Error) {
	var objs []mediaPrompt
	switch b := bytes.TrimSpace(raw); {
	case len(b) > 0 && b[0] == '{':
		objs = make([]mediaPrompt, 1)
		if err := json.Unmarshal(b, &objs[0]); err != nil {
			return nil, nil, serving.Invalid("prompt", "'prompt' as an object must be {\"prompt_string\": text, \"multimodal_data\": [base64, ...]}: %v", err)
		}
	case len(b) > 1 && b[0] == '[' && bytes.HasPrefix(bytes.TrimSpace(b[1:]), []byte("{")):
		if err := json.Unmarshal(b, &objs); err != nil || len(objs) != 1 {
			return nil, nil, serving.Invalid("prompt", "'prompt' as an array of objects must hold one {\"prompt_string\": text, \"multimodal_data\": [base64, ...]}")
		}
	default:
		p, e := serving.ParsePrompt(raw)
		return p, nil, e
	}
	o := objs[0]
	if o.PromptString == nil {
		return nil, nil, serving.Invalid("prompt.prompt_string", "'prompt.prompt_string' is required")
	}
	text := *o.PromptString
	if o.MultimodalData == nil {
		return &serving.Prompt{Text: text}, nil, nil
	}
	if n := strings.Count(text, MediaMarker); n != len(o.MultimodalData) {
		return nil, nil, serving.Invalid("prompt.multimodal_data", "'prompt.prompt_string' has %d media markers (%s) but 'prompt.multimodal_data' has %d media: each marker stands for the next medium", n, MediaMarker, len(o.MultimodalData))
	}
	srcs := make([]serving.MediaSource, len(o.MultimodalData))
	for k, d := range o.MultimodalData {
		p := fmt.Sprintf("prompt.multimodal_data[%d]", k)
		var b64 string
		if err := json.Unmarshal(d, &b64); err != nil {
			return nil, nil, serving.Invalid(p, "'%s' must be a string: an image or a sound in base64", p)
		}
		srcs[k] = serving.MediaSource{Param: p, Kind: media.KindUnknown, Base64: b64}
	}
	var b strings.Builder
	b.Grow(len(text))
	for k := 0; ; k++ {
		before, after, ok := strings.Cut(text, MediaMarker)
		b.WriteString(before)
		if !ok {
			break
		}
		b.WriteString(chat.MediaMarker(k))
		text = after
	}
	return &serving.Prompt{Text: b.String()}, srcs, nil
}

var _ serving.MediaBody = (*llamaRequest)(nil)

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
