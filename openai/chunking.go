package openai

import (
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/serving"
)

// ChunkingParams is the request's "chunking" object (see engine.Chunking).
type ChunkingParams struct {
	FirstMinTokens *int     `json:"first_min_tokens"`
	FirstMaxTokens *int     `json:"first_max_tokens"`
	MaxChars       *int     `json:"max_chars"`
	PauseTimeout   *float64 `json:"pause_timeout"` // seconds
}

// Engine converts p; nil p is no chunking.
func (p *ChunkingParams) Engine() (*engine.Chunking, time.Duration, *serving.Error) {
	if p == nil {
		return nil, 0, nil
	}
	var c engine.Chunking
	for _, f := range []struct {
		name string
		v    *int
		dst  *int
	}{
		{"first_min_tokens", p.FirstMinTokens, &c.FirstMinTokens},
		{"first_max_tokens", p.FirstMaxTokens, &c.FirstMaxTokens},
		{"max_chars", p.MaxChars, &c.MaxChars},
	} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 || *f.v > 1<<20 {
			return nil, 0, serving.Invalid("chunking", "'chunking.%s' must be in [1, %d], got %d", f.name, 1<<20, *f.v)
		}
		*f.dst = *f.v
	}
	if c.FirstMinTokens > 0 && c.FirstMaxTokens > 0 && c.FirstMinTokens > c.FirstMaxTokens {
		return nil, 0, serving.Invalid("chunking", "'chunking.first_min_tokens' (%d) is more than 'first_max_tokens' (%d)", c.FirstMinTokens, c.FirstMaxTokens)
	}
	var timeout time.Duration
	if p.PauseTimeout != nil {
		s := *p.PauseTimeout
		if !(s > 0 && s <= serving.MaxPauseTimeout.Seconds()) {
			return nil, 0, serving.Invalid("chunking", "'chunking.pause_timeout' must be in (0, %g] seconds, got %g", serving.MaxPauseTimeout.Seconds(), s)
		}
		timeout = time.Duration(s * float64(time.Second))
	}
	return &c, timeout, nil
}
