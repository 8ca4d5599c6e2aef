package openai

import (
	"time"

	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// oaiParams are the request fields shared by /v1/chat/completions and
// /v1/completions.
type oaiParams struct {
	Model          string              `json:"model"`
	MaxTokens      *int                `json:"max_tokens"`
	N              *int                `json:"n"`
	Stream         bool                `json:"stream"`
	StreamOptions  *wire.StreamOptions `json:"stream_options"`
	ResponseFormat *ResponseFormat     `json:"response_format"`
	// CacheSalt (vLLM's field) keeps the request's prompt prefix apart
	// in the cache: only requests with the same salt (and, with
	// CacheIsolationKey, the same key) reuse each other's.
	CacheSalt *string `json:"cache_salt"`
	SamplingParams
}

// request validates p within lim and translates it, less its prompt or
// messages. maxParam names the field maxTokens came from.
func (p *oaiParams) request(maxTokens *int, maxParam string, lim *serving.Limits) (serving.Request, *serving.Error) {
	r := serving.Request{IgnoreEOS: p.IgnoreEOS, Priority: p.Priority, CacheSalt: p.CacheSalt, Stream: p.Stream,
		Params: serving.Params{Grammar: "response_format"}}
	if p.N != nil && *p.N != 1 {
		return r, serving.Invalid("n", "'n' must be 1: this server generates one choice per request, got %d", *p.N)
	}
	if maxTokens != nil {
		if *maxTokens < 1 {
			return r, serving.Invalid(maxParam, "'%s' must be >= 1, got %d", maxParam, *maxTokens)
		}
		r.MaxTokens = *maxTokens
	}
	var e *serving.Error
	if r.Sampling, e = p.SamplingParams.Sampling(); e != nil {
		return r, e
	}
	if r.Stop, e = serving.ParseStop(p.Stop); e != nil {
		return r, e
	}
	if r.Grammar, e = p.ResponseFormat.Grammar(lim); e != nil {
		return r, e
	}
	return r, nil
}

// Lease names the model and the keep_alive the request asks.
func (p *oaiParams) Lease() (string, *serving.KeepAlive, bool) { return p.Model, p.KeepAlive, true }

// includeUsage reports whether a stream ends with a usage chunk.
func (p *oaiParams) includeUsage() bool {
	return p.StreamOptions != nil && p.StreamOptions.IncludeUsage
}

// header starts a response object: a fresh id with prefix, the time, the
// model's name.
func header(m *model.Model, prefix string) wire.Header {
	return wire.Header{ID: serving.NewID(prefix), Created: time.Now().Unix(), Model: m.Info().Name}
}
