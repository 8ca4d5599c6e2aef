package engine

import (
	"time"

	"github.com/corral-llm/corral/llama"
)

// slotState is where a slot's request is in its lifecycle. A slot is in
// exactly one state; only the scheduler changes it.
type slotState int

const (
	stateIdle    slotState = iota // no request; cache holds the last one's tokens
	statePrefill                  // prompt tokens still being evaluated
	stateDecode                   // generating one token per step
)

func (s slotState) String() string {
	switch s {
	case statePrefill:
		return "prefill"
	case stateDecode:
		return "decode"
	}
	return "idle"
}

// slot is one sequence of the llama context (seq id = slot id).
//
// Invariant: cache lists exactly the tokens whose KV cells sequence id
// holds, in position order, so len(cache) is the next position.
type slot struct {
	id    int
	nctx  int // cells this sequence may use
	state slotState
	cache []int32
	// lastUsed is when the slot's last request finished (zero: never).
	lastUsed time.Time

	// Set while a request runs.
	req       *request
	pending   []int32 // prompt tokens not yet evaluated
	cached    int     // prompt tokens reused from cache
	last      int32   // last sampled token, evaluated in the next step
	decoded   int
	maxTokens int
	out       textOut
	stopWord  string
	outIdx    int  // batch index of this slot's logits in the current step, -1 if none
	inBatch   bool // the slot has tokens in the current step's batch

	admitted, prefillDone, firstToken time.Time
}

func (sl *slot) active() bool { return sl.state != stateIdle }

// start puts r into the idle slot, reusing the longest common prefix of the
// slot's cached tokens and evaluating only the rest.
func (sl *slot) start(r *request, lctx *llama.Context, now time.Time, maxDefault int) {
	keep := 0
	if !r.params.NoCachePrompt {
		keep = commonPrefix(sl.cache, r.tokens)
	}
	if keep == len(r.tokens) {
		keep-- // re-evaluate the last prompt token to get its logits
	}
	if keep < len(sl.cache) && !lctx.SeqRemove(sl.id, keep, -1) {
		lctx.SeqRemove(sl.id, -1, -1)
		keep = 0
	}
	sl.cache = sl.cache[:keep]
	sl.req = r
	sl.pending = r.tokens[keep:]
	sl.cached = keep
	sl.state = statePrefill
	sl.decoded = 0
	sl.maxTokens = r.params.MaxTokens
	if sl.maxTokens <= 0 {
		sl.maxTokens = maxDefault
	}
	if sl.maxTokens <= 0 {
		sl.maxTokens = sl.nctx
	}
	sl.out = textOut{stops: r.params.Stop}
	sl.stopWord = ""
	sl.outIdx = -1
	sl.admitted = now
	sl.prefillDone, sl.firstToken = time.Time{}, time.Time{}
}

// result builds the request's final Result.
func (sl *slot) result(reason FinishReason, err error, now time.Time) Result {
	r := sl.req
	t := Timings{
		Queued: sl.admitted.Sub(r.submitted),
		Total:  now.Sub(r.submitted),
	}
	if !sl.prefillDone.IsZero() {
		t.Prefill = sl.prefillDone.Sub(sl.admitted)
	}
	if !sl.firstToken.IsZero() {
		t.TTFT = sl.firstToken.Sub(r.submitted)
		t.Decode = now.Sub(sl.firstToken)
		if sl.decoded > 1 && t.Decode > 0 {
			t.TokensPerSecond = float64(sl.decoded-1) / t.Decode.Seconds()
		}
	}
	return Result{
		FinishReason: reason, StopWord: sl.stopWord, Err: err, Slot: sl.id, Timings: t,
		Usage: Usage{PromptTokens: len(r.tokens), CachedTokens: sl.cached, CompletionTokens: sl.decoded},
	}
}

// reset makes the slot idle, keeping its cache.
func (sl *slot) reset() {
	sl.state = stateIdle
	sl.req = nil
	sl.pending = nil
	sl.outIdx = -1
}
