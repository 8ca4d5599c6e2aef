package engine

import (
	"sort"
	"time"
	"unicode/utf8"

	"github.com/corral-llm/corral/kvevents"
)

// slotState is where a slot's request is in its lifecycle. A slot is in
// exactly one state; only the scheduler changes it. A paused request has
// no slot: it waits in the queue with its progress (see request.gen).
type slotState int

const (
	stateIdle    slotState = iota // no request; cache holds the last one's tokens
	statePrefill                  // prompt tokens still being evaluated
	stateDecode                   // generating one token per step
	statePaused                   // a paced request waiting for Continue after a chunk
)

func (s slotState) String() string {
	switch s {
	case statePrefill:
		return "prefill"
	case stateDecode:
		return "decode"
	case statePaused:
		return "paused"
	}
	return "idle"
}

// slot is one sequence of the llama context (seq id = slot id). The KV
// cache is unified: a slot's cells come from the pool all slots share
// (pool.go), may be shared with other slots holding the same prefix, and
// the engine, not llama.cpp, caps each slot at nctx.
//
// Invariant: cache lists exactly the tokens whose KV cells sequence id
// holds, in position order; cells lists those cells (the pool's
// numbering, not llama.cpp's); shift is shiftOf(cache), so that
// len(cache)-shift is the next position (see media.go: without M-RoPE
// media shift is 0).
type slot struct {
	id    int
	nctx  int // the most cells this sequence may hold (Config.CtxPerRequest)
	state slotState
	cache []int32
	cells []int32
	shift int
	// blocks names the whole blocks of cache, when the engine publishes
	// KV events (kvevents.go).
	blocks []kvevents.Hash
	// undo is how many of cache's last tokens the memory can drop where
	// it otherwise cannot be cut back (a recurrent state's rollback,
	// scheduler.rollback): the drafted tokens of the step that just
	// evaluated them, after the slot's last token; 0 once any other
	// token joins or leaves the cache. rolled: the last cut went back
	// over a recurrent state's last tokens, which llama.cpp applies at
	// the sequence's next pass; until then another sequence given its
	// cells (llama_memory_seq_cp) would read the state before the cut.
	undo   int
	rolled bool
	// salt is the Request.CacheSalt of the requests whose tokens cache
	// holds: only a request of the same salt reuses them.
	salt string
	// lastUsed is when the slot last started or finished a request (zero:
	// never); the least recently used cache is the first to go.
	lastUsed time.Time

	// Set while a request runs.
	req     *request
	pending []int32 // tokens not yet evaluated (the prompt, or a resumed request's history)
	outIdx  int     // batch index of this slot's logits in the current step, -1 if none
	inBatch bool    // the slot has tokens in the current step's batch
	// draftIdx is the batch index of the first token of the slot's
	// draft (jump.go) in the current step.
	draftIdx int
	// pooled is the number of leading tokens of cache the shared n-gram
	// pool has learned (ngrampool.go).
	pooled int
	// saltKey is the pool's key of hashedSalt (poolSalt), once saltHashed.
	hashedSalt string
	saltKey    uint64
	saltHashed bool
	// draftWant is the most tokens the draft model drafts for the slot
	// in the current step (draftmodel.go), 0 when it does not.
	draftWant int

	// A prefilling slot may follow another that is still evaluating the
	// same prefix: it evaluates nothing until the leader's cache holds the
	// first followLen tokens of its prompt (or the leader's request ends),
	// then shares those cells (see scheduler.release).
	leader    *slot
	leaderReq *request
	followLen int

	// checkpoints (models whose memory cannot be cut back at will) are
	// that part of the sequence's state at earlier positions of cache,
	// oldest first: the end of each recent prompt, and the end of a prefix
	// shared with another slot (see checkpoint.go).
	checkpoints []checkpoint
	// checkpointAt, when past the cache, is where the prompt being
	// evaluated stops sharing another slot's cache: the prefill pauses
	// there for a checkpoint, which later prompts with that prefix (a
	// common system prompt) start from.
	checkpointAt int
}

// checkpoint is the part of a sequence's state that cannot be cut back
// (Context.SeqStatePartial) after its first pos tokens.
type checkpoint struct {
	pos   int
	state []byte
	used  uint64 // when it was taken or last restored, on the host cache's clock
}

func (sl *slot) active() bool { return sl.state != stateIdle }

// computing reports whether the slot has work for the next step.
func (sl *slot) computing() bool { return sl.state == statePrefill || sl.state == stateDecode }

// generation is a request's progress. It lives in the request, not the
// slot, so that a preempted request resumes where it stopped, in any slot.
type generation struct {
	started     bool  // admitted to a slot at least once
	cached      int   // prompt tokens reused from a cache at the first admission
	last        int32 // last sampled token, evaluated in the next step
	decoded     int
	maxTokens   int
	out         textOut
	lp          logprobQueue // with Request.Logprobs
	stopWord    string
	preemptions int
	pace        *pacing // nil unless Request.Chunking is set
	think       *budget // nil unless Request.Reasoning is set
	// For paced requests only: whole lists the points where the text
	// released so far is exactly the text of the tokens generated so far
	// (nothing held back for a stop string or a split character), the
	// places a history can end (see keepSpoken and Result.History);
	// outToks are those tokens.
	whole   []wholePoint
	runes   int // characters of text released so far
	outToks []int32
	// Tokens put through the model: prompt (or resumed history) and decode.
	evalPrompt, evalDecode int
	// tails counts sampled tokens a preemption moved into the history to
	// evaluate again: evaluated with it, they are decode tokens, not
	// re-evaluated ones.
	tails int
	// draft are tokens evaluated after last in the current step, the
	// text the grammar forces (jump.go); empty between steps. draftMax
	// bounds the next draft (0: maxDraft).
	draft    []int32
	draftMax int
	// spec: the draft is a speculative one (speculate.go), not forced
	// text. specMax bounds the next (0: Speculation.DraftMax; see specLimit); the
	// request drafts nothing for specSkip steps, specMiss the last such
	// wait after a draft refused whole, specWait the last while drafts
	// cost more than they save (then specProbe: the next draft is a
	// probe, made whatever the cost says). specAcc is the moving average
	// of the share of its drafts the request took (0: not yet known).
	// specPool: the draft came from the shared n-gram pool, whose drafts
	// are judged apart (ngrampool.go): poolMiss is the share of them the
	// request did not take, a moving average (0 at first: it tries).
	spec, specProbe, specPool             bool
	specMax, specMiss, specSkip, specWait int
	specAcc, poolMiss                     float64

	admitted, prefillDone, firstToken time.Time
}

