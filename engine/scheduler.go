package engine

import (
	"cmp"
	"errors"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/corral-llm/corral/kvevents"
	"github.com/corral-llm/corral/llama"
)

var negInf = math.Inf(-1)

// scheduler owns the llama context, the KV cache, the slots and the
// samplers. Only its goroutine (run) touches them.
type scheduler struct {
	e       *Engine
	lctx    *llama.Context
	slots   []*slot
	waiting []*request // taken from submitq or preempted, not in a slot (served in the order of before)
	host    hostCache
	disk    *diskCache // the tier below host (disk.go); nil when none
	pool    cellPool   // the slots' cells of the unified KV cache (pool.go)
	kv      *kvBlocks  // the blocks the KV events tell of (kvevents.go); nil when none
	// protect is the idle slot being admitted to, whose cache freeIdle
	// leaves alone; cellWait is set when a waiting request found too few
	// cells and nothing has changed since (see busy).
	protect     *slot
	cellWait    bool
	activeLists [][]int32  // scratch for activeCells
	tails       []idleTail // scratch for idleTails
	budget      prefillBudget
	nDecode     int  // decode tokens in the current batch
	nPrefill    int  // prompt tokens in the current batch
	freed       bool // a slot went idle since the last admission
	batch       llama.Batch
	media       mediaJob          // the step's media embeddings, evaluated before batch (media.go)
	encoding    *mediaChunk       // the chunk the encoder is at, nil when idle (media.go)
	encoded     chan encodeResult // the encoder's result, capacity 1
	loaded      chan *diskLoad    // disk-tier reads done (disk.go), capacity maxDiskLoads
	loading     int               // disk-tier reads in flight
	loads       sync.WaitGroup    // the reading goroutines
	prefilling  []*slot           // scratch for buildBatch
	prefixes    []int             // scratch for place: each slot's common prefix with a prompt
	// partial: part of the model's memory cannot be cut back to any
	// position (a recurrent state, a sliding window; see checkpoint.go).
	// window is the sliding window in tokens (0: none). recurrent: the
	// memory has a recurrent state (alone, or a hybrid's). rollback is
	// how many of a sequence's last tokens, evaluated in one step, that
	// state can go back over (llama.Context.Rollback; slot.undo).
	partial, recurrent bool
	rollback           int
	window             int
	// perSlot: each slot has a buffer of its own (Config.KVPerSlot).
	perSlot bool
	// split: a step's prompt chunks are evaluated in a pass before the
	// decoding tokens' (llama.Context.DecodeSplit), where the model
	// computes on the CPU with flash attention and has no recurrent state.
	split bool
	// checkpointsSaved counts the checkpoints taken, checkpointsUsed the
	// sequences cut back to one.
	checkpointsSaved, checkpointsUsed uint64
	// checkpointBytes sums the slots' checkpoints.
	checkpointBytes int64
	piece           []byte               // scratch for token bytes
	forced          []byte               // scratch for the text a grammar forces (jump.go)
	forcedTok       []llama.Token        // scratch for its first token (jump.go)
	top             []llama.TokenLogprob // scratch for SampleLogprobs
	// pieces caches token texts for logprobs entries, filled on demand
	// (known says which are); nil until a request asks for logprobs.
	pieces []string
	known  []bool
	timer  *time.Timer // wakes receive when a pause times out
	paced  PacedStats
	embeds []*embedJob // Embed calls with inputs to evaluate, in arrival order
	lanes  int         // embedding sequence ids, after the slots' (see embed.go)

	requests, tokensOut, steps, preemptions uint64
	splitSteps                              uint64        // steps in two passes (split)
	poolPreemptions                         uint64        // of preemptions, those for cells
	busySlots                               uint64        // summed over steps: slots with tokens in the batch
	draftTokens, draftAccepted              uint64        // jump-forward decoding (jump.go)
	spec                                    SpecStats     // speculative decoding (speculate.go)
	specStep                                bool          // the step drafts speculatively
	bulk                                    bool          // more slots decode than Speculation.MaxDecoding: drafts in bulk only (bulkDraft)
	withPrompt                              bool          // a prompt waits to be evaluated as the step is built
	specAcc                                 float64       // moving average of the share of a draft taken, all requests
	cost                                    draftCost     // what drafts cost and save (speculate.go)
	drafter                                 drafter       // a draft model or the MTP head, nil when none (speculate.go)
	asking                                  []*slot       // the step's slots that ask the drafter for a draft
	measurer                                *slot         // in a step that measures drafts' cost, the one slot that may ask the drafter, or nil: any (chooseMeasurer)
	drafterTime                             time.Duration // the drafter's passes since takeDrafterTime
	drafterResume                           time.Duration // of drafterTime, catching up with slots that paused drafting
	ngrams                                  *ngramPool    // the shared n-gram pool, with Speculation.Ngram (ngrampool.go)
	nDecoding, nDrafts                      int           // this step's decoding slots and their drafted tokens
	pubAcceptedAt                           []uint64      // spec.AcceptedAt as last published (acceptedAt)
	pubAccepted                             uint64        // spec.Accepted then
	promptTokens, cachedTokens              uint64
	ttftSum                                 time.Duration
	ownTime                                 time.Duration // the steps' time outside the forward passes and the CPU share's wait
	ttftCount                               uint64
	embedRequests, embedInputs, embedPasses uint64
	mediaEncoded                            uint64
	mediaEncodeTime                         time.Duration
}

