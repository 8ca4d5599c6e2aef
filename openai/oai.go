package openai

import (
	"time"

	"github.com/corral-llm/corral/engine"
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

// request validates p within lim and builds the engine request, less its
// prompt. maxParam names the field maxTokens came from.
func oaiRequest(m *model.Model, p *oaiParams, maxTokens *int, maxParam string, lim *serving.Limits) (engine.Request, *serving.Error) {
	req := engine.Request{IgnoreEOS: p.IgnoreEOS}
	if p.N != nil && *p.N != 1 {
		return req, serving.Invalid("n", "'n' must be 1: this server generates one choice per request, got %d", *p.N)
	}
	if maxTokens != nil {
		if *maxTokens < 1 {
			return req, serving.Invalid(maxParam, "'%s' must be >= 1, got %d", maxParam, *maxTokens)
		}
		req.MaxTokens = *maxTokens
	}
	var e *serving.Error
	if req.Sampling, e = p.Sampling(m.Info().VocabSize, m.Info().CtxPerRequest); e != nil {
		return req, e
	}
	if req.Stop, e = serving.ParseStop(p.Stop); e != nil {
		return req, e
	}
	if req.Grammar, e = p.ResponseFormat.Grammar(lim); e != nil {
		return req, e
	}
	return req, nil
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