// start puts r into the idle slot, whose cache already holds the first
// tokens of what r needs evaluated (see scheduler.place): its prompt, or
// for a request resumed after a preemption its whole history.
func (sl *slot) start(r *request, now time.Time, maxDefault int) {
	keep := len(sl.cache)
	need := r.tokens
	if r.gen.started {
		need = r.resume
	} else {
		g := &r.gen
		g.started = true
		g.cached = keep
		g.admitted = now
		g.maxTokens = r.params.MaxTokens
		if g.maxTokens <= 0 {
			g.maxTokens = maxDefault
		}
		if g.maxTokens <= 0 {
			g.maxTokens = sl.nctx
		}
		g.out = textOut{stops: r.params.Stop}
		if c := r.params.Chunking; c != nil {
			g.pace = newPacing(*c, r.params.PauseTimeout)
		}
		if rb := r.params.Reasoning; rb != nil {
			g.think = newBudget(rb)
		}
	}
	r.resume = nil
	sl.req = r
	sl.pending = need[keep:]
	sl.state = statePrefill
	sl.outIdx = -1
	sl.lastUsed = now
}

// result builds the request's final Result.
func (r *request) result(slotID int, reason FinishReason, err error, now time.Time) Result {
	g := &r.gen
	t := Timings{Submitted: r.submitted, Total: now.Sub(r.submitted), Queued: now.Sub(r.submitted)}
	if g.started {
		t.Queued = g.admitted.Sub(r.submitted)
	}
	if !g.prefillDone.IsZero() {
		t.Prefill = g.prefillDone.Sub(g.admitted)
	}
	chunks := 0
	if p := g.pace; p != nil {
		chunks = p.index
		t.Held = p.heldTotal
		if !p.firstChunk.IsZero() {
			t.FirstChunk = p.firstChunk.Sub(r.submitted)
		}
	}
	if !g.firstToken.IsZero() {
		t.TTFT = g.firstToken.Sub(r.submitted)
		t.Decode = now.Sub(g.firstToken)
		if busy := t.Decode - t.Held; g.decoded > 1 && busy > 0 {
			t.TokensPerSecond = float64(g.decoded-1) / busy.Seconds()
		}
	}
	return Result{
		FinishReason: reason, StopWord: g.stopWord, Err: err, Slot: slotID, Timings: t, Preemptions: g.preemptions,
		Chunks: chunks,
		Usage: Usage{
			PromptTokens: len(r.tokens), CachedTokens: g.cached, CompletionTokens: g.decoded, ReasoningTokens: g.think.tokens(),
			EvaluatedTokens:   g.evalPrompt + g.evalDecode,
			ReevaluatedTokens: g.reevaluated(len(r.tokens)),
		},
	}
}

// reset makes the slot idle, keeping its cache.
func (sl *slot) reset() {
	sl.state = stateIdle
	sl.req = nil
	sl.pending = nil
	sl.outIdx = -1
	sl.leader, sl.leaderReq, sl.followLen = nil, nil, 0
}

// reevaluated counts the tokens evaluated beyond a prompt of n tokens'
// uncached part and the generated ones: what preemptions cost.
func (g *generation) reevaluated(n int) int {
	return max(0, g.evalPrompt-g.tails-(n-g.cached))
}

// wholePoint is a place where the released text and the generated tokens
// end together: after tokens tokens, runes characters.
type wholePoint struct{ tokens, runes int32 }

// released records a paced request's generated token (EOG excluded) and
// the text it released; held reports whether text is still held back
// after it.
func (g *generation) released(tok int32, text string, held bool) {
	g.runes += utf8.RuneCountInString(text)
	g.outToks = append(g.outToks, tok)
	if !held {
		g.whole = append(g.whole, wholePoint{int32(g.decoded), int32(g.runes)})
	}
}

// flushed records the held-back text released at the end: text and
// tokens end together again.
func (g *generation) flushed(text string) {
	g.runes += utf8.RuneCountInString(text)
	g.whole = append(g.whole, wholePoint{int32(g.decoded), int32(g.runes)})
}

// history returns how many generated tokens, and characters of text,
// a history keeps that ends within the first spoken characters
// (spoken < 0: all that was released).
func (g *generation) history(spoken int) (tokens, runes int) {
	i := len(g.whole)
	if spoken >= 0 {
		i = sort.Search(len(g.whole), func(i int) bool { return int(g.whole[i].runes) > spoken })
	}
	if i == 0 {
		return 0, 0
	}
	w := g.whole[i-1]
	return int(w.tokens), int(w.runes)
}