func newScheduler(e *Engine, lctx *llama.Context, poolCells, reqCtx int) *scheduler {
	kv := newKVBlocks(e.cfg.KVEvents)
	s := &scheduler{
		e: e, lctx: lctx,
		pool:    newCellPool(poolCells),
		kv:      kv,
		host:    hostCache{budget: e.cfg.HostCacheBytes, kv: kv},
		budget:  prefillBudget{max: e.cfg.PrefillBudget},
		timer:   time.NewTimer(time.Hour),
		encoded: make(chan encodeResult, 1),
		loaded:  make(chan *diskLoad, maxDiskLoads),
		lanes:   e.cfg.lanes(lctx.Pooling()),
		spec:    SpecStats{AcceptedAt: make([]uint64, e.cfg.Speculate.NgramDraftMax)},
		specAcc: 1,
		cost:    newDraftCost(e.cfg.Parallel),

		partial:   e.model.Recurrent() || e.model.SlidingWindow() > 0,
		recurrent: e.model.Recurrent(),
		rollback:  rollback(e.model, lctx),
		window:    e.model.SlidingWindow(),
		perSlot:   e.cfg.KVPerSlot,
		// For the CPU's flash-attention kernel (a GPU's pass costs
		// otherwise); not tried on a recurrent state, whose rollback
		// copies llama.cpp keeps for a pass's last tokens (slot.undo).
		split: !e.cfg.NoFlashAttn && e.info.GPULayers == 0 && !e.model.Recurrent(),
	}
	if e.cfg.Speculate.Ngram {
		s.ngrams = newNgramPool(e.cfg.Speculate.NgramMax)
	}
	s.host.other = checkpoints{s}
	s.timer.Stop()
	for i := range e.cfg.Parallel {
		s.slots = append(s.slots, &slot{id: i, nctx: reqCtx})
	}
	return s
}

// run is the scheduler loop. Each iteration is one step:
//
//	receive  — take new submissions and control messages; block only when idle
//	retire   — finish requests whose context ended or that waited too long
//	admit    — move waiting requests into free slots by priority, then
//	           arrival, with the longest cached prefix found (admit.go)
//	embed    — one forward pass of pending Embed inputs, if any, with
//	           embeddings on (embed.go)
//	encode   — start the encoder on a medium an admitted prompt has not
//	           evaluated, unless it is busy: it runs beside the steps
//	           (media.go)
//	batch    — one token per decoding slot (and the tokens its grammar
//	           forces after it: jump.go) + prefill chunks up to the budget,
//	           a medium's embeddings among them
//	decode   — the medium's embeddings, then one llama_decode for all the
//	           tokens: one forward pass, since the KV cache is unified
//	sample   — sample, detokenize, check stops, deliver (never blocking)
func (s *scheduler) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(s.e.done)
	defer s.shutdown()

	for {
		if !s.receive() {
			return
		}
		begin := time.Now()
		s.retire()
		s.admit()
		s.embedPass()
		s.encodePass()
		if !s.buildBatch() {
			s.publish()
			s.ownTime += time.Since(begin)
			continue
		}
		built := time.Now()
		drafting, resume := s.takeDrafterTime()
		release, err := s.cores()
		if err != nil {
			continue // closing: receive returns false
		}
		start := time.Now()
		if err = s.decodeMedia(); err == nil {
			if s.split {
				var two bool
				if two, err = s.lctx.DecodeSplit(&s.batch); two {
					s.splitSteps++
				}
			} else {
				err = s.lctx.Decode(&s.batch)
			}
		}
		took := time.Since(start)
		before := built.Sub(begin) + took // the step's time so far, without the wait for cores
		s.ownTime += built.Sub(begin) - drafting
		begin = time.Now()
		s.budget.observe(s.nDecode, s.nPrefill, took)
		release()
		s.steps++
		for _, sl := range s.slots {
			if sl.inBatch {
				s.busySlots++
			}
		}
		mirror := time.Duration(0)
		if err != nil {
			s.failBatch(err)
		} else {
			s.sample()
			if s.drafter != nil {
				start := time.Now()
				s.drafter.mirror(s)
				mirror = time.Since(start)
			}
		}
		s.publish()
		after := time.Since(begin)
		s.ownTime += after - mirror
		// What a step costs a stream: the forward pass and the sampling,
		// delivery and bookkeeping around it.
		s.cost.observe(s.nDecoding, s.nDrafts, s.nPrefill, (before + after).Seconds(), drafting.Seconds(), resume.Seconds())
	}
}

