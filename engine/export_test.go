package engine

import (
	"context"
	"sync"
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
// toks, looking up runs of least to most tokens.
func Lookup(toks []int32, least, most, n int) []int32 { return lookup(nil, toks, least, most, n) }

// BulkLookup is the draft of at most n tokens from toks where more slots
// decode than MaxDecoding, for a request whose drafts have grown to 16
// tokens or not.
func BulkLookup(toks []int32, prompt int, grown bool, n int) []int32 {
	return bulkLookup(nil, toks, prompt, grown, 4, n)
}

// WorthLen is the length of a draft model's draft worth making.
func WorthLen(acc, rel float64, n int) int { return worthLen(acc, rel, n) }

// DraftAlways returns c drafting wherever a draft is found, whatever
// the measured cost of drafts says (see draftCost).
func DraftAlways(c Config) Config {
	c.draftAlways = true
	return c
}

// Drafted returns c calling f with each speculative draft as it is
// evaluated, the position of its first token, whether a draft model or
// the MTP head drafted it, and how many slots the step decodes, on the
// scheduler goroutine (f must not keep the slice).
func Drafted(c Config, f func(pos int, draft []int32, model bool, decoding int)) Config {
	c.drafted = f
	return c
}

// DraftCost is speculation's cost model (draftCost) for slots decoding
// slots at most.
type DraftCost = draftCost

// NewDraftCost returns a cost model for at most slots decoding slots.
func NewDraftCost(slots int) *DraftCost { c := newDraftCost(slots); return &c }

// Step counts a step where d slots decode, without a prompt, and reports whether it may draft.
func (c *DraftCost) Step(d int) bool { return c.step(d, false) }

// StepWithPrompt counts a step where d slots decode beside a prompt, and
// reports whether it may draft.
func (c *DraftCost) StepWithPrompt(d int) bool { return c.step(d, true) }

// PromptRel is what a drafted token costs, in what a taken one saves, in
// a step with a prompt whose tokens cost perTok seconds each.
func (c *DraftCost) PromptRel(d int, perTok float64) float64 { return c.promptRel(d, perTok) }

// Observe records a step of d decoding slots, with drafts drafted and
// prefill prompt tokens, that took secs.
func (c *DraftCost) Observe(d, drafts, prefill int, secs float64) {
	c.observe(d, drafts, prefill, secs, 0, 0)
}

// ObserveModel records a step as Observe does, of which a draft model
// took drafter seconds and, of those, its catch-up with what slots wrote
// while they did not draft took resume.
func (c *DraftCost) ObserveModel(d, drafts, prefill int, secs, drafter, resume float64) {
	c.observe(d, drafts, prefill, secs, drafter, resume)
}

// Settle sets the steps a count of decoding slots is seen before its
// first measure (a draft model's).
func (c *DraftCost) Settle(steps uint64) { c.settle = steps }

// Worth reports whether a slot taking its drafts at the rate acc drafts
// in a step of d decoding slots.
func (c *DraftCost) Worth(d int, acc float64) bool { return c.worth(d, acc) }

// HoldDiskReads returns c with each disk-tier read for a waiting request
// held until release is called (once, for all of them); started receives
// a value as each read is held (16 at most are told).
func HoldDiskReads(c Config) (_ Config, started <-chan struct{}, release func()) {
	ch, st := make(chan struct{}), make(chan struct{}, 16)
	c.beforeDiskRead = func() {
		select {
		case st <- struct{}{}:
		default:
		}
		<-ch
	}
	return c, st, sync.OnceFunc(func() { close(ch) })
}

// Dear reports whether no acceptance pays for drafts at d decoding slots.
func (c *DraftCost) Dear(d int) bool { return c.dear(d) }

// Measures reports whether the step last counted at d decoding slots
// drafts to measure what drafts cost.
func (c *DraftCost) Measures(d int) bool { return c.measures(d) }

// DearBelow reports whether drafts are dear at fewer slots than d.
func (c *DraftCost) DearBelow(d int) bool { return c.dearBelow(d) }

// Probed records a step that drafted to measure dear drafts.
func (c *DraftCost) Probed(d int) { c.probed(d) }
