package engine

import (
	"cmp"
	"slices"
	"time"
)

// Admission: which waiting request gets a slot, which slot, and what it
// finds already cached there. Only the scheduler goroutine runs this.

// before orders requests for service: lower Priority first (vLLM's
// meaning), then arrival order. A preempted request keeps its id, so it
// resumes ahead of everything that arrived after it in its class.
func before(a, b *request) int {
	if c := cmp.Compare(a.params.Priority, b.params.Priority); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// admit first bounds what idle slots hold (trimIdle) when a slot went
// idle, then moves waiting requests into free slots in service order. When no
// slot is free for a request and a slot runs one of a worse priority
// class, that one is preempted (see preempt) to make room. A request pinned to
// a busy slot waits without holding up the others.
func (s *scheduler) admit() {
	if s.freed {
		s.trimIdle()
		s.freed = false
	}
	if len(s.waiting) == 0 {
		return
	}
	slices.SortFunc(s.waiting, before)
	now := time.Now()
	var preempted []*request
	kept := s.waiting[:0]
	blocked := false // a request waits for cells: those served after it wait too
	for _, r := range s.waiting {
		if blocked || !r.admissible() || s.prefetch(r, now) {
			kept = append(kept, r)
			continue
		}
		sl := s.place(r)
		if sl == nil {
			if victim := s.victim(r, now); victim != nil {
				preempted = append(preempted, s.preempt(victim))
				sl = s.place(r)
			}
		}
		if sl == nil {
			kept = append(kept, r)
			continue
		}
		s.releaseLoad(r) // used, or not worth it: its bytes go
		if !s.cellsFor(r, sl, &preempted) {
			kept = append(kept, r)
			blocked, s.cellWait = true, true
			continue
		}
		if !r.gen.started {
			s.e.queued.Add(-1)
			s.promptTokens += uint64(len(r.tokens))
			s.cachedTokens += uint64(len(sl.cache))
		}
		sl.start(r, now, s.e.cfg.MaxTokensDefault)
	}
	clear(s.waiting[len(kept):])
	s.waiting = append(kept, preempted...)
}

// cellsFor reports whether the pool has the cells r needs beyond what
// place found cached in sl, plus a margin for its first decoded tokens,
// with the claims of the prompts already admitted set aside. When it has
// not, it frees idle caches (sl's excepted) and then preempts running
// requests of a worse priority class than r, the worst first; if that is
// not enough, r waits, and sl keeps the prefix place gave it. The
// preempted requests are appended to preempted.
func (s *scheduler) cellsFor(r *request, sl *slot, preempted *[]*request) bool {
	want := len(r.need()) - len(sl.cache)
	want += min(admitMargin(s.pool.size()), s.pool.size()-len(r.need()))
	s.protect = sl
	defer func() { s.protect = nil }()
	if s.pool.avail()-s.committed() >= want || s.freeIdle(want+s.committed()) {
		return true
	}
	for s.pool.avail()-s.committed() < want {
		var v *slot
		for _, a := range s.slots {
			if a.active() && a.req.params.Priority > r.params.Priority && (v == nil || before(a.req, v.req) > 0) {
				v = a
			}
		}
		if v == nil {
			return false
		}
		*preempted = append(*preempted, s.preemptForCells(v))
		s.freeIdle(want + s.committed())
	}
	return true
}

// admitMargin is the cells admission leaves free beyond a prompt's, so
// that the streams running already can grow a while before a preemption
// (vLLM keeps a 1 % watermark of its blocks for this).
func admitMargin(pool int) int { return 1 + pool/100 }

// victim returns the slot to preempt for r, among the slots r could use:
// one paused (a paced request waiting for its client computes nothing),
// if r is of its class or a better one, or its grace (Config.PauseGrace)
// is over, whatever r's class: the worst class first, then the longest
// paused; else the one running the request of a worse class than r
// served last by the order of before. Nil when r must wait.
func (s *scheduler) victim(r *request, now time.Time) *slot {
	var v *slot
	for _, sl := range s.slots {
		if !sl.active() || (r.params.PinSlot && sl.id != r.params.SlotID) {
			continue
		}
		paused := sl.state == statePaused
		worse := sl.req.params.Priority > r.params.Priority
		lent := paused && (sl.req.params.Priority == r.params.Priority || s.graceOver(sl, now))
		if !worse && !lent {
			continue
		}
		switch vp := v != nil && v.state == statePaused; {
		case v == nil:
			v = sl
		case paused != vp:
			if paused {
				v = sl
			}
		case paused:
			c := cmp.Compare(sl.req.params.Priority, v.req.params.Priority)
			if c > 0 || c == 0 && sl.req.gen.pace.heldAt.Before(v.req.gen.pace.heldAt) {
				v = sl
			}
		case before(sl.req, v.req) > 0:
			v = sl
		}
	}
	return v
}

// preempt takes the slot's request out of it without losing anything: the
// request keeps its sampler and output state and remembers the tokens it
// needs evaluated to go on (its history), and the slot becomes idle with
// its cache intact. When the request gets a slot again, that history is
// found in a slot or the host cache like any prompt prefix, so usually
// nothing is evaluated twice.
func (s *scheduler) preempt(sl *slot) *request {
	r := sl.req
	tail := sl.pending
	if sl.state == stateDecode || sl.state == statePaused {
		tail = []int32{r.gen.last}
		r.gen.tails++
	}
	if sl.state == statePaused {
		// Its client will continue it soon: keep the history in host
		// memory whatever its length (place saves only long tails).
		s.save(sl)
	}
	r.resume = append(slices.Clone(sl.cache), tail...)
	r.gen.preemptions++
	s.preemptions++
	sl.lastUsed = time.Now()
	sl.reset()
	return r
}

// need is what r must have evaluated in its slot before it samples: the
// prompt, or after a preemption its history.
func (r *request) need() []int32 {
	if r.gen.started {
		return r.resume
	}
	return r.tokens
}

// place chooses a free slot for r and fills its cache with the longest
// prefix of r's tokens held anywhere; nil when no slot is free for r.
//
// The slot is the free one whose cache loses least (the tokens past its
// own common prefix with r), the least recently used on a tie; so a new
// conversation takes an empty or stale slot and leaves a returning one's
// history alone. With a buffer per slot that a prefix is copied into
// (copies), a slot that keeps the busy ones in fewer runs of consecutive
// slots goes before that (runsAdded). NoCachePrompt reuses nothing, and
// counts every cached token as lost. The prefix then comes from the best of: the slot itself,
// any other slot, busy or idle (its cells are shared, not copied), or the
// host cache (restored); only caches of r's CacheSalt count, and the
// slot's cache becomes one of that salt.
// Before a slot's tail is overwritten it is saved to the host cache,
// unless it is short or held elsewhere already.
func (s *scheduler) place(r *request) *slot {
	need := r.need()
	salt := r.params.CacheSalt
	reuse := !r.params.NoCachePrompt
	// Each slot's common prefix with need, compared once.
	s.prefixes = s.prefixes[:0]
	for _, sl := range s.slots {
		m := 0
		if reuse && sl.salt == salt {
			m = s.reusable(sl, need)
		}
		s.prefixes = append(s.prefixes, m)
	}
	var target *slot
	loss, runs := 0, 0
	for i, sl := range s.slots {
		if sl.active() || (r.params.PinSlot && sl.id != r.params.SlotID) {
			continue
		}
		l, g := len(sl.cache)-s.prefixes[i], s.runsAdded(i)
		if target == nil || g < runs || (g == runs && (l < loss || (l == loss && sl.lastUsed.Before(target.lastUsed)))) {
			target, loss, runs = sl, l, g
		}
	}
	if target == nil {
		return nil
	}
	if loss >= minHostSave {
		s.save(target)
	}
	// Whatever the slot keeps of its cache below is a prefix of need of
	// r's salt (nothing, if its salt was another).
	target.salt = salt
	// The last token is evaluated again, even when cached, for its logits.
	limit := len(need) - 1
	src, n := target, min(s.prefixes[target.id], limit)
	shared := 0 // the longest prefix of need another slot's cache holds
	for i, sl := range s.slots {
		m := min(s.prefixes[i], limit)
		switch {
		case sl == target || s.sharesCells():
		case s.copies() && m >= n+minFollow:
			// Worth a copy of a whole buffer.
		default:
			continue
		}
		if m > n {
			src, n = sl, m
		}
		if sl != target && sl.salt == salt && reuse {
			shared = max(shared, min(commonPrefix(sl.cache, need), limit))
		}
	}
	s.markShared(target, shared, n)
	if reuse {
		// A restore takes cells for the whole entry, then frees its tail
		// (or goes back to one of its checkpoints).
		e, m := s.host.longest(need, salt)
		if e != nil {
			m = e.keep(min(m, limit), s.restorable(min(m, limit), len(e.tokens)))
		}
		if s.restoreDisk(target, r.load, need, max(n, m), limit) {
			return target
		}
		if src == target { // a failed load from disk emptied the slot
			n = min(n, len(target.cache))
		}
		// The restore first empties the slot, freeing the cells it
		// alone holds.
		if m > n && len(e.tokens) <= s.pool.avail()+s.pool.only(target.cells)-s.committed() {
			if s.restore(target, e, m) {
				return target
			}
			if src == target { // the failed load emptied the slot
				n = 0
			}
		}
		s.follow(target, need, n)
	}
	if src == target {
		s.truncate(target, n)
		return target
	}
	// The whole prefix comes from src, even the part the slot holds itself:
	// llama.cpp's CPU attention visits a sequence's cells in cell order, so
	// cells kept in position order keep outputs bit for bit those of a
	// request evaluated alone (see TestGoldenAloneAndBatched).
	s.truncate(target, 0)
	s.share(src, target, n)
	return target
}

// runsAdded is how many runs of consecutive busy slots a request placed
// in free slot i adds: 1 alone, 0 beside one busy slot, -1 between two.
// It counts with a buffer per slot that takes a prefix by copying
// (copies), and is 0 otherwise. There llama.cpp evaluates a step's
// decoding tokens in a pass of the weights for each such run
// (llama.Context.Decode): 4 streams in slots 0, 3, 7 and 12 take four,
// in slots 0 to 3 one, and a prefix held by another slot costs one copy.
func (s *scheduler) runsAdded(i int) int {
	if !s.copies() {
		return 0
	}
	n := 1
	if i > 0 && s.slots[i-1].active() {
		n--
	}
	if i+1 < len(s.slots) && s.slots[i+1].active() {
		n--
	}
	return n
}

// sharesCells reports whether slots may share cells. Not with a buffer
// per slot (Config.KVPerSlot). Not with a sliding window: llama.cpp
// overwrites a window cell that fell behind it only when one sequence
// holds it, so cells two sequences share stay until one of them is cut
// back, and the window's cache (sized for each sequence's window and a
// batch) runs out of cells ("no KV cache slot"). A slot then reuses only
// its own cache and checkpoints, as llama-server's do.
func (s *scheduler) sharesCells() bool { return s.window == 0 && !s.perSlot }

// copies reports whether a slot may take another's prefix by copying its
// buffer: with a buffer per slot (Config.KVPerSlot) and a memory that can
// be cut back at any position; a recurrent state or a sliding window
// moves between slots by checkpoints.
func (s *scheduler) copies() bool { return s.perSlot && !s.partial }

// markShared asks a slot about to evaluate its prompt, holding its first
// n tokens, for a checkpoint where the prompt stops sharing another
// slot's cache, at shared tokens, when the model's memory needs
// checkpoints to reuse a prefix, that is at least minFollow tokens past
// n, and the host budget can keep one: a third request with the same
// system prompt then starts from it, in any slot.
func (s *scheduler) markShared(sl *slot, shared, n int) {
	sl.checkpointAt = 0
	if s.partial && s.sharesCells() && s.host.budget > 0 && shared >= n+minFollow {
		sl.checkpointAt = shared
	}
}

// reusable is how much of need sl's sequence can give: their common
// prefix, when the model's memory can be cut back to any position. Part
// of some memories cannot (see checkpoint.go): a recurrent state is one
// state at the sequence's end, a sliding window drops the positions
// behind it. Such a sequence gives all of its cache when that is a prefix
// of need but for need's last token (evaluated again for its logits), or
// the common prefix (short of that token) when its window still covers it
// (cuttable), else the last of its checkpoints within the common prefix
// (see share), else nothing.
func (s *scheduler) reusable(sl *slot, need []int32) int {
	// Need's last token is evaluated again, even when cached, for its
	// logits: what sl gives stops before it, and must be cut back there.
	m := min(commonPrefix(sl.cache, need), max(len(need)-1, 0))
	if !s.partial || m == len(sl.cache) || s.cuttable(sl, m) {
		return m
	}
	return lastCheckpoint(sl.checkpoints, m)
}

// minFollow is the least number of prompt tokens worth waiting for
// another slot to evaluate rather than evaluating them again.
const minFollow = 32

// follow makes target, about to run a request needing need with its first
// n tokens at hand, wait for the prefilling slot whose prompt shares the
// most of need beyond n, if that is at least minFollow tokens more: when
// requests with one long system prompt arrive together, it is evaluated
// once, not once per slot.
func (s *scheduler) follow(target *slot, need []int32, n int) {
	if !s.sharesCells() {
		return
	}
	var leader *slot
	best := n + minFollow - 1
	for _, sl := range s.slots {
		if sl == target || sl.state != statePrefill || sl.leader != nil || sl.salt != target.salt {
			continue
		}
		// What the leader will hold: its cache, then its pending tokens.
		m := commonPrefix(sl.cache, need)
		if m == len(sl.cache) {
			m += commonPrefix(sl.pending, need[m:])
		}
		if m = min(m, len(need)-1); m > best {
			leader, best = sl, m
		}
	}
	if leader != nil {
		target.leader, target.leaderReq, target.followLen = leader, leader.req, best
		// A state that cannot be cut back is shared whole: the leader
		// pauses its prefill where the prompts part (and checkpoints
		// there), so the follower finds it at that point.
		if s.partial && (leader.checkpointAt <= len(leader.cache) || best < leader.checkpointAt) {
			leader.checkpointAt = best
		}
	}
}

// release ends the wait of every following slot whose leader now holds
// the awaited prefix, or no longer runs the request it was following:
// the follower shares the leader's cells for the longest prefix it has
// and evaluates the rest itself.
func (s *scheduler) release() {
	for _, sl := range s.slots {
		l := sl.leader
		if l == nil || (l.req == sl.leaderReq && len(l.cache) < sl.followLen) {
			continue
		}
		sl.leader, sl.leaderReq, sl.followLen = nil, nil, 0
		if l.salt != sl.salt {
			continue // the leader's slot went to another tenant
		}
		r := sl.req
		held := len(sl.cache) // the prefix placed at admission
		need := append(slices.Clone(sl.cache), sl.pending...)
		m := min(s.reusable(l, need), len(need)-1)
		if m <= held {
			continue
		}
		s.truncate(sl, 0)
		m = s.share(l, sl, m)
		sl.pending = need[m:]
		if r.gen.preemptions == 0 && m > r.gen.cached { // the first admission: count the reuse
			s.cachedTokens += uint64(m - r.gen.cached)
			r.gen.cached = m
		}
	}
}

// trimIdle bounds the cells idle slots hold beyond the prefixes running
// slots share with them to an equal share of the pool (what a slot held
// when each had a fixed share), dropping the least recently used tails
// first (into the host cache when worth it). Every query of every step
// scans the unified cache's whole used extent, masked cells included:
// one decode token of a 128-token sequence took 10.7 ms beside an empty
// cache and 16.4 ms beside 15 idle 1,024-token caches
// (BenchmarkDecodeBesideIdleCaches).
func (s *scheduler) trimIdle() {
	tails := s.idleTails()
	total := 0
	for _, t := range tails {
		total += len(t.sl.cache) - t.keep
	}
	bound := s.pool.size() / len(s.slots)
	for _, t := range tails {
		if total <= bound {
			break
		}
		total -= len(t.sl.cache) - t.keep
		s.dropTail(t)
	}
}

// truncate drops the slot's cached tokens from position n on, and gives
// the cells it alone held back to the pool. Where the memory cannot be
// cut back to n (see checkpoint.go) it keeps less: up to its last
// checkpoint within n, or nothing.
func (s *scheduler) truncate(sl *slot, n int) {
	if n >= len(sl.cache) {
		return
	}
	rolled := false
	cut := s.rewind(sl, n)
	if !cut && (len(sl.cache)-n <= sl.undo || s.cuttable(sl, n)) && s.lctx.SeqRemove(sl.id, sl.pos(n), -1) {
		// On a recurrent state, only over a step's draft (slot.undo).
		cut, rolled = true, s.recurrent
	}
	if !cut {
		// Back to the last checkpoint within n, or to nothing.
		if k := lastCheckpoint(sl.checkpoints, n); s.rewind(sl, k) {
			n = k
		} else {
			s.lctx.SeqRemove(sl.id, -1, -1)
			n = 0
		}
	}
	s.dropCheckpoints(sl, n)
	sl.undo, sl.rolled = 0, rolled
	s.pool.release(sl.cells[n:])
	s.kv.truncated(sl, n)
	sl.shift -= shiftOf(sl.cache[n:])
	sl.cache = sl.cache[:n]
	sl.cells = sl.cells[:n]
	sl.pooled = min(sl.pooled, n)
}

// restorable reports whether a saved state of total tokens, restored,
// can be kept to its first n: always, but on a recurrent state (one state
// at the end, no window), which only a whole restore keeps. A sliding
// window is known only once loaded (cuttable).
func (s *scheduler) restorable(n, total int) bool {
	return !s.partial || s.window > 0 || n == total
}

// rewind cuts the sequence of a model whose memory cannot be cut back at
// will to its first n tokens from a checkpoint taken there, and reports
// whether it did.
func (s *scheduler) rewind(sl *slot, n int) bool {
	return s.partial && n > 0 && s.fromCheckpoint(sl, sl, n)
}

// save copies the slot's KV state into the host cache (or, without one,
// the disk tier), unless another slot or an entry of its salt already
// holds all of its tokens.
func (s *scheduler) save(sl *slot) {
	noRoom := s.host.budget <= 0 || int64(len(sl.cache))*s.host.perToken > s.host.budget
	if (noRoom && s.disk == nil) || s.host.covers(sl.cache, sl.salt) {
		return // no room (nor a disk tier), or a state larger than the whole budget
	}
	for _, o := range s.slots {
		if o != sl && o.salt == sl.salt && commonPrefix(o.cache, sl.cache) == len(sl.cache) {
			return
		}
	}
	if state := s.lctx.SeqStateGet(sl.id); len(state) > 0 {
		s.host.add(sl.cache, sl.salt, state, slices.Clone(sl.checkpoints)) // to the disk tier when the host cache has no budget
	}
}

// restore loads the host entry e into the slot's sequence and keeps its
// first n tokens. It reports false, leaving the slot empty, when
// llama.cpp cannot load it or the sequence cannot be cut back to n. The caller has checked that the pool has
// the cells for the whole entry.
func (s *scheduler) restore(sl *slot, e *hostEntry, n int) bool {
	s.truncate(sl, 0)
	if !s.lctx.SeqStateSet(sl.id, e.state) || s.lctx.SeqPosMax(sl.id) != lastPos(e.tokens) {
		s.lctx.SeqRemove(sl.id, -1, -1)
		return false
	}
	sl.salt = e.salt
	for _, tok := range e.tokens {
		s.appendToken(sl, tok)
	}
	for _, c := range e.checkpoints {
		s.adoptCheckpoint(sl, c)
	}
	s.truncate(sl, n)
	if len(sl.cache) != n {
		return false // the memory could not be cut back to n (see checkpoint.go): the slot is empty
	}
	s.host.touch(e)
	s.host.restored++
	return true
}