// cores waits for the engine's share of the CPU (Config.CPU) before a
// forward pass, and returns the function that gives it back. It fails
// only when the engine is closing.
func (s *scheduler) cores() (release func(), err error) {
	if s.e.cfg.CPU == nil {
		return func() {}, nil
	}
	if release, ok := s.e.cfg.CPU.tryAcquire(s.e.cfg.Threads); ok {
		return release, nil
	}
	s.publish() // what pollers see while the pass waits: the admitted requests
	return s.e.cfg.CPU.acquire(s.e.life, s.e.cfg.Threads)
}

// busy reports whether there is work that needs the next step to run: a
// slot with tokens to evaluate, or a waiting request that admit can place
// at now (a slot it may use is free, or one it may preempt runs).
func (s *scheduler) busy(now time.Time) bool {
	if len(s.embeds) > 0 {
		return true
	}
	for _, sl := range s.slots {
		if sl.computing() && !s.waitsForEncoder(sl) {
			return true
		}
	}
	if s.cellWait {
		// Admission stopped for lack of cells and nothing has freed any.
		return false
	}
	for _, r := range s.waiting {
		if !r.admissible() {
			continue
		}
		for _, sl := range s.slots {
			if !sl.active() && (!r.params.PinSlot || sl.id == r.params.SlotID) {
				return true
			}
		}
		if s.victim(r, now) != nil {
			return true
		}
	}
	return false
}

// receive drains the submission queue and control messages. When there is
// nothing to compute it blocks until something arrives. It returns false
// when the engine is closing.
func (s *scheduler) receive() bool {
	for {
		// One instant for busy and deadline: a grace that ends between
		// the two is either seen by busy or waited for.
		if now := time.Now(); !s.busy(now) {
			s.publish() // what pollers see while the scheduler sleeps
			// A pause timing out, a pause's grace ending while a request
			// waits, and a queued request timing out must all happen
			// while nothing runs.
			var expire <-chan time.Time
			if d, ok := s.deadline(now); ok {
				s.timer.Reset(time.Until(d))
				expire = s.timer.C
			}
			select {
			case r := <-s.e.submitq:
				s.waiting = append(s.waiting, r)
			case j := <-s.e.embedq:
				s.embeds = append(s.embeds, j)
			case res := <-s.encoded:
				s.encodedChunk(res)
			case l := <-s.loaded:
				s.diskLoaded(l)
			case <-s.e.wake:
				s.retire()
			case <-expire:
				s.retire()
			case <-s.e.quit:
				return false
			}
			s.timer.Stop()
			s.cellWait = false // something happened: admission looks again
		}
		// Non-blocking drain of whatever else is pending.
		for {
			select {
			case r := <-s.e.submitq:
				s.waiting = append(s.waiting, r)
				continue
			case j := <-s.e.embedq:
				s.embeds = append(s.embeds, j)
				continue
			case res := <-s.encoded:
				s.encodedChunk(res)
				continue
			case l := <-s.loaded:
				s.diskLoaded(l)
				continue
			case <-s.e.wake:
				continue
			case <-s.e.quit:
				return false
			default:
			}
			break
		}
		if s.busy(time.Now()) {
			return true
		}
		s.retire() // a cancelled queued request may have been all there was
	}
}

// retire finishes requests whose context has ended (interrupted ones
// keep only what was spoken in the cache), queued requests that waited
// longer than MaxQueueWait, and every queued request once the engine
// drains (a preempted request is not queued: it was admitted, and goes on
// like a running one). It also ends the pauses of paced requests that
// were continued or timed out.
func (s *scheduler) retire() {
	now := time.Now()
	for _, sl := range s.slots {
		if !sl.active() {
			continue
		}
		r := sl.req
		if r.ctx.Err() != nil {
			if spoken := r.stream.spoken.Load(); spoken >= 0 {
				s.keepSpoken(sl, int(spoken))
				s.finish(sl, FinishInterrupted, nil)
			} else {
				s.finish(sl, FinishCancelled, nil)
			}
			continue
		}
		if sl.state == statePaused {
			switch released, expired := s.unpause(r, now); {
			case expired:
				s.finish(sl, FinishPauseTimeout, nil)
			case released && !s.nextChunk(r, now):
				sl.state = stateDecode
			}
		}
	}
	maxWait := s.e.cfg.MaxQueueWait
	draining := s.e.draining.Load()
	kept := s.waiting[:0]
	for _, r := range s.waiting {
		if r.held() && r.ctx.Err() == nil {
			if released, expired := s.unpause(r, now); expired {
				s.drop(r, FinishPauseTimeout, nil)
				continue
			} else if released {
				s.nextChunk(r, now)
			}
		}
		switch {
		case draining && !r.gen.started: // a preempted request was admitted: it goes on
			s.drop(r, FinishError, ErrClosed)
		case r.ctx.Err() != nil && r.stream.spoken.Load() >= 0:
			s.drop(r, FinishInterrupted, nil)
		case r.ctx.Err() != nil:
			s.drop(r, FinishCancelled, nil)
		case maxWait > 0 && !r.gen.started && now.Sub(r.submitted) >= maxWait:
			s.drop(r, FinishError, ErrQueueTimeout)
		default:
			kept = append(kept, r)
		}
	}
	clear(s.waiting[len(kept):])
	s.waiting = kept
	s.retireEmbeds(now)
}

