package openai

import (
	"time"

	"github.com/corral-llm/corral/engine"
)

// oaiParams are the request fields shared by /v1/chat/completions and
// /v1/completions.
type oaiParams struct {
	Model         string `json:"model"`
	MaxTokens     *int   `json:"max_tokens"`
	N             *int   `json:"n"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ResponseFormat *responseFormat `json:"response_format"`
	samplingParams
}

// request validates p and builds the engine request, less its prompt.
// maxParam names the field maxTokens came from.
func (m *Model) request(p *oaiParams, maxTokens *int, maxParam string) (engine.Request, *Error) {
	req := engine.Request{IgnoreEOS: p.IgnoreEOS}
	if p.N != nil && *p.N != 1 {
		return req, invalid("n", "'n' must be 1: this server generates one choice per request, got %d", *p.N)
	}
	if maxTokens != nil {
		if *maxTokens < 1 {
			return req, invalid(maxParam, "'%s' must be >= 1, got %d", maxParam, *maxTokens)
		}
		req.MaxTokens = *maxTokens
	}
	var e *Error
	if req.Sampling, e = p.sampling(m.info.VocabSize, m.info.SlotCtx); e != nil {
		return req, e
	}
	if req.Stop, e = parseStop(p.Stop); e != nil {
		return req, e
	}
	if req.Grammar, e = p.ResponseFormat.grammar(); e != nil {
		return req, e
	}
	return req, nil
}

// includeUsage reports whether a stream ends with a usage chunk.
func (p *oaiParams) includeUsage() bool {
	return p.StreamOptions != nil && p.StreamOptions.IncludeUsage
}

// Usage is OpenAI's token accounting.
type Usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	// Paced are a paced response's measurements (corral's extension).
	Paced *PacedMetrics `json:"paced,omitempty"`
}

func UsageOf(u engine.Usage) *Usage {
	out := &Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
	out.PromptTokensDetails.CachedTokens = u.CachedTokens
	return out
}

// finishReason names r's finish reason as OpenAI does.
func finishReason(r engine.Result) *string {
	s := string(r.FinishReason)
	return &s
}

// header are the fields every OpenAI response object starts with.
type header struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
}

func (m *Model) header(prefix string) header {
	return header{ID: newID(prefix), Created: time.Now().Unix(), Model: m.info.Name}
}
