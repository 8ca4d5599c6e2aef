package engine

import (
	"context"
	"time"
)

// TimeLimits is the queue wait and the pause grace e runs with, defaults
// applied.
func TimeLimits(e *Engine) (maxQueueWait, pauseGrace time.Duration) {
	return e.cfg.MaxQueueWait, e.cfg.PauseGrace
}

// HoldCPU takes every core of c until release: an engine computing on c
// waits before its next forward pass, so that a test can line up what
// that pass and the next admission see.
func HoldCPU(c *CPU) (release func()) {
	r, err := c.acquire(context.Background(), int(c.cores))
	if err != nil {
		panic(err) // a background context does not end
	}
	return r
}

// CutDrafts returns c with every draft ended after its drafted token at
// index at (0: the token sampled before the draft is the only one
// taken), as if the model had not confirmed the next one: the draft's
// later cells are dropped, and the output is unchanged.
func CutDrafts(c Config, at int) Config {
	c.cutDraft = func(i int) bool { return i > at }
	return c
}

// InlineEncoder returns c with the scheduler waiting for every encode, as
// llama-server's loop does, instead of stepping beside it: the baseline
// of BenchmarkStreamsWhileImagesArrive.
func InlineEncoder(c Config) Config {
	c.inlineEncode = true
	return c
}

// MediaRequests is how many requests hold preprocessed media, and how
// many may (see Engine.mediaReqs).
func MediaRequests(e *Engine) (held, most int) { return len(e.mediaReqs), cap(e.mediaReqs) }

// Lookup is the n-gram speculation's draft of at most n tokens from
// toks, looking up runs of at most most tokens.
func Lookup(toks []int32, most, n int) []int32 { return lookup(nil, toks, most, n) }