// buildBatch fills the batch: first one token for every decoding slot, so
// running streams never wait behind a prompt, then prompt chunks for
// prefilling slots in service order (priority, then the prompts the
// step can finish, then arrival), until the
// per-step budget is spent: BatchSize, or while any slot decodes the
// adaptive prefill budget (budget.go), at most PrefillBudget, except for
// prompts of a better priority class than every decoding stream. The
// tokens a decoding slot's grammar forces after its token (jump.go) come
// out of the budget before the prompts, and last in the batch, so that
// the cells of those the model does not write are the last ones. It
// reports whether the batch has anything to decode.
func (s *scheduler) buildBatch() bool {
	s.cellsForDecode()
	for {
		if s.fillBatch() || !s.stalled() {
			return s.batch.Len() > 0 || s.media.sl != nil
		}
	}
}

// cellsForDecode makes sure every decoding slot has a cell for its token
// this step: when the pool has too few, idle caches are freed and then
// running requests preempted, the one served last first (see makeRoom).
func (s *scheduler) cellsForDecode() {
	need := s.decoding()
	for s.pool.avail() < need && !s.freeIdle(need) {
		var v *slot
		for _, sl := range s.slots {
			if sl.active() && (v == nil || before(sl.req, v.req) > 0) {
				v = sl
			}
		}
		if v.state == stateDecode {
			need--
		}
		s.waiting = append(s.waiting, s.preemptForCells(v))
	}
}

// decoding counts the slots that decode a token this step.
func (s *scheduler) decoding() int {
	n := 0
	for _, sl := range s.slots {
		if sl.state == stateDecode {
			n++
		}
	}
	return n
}

// stalled handles a step with nothing to evaluate while a prompt has
// tokens pending: the pool has no cell for them, and no running stream
// will free one. The request served first among those prompts frees cells
// by preempting requests served after it, or itself when there are none
// (see makeRoom). It reports whether the batch should be filled again.
func (s *scheduler) stalled() bool {
	var first *slot
	for _, sl := range s.slots {
		if sl.state == statePrefill && sl.leader == nil && len(sl.pending) > 0 && !s.waitsForEncoder(sl) && (first == nil || before(sl.req, first.req) < 0) {
			first = sl
		}
	}
	if first == nil {
		return false
	}
	s.makeRoom(first.req, first, 1)
	return true
}

// promptsWaiting counts the slots with prompt tokens to evaluate: the
// step will take some of them, unless cells run out.
func (s *scheduler) promptsWaiting() int {
	n := 0
	for _, sl := range s.slots {
		if sl.state == statePrefill && sl.leader == nil && len(sl.pending) > 0 {
			n++
		}
	}
	return n
}

// fillBatch builds the step's batch (see buildBatch) with the cells the
// pool has, and reports whether it has anything to decode.
func (s *scheduler) fillBatch() bool {
	s.batch.Reset()
	s.media = mediaJob{}
	// Followers take their leader's cells before the step adds any: a
	// cell shared now holds a token already evaluated, where a decoding
	// token of this step may be evaluated in a pass after the
	// follower's prompt (DecodeSplit).
	s.release()
	decoding := math.MaxInt // the best class among decoding slots
	decodes := s.decoding()
	spare := s.e.cfg.BatchSize - decodes
	sp := &s.e.cfg.Speculate
	s.nDecoding, s.nDrafts = decodes, 0
	prompts := s.promptsWaiting()
	s.withPrompt = prompts > 0
	if s.withPrompt && s.e.cfg.PrefillBudget > 0 {
		// Drafts beside a prompt take no more of the step than the
		// prompts' share (prefillBudget): long drafts would otherwise
		// take the step's time from the prompts.
		spare = min(spare, s.budget.tokens(prompts))
	}
	s.bulk = sp.MaxDecoding > 0 && decodes > sp.MaxDecoding
	s.specStep = sp.on() && (s.cost.step(decodes, s.withPrompt) || s.e.cfg.draftAlways)
	s.chooseMeasurer(decodes)
	// Cells the decoding slots' tokens and drafts take this step, not
	// yet taken from the pool: the prompts get what is left.
	claimed := decodes
	for _, sl := range s.slots {
		sl.outIdx = -1
		sl.inBatch = false
		if sl.state == stateDecode {
			sl.inBatch = true
			sl.outIdx = s.batch.Len()
			s.batch.Add(sl.req.gen.last, sl.nextPos(), sl.id, true)
			s.appendToken(sl, sl.req.gen.last)
			claimed--
			sl.req.gen.evalDecode++
			d := s.draft(sl, min(spare-s.nDrafts, s.pool.avail()-claimed))
			s.nDrafts += d
			claimed += d
			decoding = min(decoding, sl.req.params.Priority)
		}
	}
	if len(s.asking) > 0 {
		unused := s.modelDrafts()
		s.nDrafts -= unused
		claimed -= unused
	}
	if s.nDrafts > 0 && s.cost.dear(decodes) {
		s.cost.probed(decodes) // a probe: the next comes later, measured or not
	}
	s.nDecode = s.batch.Len() + s.nDrafts
	// Prompts share the budget in service order, so a prompt in a high
	// slot is not starved by newer ones in lower slots.
	s.prefilling = s.prefilling[:0]
	waiting := 0
	for _, sl := range s.slots {
		if sl.state == statePrefill && sl.leader == nil {
			s.prefilling = append(s.prefilling, sl)
			if len(sl.pending) > 0 {
				waiting++
			}
		}
	}
	// room is what the step has left; shared is the prompts' bounded share
	// while streams decode. A prompt of a better class than every decoding
	// stream is not bounded by it: those streams are the ones to wait.
	room := s.e.cfg.BatchSize - s.nDecode
	shared := room
	if s.batch.Len() > 0 && s.e.cfg.PrefillBudget > 0 {
		shared = min(room, s.budget.tokens(waiting))
	}
	// Within a class, a prompt that this step's share can finish goes
	// before longer ones (in arrival order each): a chat turn arriving
	// while a long document is evaluated gets its first token in a step
	// or two, not after the document, and the document still takes
	// whatever the short prompts leave of every step.
	slices.SortFunc(s.prefilling, func(a, b *slot) int {
		if c := cmp.Compare(a.req.params.Priority, b.req.params.Priority); c != 0 {
			return c
		}
		if fa, fb := len(a.pending) <= shared, len(b.pending) <= shared; fa != fb {
			if fa {
				return -1
			}
			return 1
		}
		return before(a.req, b.req)
	})
	for _, sl := range s.prefilling {
		limit := shared
		if sl.req.params.Priority < decoding {
			limit = room
		}
		if free := s.pool.avail() - claimed; free < min(len(sl.pending), limit) {
			s.freeIdle(claimed + min(len(sl.pending), limit))
		}
		limit = min(limit, s.pool.avail()-claimed)
		if limit <= 0 {
			continue
		}
		// A medium's embeddings first, then the text up to the next one.
		m := s.addMedia(sl, limit, min(room, s.pool.avail()-claimed))
		n := max(0, min(len(sl.pending), limit-m)) // a whole chunk may be over limit
		if at := sl.checkpointAt - len(sl.cache); at > 0 {
			n = min(n, at) // stop where the shared prefix ends, for its checkpoint
		}
		if k := slices.IndexFunc(sl.pending[:n], isPlaceholder); k >= 0 {
			n = k
		}
		if n > 0 {
			sl.inBatch = true
		}
		for i, tok := range sl.pending[:n] {
			last := i == n-1 && n == len(sl.pending)
			if last {
				sl.outIdx = s.batch.Len()
			}
			s.batch.Add(tok, sl.nextPos(), sl.id, last)
			s.appendToken(sl, tok)
		}
		sl.pending = sl.pending[n:]
		n += m
		sl.req.gen.evalPrompt += n
		room -= n
		shared = max(0, min(shared-n, room))
	}
	s.nPrefill = s.batch.Len() - (s.nDecode - s.nDrafts) + s.media.n
	for _, sl := range s.slots {
		if sl.state != stateDecode || len(sl.req.gen.draft) == 0 {
			continue
		}
		g := &sl.req.gen
		sl.draftIdx = s.batch.Len()
		for _, tok := range g.draft {
			s.batch.Add(tok, sl.nextPos(), sl.id, true)
			s.appendToken(sl, tok)
		}
		// llama.cpp evaluates a sequence's last rollback+1 tokens of a
		// batch in one pass and keeps the state after each of them.
		sl.undo = min(len(g.draft), s.rollback)
		g.evalDecode += len(g.draft)
	}
	return s.batch.Len() > 0 || s.media.sl != nil
}

// sample reads the outputs of the decoded batch: each slot that produced
// logits gets its next token, which is detokenized, checked against the
// stop conditions and delivered, and a slot that evaluated a draft goes
// on through it (verify).
func (s *scheduler) sample() {
	now := time.Now()
	for _, sl := range s.slots {
		if sl.inBatch && sl.checkpointAt == len(sl.cache) && len(sl.pending) > 0 {
			s.checkpoint(sl) // the end of a prefix another slot shares (markShared)
		}
		if sl.outIdx < 0 || !sl.active() {
			continue
		}
		g := &sl.req.gen
		if sl.state == statePrefill {
			sl.state = stateDecode
			if g.prefillDone.IsZero() {
				g.prefillDone = now
			}
			s.checkpoint(sl)
		}
		s.verify(sl, now)
	}
}

// next samples the slot's token from the output at batch index idx and
// emits it. cells is the number of cells the slot's sequence would hold
// had it evaluated nothing past that output. It reports the token and
// whether the request goes on.
func (s *scheduler) next(sl *slot, idx, cells int, now time.Time) (llama.Token, bool) {
	if tok, ok := s.forcedToken(sl); ok {
		if tok, more, written := s.write(sl, tok, cells, now); written {
			return tok, more
		}
	}
	var lp float32
	// A spent reasoning budget writes its closing tokens instead.
	tok, forced, err := sl.req.gen.think.next(sl.req.sampler)
	switch {
	case err != nil:
	case forced:
		s.top = s.top[:0]
	case sl.req.params.Logprobs:
		tok, lp, s.top, err = sl.req.sampler.SampleLogprobs(s.lctx, idx, sl.req.params.TopLogprobs, s.top)
	default:
		tok, err = sl.req.sampler.Sample(s.lctx, idx)
	}
	var unwritable *llama.UnwritableError
	switch {
	case errors.Is(err, llama.ErrGrammarEnd):
		// The grammar is complete but end-of-generation is banned
		// (ignore_eos): the output is whole, so it is a normal stop.
		s.finish(sl, FinishStop, nil)
		return tok, false
	case errors.As(err, &unwritable):
		s.finish(sl, FinishError, &UnsatisfiableError{Reason: unwritable.Reason})
		return tok, false
	case err != nil:
		s.finish(sl, FinishError, err)
		return tok, false
	}
	return tok, s.emit(sl, tok, lp, cells, now)
}

// emit takes tok as the slot's next generated token (lp its
// log-probability, with Request.Logprobs, and s.top the alternatives):
// it is counted, detokenized, checked against the stop conditions and
// delivered, and becomes the token the next step evaluates. cells is the
// number of cells the slot's sequence holds before tok. It reports
// whether the request goes on: false when it finished or paused.
func (s *scheduler) emit(sl *slot, tok llama.Token, lp float32, cells int, now time.Time) bool {
	g := &sl.req.gen
	g.decoded++
	s.tokensOut++
	if g.decoded == 1 && g.firstToken.IsZero() {
		g.firstToken = now
		s.ttftSum += now.Sub(sl.req.submitted)
		s.ttftCount++
	}
	if !sl.req.params.IgnoreEOS && s.e.model.IsEOG(tok) {
		g.decoded-- // the end token is not part of the output
		s.tokensOut--
		s.finish(sl, FinishStop, nil)
		return false
	}
	logprobs := sl.req.params.Logprobs
	s.piece = s.e.model.AppendPiece(s.piece[:0], tok, slices.Contains(sl.req.params.ShowTokens, tok))
	g.think.see(s.piece)
	if logprobs {
		g.lp.add(s.entry(tok, lp), len(s.piece))
	}
	text, stop := g.out.push(s.piece)
	if g.pace != nil {
		g.released(tok, text, g.out.holding() || stop != "")
		g.pace.chunks.push(text, 1)
	} else {
		var lps []TokenLogprobs
		if logprobs {
			lps = g.lp.release(len(text), stop != "", false)
		}
		sl.req.stream.deliver(text, 1, lps)
	}
	g.last = tok
	switch {
	case stop != "":
		g.stopWord = stop
		s.finish(sl, FinishStop, nil)
	case g.decoded >= g.maxTokens:
		s.finish(sl, FinishLength, nil)
	case cells >= sl.nctx:
		// The token would need one more cell than the slot has.
		s.finish(sl, FinishLength, nil)
	case g.pace != nil && s.nextChunk(sl.req, now):
		sl.state = statePaused // until Continue (see retire)
	default:
		return true
	}
	return false
}

// entry is the logprobs entry of the sampled token tok (logprob lp) and
// the alternatives SampleLogprobs left in s.top.
func (s *scheduler) entry(tok llama.Token, lp float32) TokenLogprobs {
	e := TokenLogprobs{TokenLogprob: TokenLogprob{Token: tok, Text: s.pieceText(tok), Logprob: lp}}
	if len(s.top) > 0 {
		e.Top = make([]TokenLogprob, len(s.top))
		for i, a := range s.top {
			e.Top[i] = TokenLogprob{Token: a.Token, Text: s.pieceText(a.Token), Logprob: a.Logprob}
		}
	}
	return e
}

// pieceText is the token's text as the output would have it, cached: the
// same few tokens come back as alternatives step after step.
func (s *scheduler) pieceText(tok llama.Token) string {
	if s.pieces == nil {
		n := s.e.info.VocabSize
		s.pieces, s.known = make([]string, n), make([]bool, n)
	}
	if !s.known[tok] {
		s.pieces[tok] = string(s.e.model.AppendPiece(nil, tok, false))
		s.known[tok] = true
	}
	return s.pieces[tok]
}

// failBatch ends every request that had tokens in a failed decode, and
// only those. Their KV state is unknown, so their slots' caches are
// dropped.
func (s *scheduler) failBatch(err error) {
	for _, sl := range s.slots {
		if sl.active() && sl.inBatch {
			s.truncate(sl, 0)
			s.finish(sl, FinishError, err)
		}
	}
}

// finish ends the slot's request and makes the slot idle. The slot keeps
// its cached tokens for the next request's prefix reuse.
func (s *scheduler) finish(sl *slot, reason FinishReason, err error) {
	if sl.state == statePrefill {
		// Cells for tokens still pending were never written: the cache is
		// exactly what was evaluated.
		sl.pending = nil
	}
	s.end(sl.req, sl.id, reason, err)
	sl.lastUsed = time.Now()
	sl.reset()
	s.freed = true
	s.cellWait = false
}

// drop finishes a request that is not in a slot: one still queued, or a
// preempted one (which keeps the output it produced).
func (s *scheduler) drop(r *request, reason FinishReason, err error) {
	s.releaseLoad(r)
	if !r.gen.started {
		s.e.queued.Add(-1)
	}
	s.end(r, -1, reason, err)
}

// end delivers the request's last text and its Result, and frees its sampler.
func (s *scheduler) end(r *request, slotID int, reason FinishReason, err error) {
	// Detach the wake-up first: finishing cancels the request's context,
	// which must not poke the scheduler for nothing.
	r.stopWatch()
	now := time.Now()
	text := r.gen.out.flush()
	var lps []TokenLogprobs
	if reason == FinishStop && r.gen.stopWord != "" {
		text = "" // and the entries after the stop string are gone
	} else if r.params.Logprobs {
		lps = r.gen.lp.release(len(text), false, true)
	}
	if text != "" && r.gen.pace != nil {
		r.gen.flushed(text)
	}
	p := r.gen.pace
	switch {
	case p == nil:
		r.stream.deliver(text, 0, lps)
	case reason == FinishStop || reason == FinishLength || reason == FinishError:
		// What the chunker holds goes out at a normal end; after a
		// cancel, an interrupt or a pause timeout nobody waits for it.
		p.chunks.push(text, 0)
		s.lastChunks(r, now)
	}
	res := r.result(slotID, reason, err, now)
	if p != nil {
		s.pacedDone(r, reason)
		// The history ends within the text delivered (and spoken).
		spoken := p.delivered
		if reason == FinishInterrupted {
			spoken = min(spoken, int(r.stream.spoken.Load()))
		}
		k, chars := r.gen.history(spoken)
		res.History = append(slices.Clone(r.tokens), r.gen.outToks[:k]...)
		res.HistoryChars = chars
	}
	r.stream.finish(res)
	r.sampler.Close()
	freeMedia(r.media)
	if r.mediaHeld {
		<-s.e.mediaReqs
	}
	s.requests++
}

// shutdown finishes everything when the engine closes.
func (s *scheduler) shutdown() {
	for _, sl := range s.slots {
		if sl.active() {
			s.finish(sl, FinishCancelled, ErrClosed)
		}
	}
	waiting := s.waiting
	s.waiting = nil // no queued disk read starts as the others are let go
	for _, r := range waiting {
		s.drop(r, FinishCancelled, ErrClosed)
	}
	s.loads.Wait() // the reads in flight end with their files; the channel holds their results
	if s.encoding != nil {
		// Its request's context ended with it: the encoder stops at the
		// end of a layer.
		s.encodedChunk(<-s.encoded)
	}
	for _, j := range s.embeds {
		s.endEmbed(j, ErrClosed)
	}
	s.embeds = nil
	for {
		select {
		case r := <-s.e.submitq:
			s.drop(r, FinishCancelled, ErrClosed)
		case j := <-s.e.embedq:
			s.endEmbed(j, ErrClosed)
		default:
			s.spillAll()
			s.kv.close()
			if s.drafter != nil {
				s.drafter.close() // before the context an MTP head reads
			}
			s.lctx.Close()
			return
		}
	}
}

// deadline is the earliest time the scheduler, idle at now, must look
// again though nothing computes: a pause times out (pauseDeadline), a
// paused slot's grace ends while a request waits (graceDeadline), or a
// queued request has waited MaxQueueWait. False when there is none.
func (s *scheduler) deadline(now time.Time) (time.Time, bool) {
	d, ok := s.pauseDeadline()
	earliest := func(t time.Time) {
		if !ok || t.Before(d) {
			d, ok = t, true
		}
	}
	if g, found := s.graceDeadline(now); found {
		earliest(g)
	}
	if maxWait := s.e.cfg.MaxQueueWait; maxWait > 0 {
		for _, r := range s.waiting {
			if !r.gen.started {
				earliest(r.submitted.Add(maxWait))
			}
		}
	}
	return d, ok
}

// snapshot is what Engine.Stats and Engine.Slots read: published together,
// so that a reader who sees every slot idle sees the stats of that step.
type snapshot struct {
	stats Stats
	slots []SlotInfo
}

// publish stores the stats and slot snapshot for Engine.Stats and
// Engine.Slots: one per step, however many readers.
func (s *scheduler) publish() {
	if s.kv.rejoined() {
		slots, host := map[kvevents.Hash]bool{}, map[kvevents.Hash]bool{}
		for _, sl := range s.slots {
			s.kv.restate(sl.blocks, sl.cache, "", slots)
		}
		for _, e := range s.host.entries {
			s.kv.restate(e.blocks, e.tokens, kvevents.MediumCPU, host)
		}
	}
	s.kv.flush()
	st := Stats{
		SlotsTotal: len(s.slots), KVCellsTotal: s.pool.size(), KVCellsUsed: s.pool.used(), KVCellsActive: s.activeCells(),
		Requests: s.requests, TokensOut: s.tokensOut,
		Steps: s.steps, SplitSteps: s.splitSteps, ForwardPasses: s.lctx.Passes(), StepOwnTime: s.ownTime, Preemptions: s.preemptions, PoolPreemptions: s.poolPreemptions,
		BusySlots:    s.busySlots,
		PromptTokens: s.promptTokens, CachedPromptTokens: s.cachedTokens,
		HostCacheBytes: s.host.size, HostCacheEntries: len(s.host.entries),
		HostCacheSaved: s.host.saved, HostCacheRestored: s.host.restored,
		Paced:         s.paced,
		EmbedRequests: s.embedRequests, EmbedInputs: s.embedInputs, EmbedPasses: s.embedPasses,
		Queue: s.queueByClass(), TTFTSum: s.ttftSum, TTFTCount: s.ttftCount,
		DraftTokens: s.draftTokens, DraftAccepted: s.draftAccepted,
		Spec:             SpecStats{Drafts: s.spec.Drafts, DraftTokens: s.spec.DraftTokens, Accepted: s.spec.Accepted, AcceptedAt: s.acceptedAt()},
		CheckpointsSaved: s.checkpointsSaved, CheckpointHits: s.checkpointsUsed,
		MediaEncoded: s.mediaEncoded, MediaEncodeTime: s.mediaEncodeTime,
	}
	for _, sl := range s.slots {
		st.Checkpoints += len(sl.checkpoints)
	}
	st.CheckpointBytes = s.checkpointBytes
	for _, sl := range s.slots {
		if sl.active() {
			st.SlotsBusy++
		}
		if sl.state == statePaused {
			st.SlotsPaused++
		}
	}
	s.e.snap.Store(&snapshot{stats: st, slots: s.slotInfo()})
}

// acceptedAt is the published copy of spec.AcceptedAt, which readers of
// a snapshot keep: copied again only after a step took drafted tokens,
// not every step.
func (s *scheduler) acceptedAt() []uint64 {
	if s.pubAccepted != s.spec.Accepted || s.pubAcceptedAt == nil {
		s.pubAcceptedAt, s.pubAccepted = slices.Clone(s.spec.AcceptedAt), s.spec.Accepted
	}
	return s.pubAcceptedAt
}

// queueByClass counts the waiting requests by priority class, best first
// (see Stats.Queue); nil when none waits.
func (s *scheduler) queueByClass() []ClassQueue {
	var out []ClassQueue
	for _, r := range s.waiting {
		i, found := slices.BinarySearchFunc(out, r.params.Priority, func(c ClassQueue, p int) int { return cmp.Compare(c.Priority, p) })
		if !found {
			out = slices.Insert(out, i, ClassQueue{Priority: r.params.Priority})
		}
		if r.gen.started {
			out[i].Preempted++
		} else {
			out[i].Queued++
		}
	}
	return out
}

func (s *scheduler) slotInfo() []SlotInfo {
	out := make([]SlotInfo, len(s.slots))
	for i, sl := range s.slots {
		out[i] = SlotInfo{
			ID: sl.id, IsProcessing: sl.active(), State: sl.state.String(),
			NCtx: sl.nctx, CachedTokens: len(sl.cache),
		}
		if sl.req != nil {
			out[i].RequestID = sl.req.id
			out[i].Decoded = sl.req.gen.decoded
		}
	}
	return out
}
