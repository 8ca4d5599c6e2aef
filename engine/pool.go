package engine

import "slices"

// The KV cache as one pool. The slots share the unified cache's cells:
// a request may grow to the context a request may use (Config.CtxPerRequest)
// while cells are free, whatever the other slots hold. The scheduler
// mirrors llama.cpp's cell occupancy exactly, so that it never asks for a
// cell the cache does not have (llama_decode would fail the whole batch):
// evaluating a token takes a free cell; llama_memory_seq_cp (a prefix
// shared with another slot) adds a holder to existing cells; removing a
// sequence's positions frees the cells it alone held.
//
// When a step needs cells the pool does not have, the scheduler takes them
// back in this order (reclaim): the tails of idle slots' caches, least
// recently used first (saved to the host cache when worth it), then the
// running request served last by the order of before (the worst priority
// class, then the latest arrival), which is preempted: its history is
// saved to the host cache when it fits there, and it resumes later with
// nothing lost, as after a preemption for a better class.

// cellPool tracks which cells of the slots' part of the unified KV cache
// hold a token, and for how many slot sequences. Only the scheduler uses
// it.
type cellPool struct {
	refs []int32 // per cell: the slot sequences holding it
	free []int32 // cells no sequence holds (a stack)
	// mark is scratch for counting distinct cells.
	mark []bool
}

func newCellPool(n int) cellPool {
	p := cellPool{refs: make([]int32, n), free: make([]int32, n), mark: make([]bool, n)}
	for i := range p.free {
		p.free[i] = int32(n - 1 - i)
	}
	return p
}

// size is the number of cells in the pool.
func (p *cellPool) size() int { return len(p.refs) }

// avail is the number of free cells.
func (p *cellPool) avail() int { return len(p.free) }

// used is the number of cells holding a token.
func (p *cellPool) used() int { return len(p.refs) - len(p.free) }

// take hands out a free cell, now held by one sequence. The caller has
// checked avail.
func (p *cellPool) take() int32 {
	c := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.refs[c] = 1
	return c
}

// hold adds a holder to each of cells (a shared prefix).
func (p *cellPool) hold(cells []int32) {
	for _, c := range cells {
		p.refs[c]++
	}
}

// only is the number of cells only one sequence holds: those a sequence
// holding cells would free if it were cleared.
func (p *cellPool) only(cells []int32) int {
	n := 0
	for _, c := range cells {
		if p.refs[c] == 1 {
			n++
		}
	}
	return n
}

// release removes a holder from each of cells, freeing those it was the
// last holder of.
func (p *cellPool) release(cells []int32) {
	for _, c := range cells {
		if p.refs[c]--; p.refs[c] == 0 {
			p.free = append(p.free, c)
		}
	}
}

// distinct counts the distinct cells of the lists.
func (p *cellPool) distinct(lists [][]int32) int {
	n := 0
	for _, cells := range lists {
		for _, c := range cells {
			if !p.mark[c] {
				p.mark[c] = true
				n++
			}
		}
	}
	for _, cells := range lists {
		for _, c := range cells {
			p.mark[c] = false
		}
	}
	return n
}

// appendToken evaluates tok at the slot's next position in this step:
// the token joins the slot's cache with a free cell. The caller has
// checked that a cell is free.
func (s *scheduler) appendToken(sl *slot, tok int32) {
	sl.cache = append(sl.cache, tok)
	sl.shift += chunkShift(tok)
	sl.cells = append(sl.cells, s.pool.take())
	sl.undo, sl.rolled = 0, false
	s.kv.appended(sl)
}

// share makes the first n tokens of src's cache dst's, sharing their
// cells (llama_memory_seq_cp copies no data), and returns n. dst's cache
// is empty. Where src's memory cannot be cut back to n, dst takes the
// rest of its state from src's checkpoint at n (reusable offers no other
// n); when that fails dst stays empty and share returns 0.
func (s *scheduler) share(src, dst *slot, n int) int {
	if s.perSlot {
		return s.copyPrefix(src, dst, n)
	}
	if src.rolled {
		return 0 // dst would take src's state from before its last cut
	}
	s.lctx.SeqCopy(src.id, dst.id, 0, src.pos(n))
	if !s.cuttable(src, n) && !s.fromCheckpoint(src, dst, n) {
		s.lctx.SeqRemove(dst.id, -1, -1)
		return 0
	}
	dst.cache = append(dst.cache, src.cache[:n]...)
	dst.shift = shiftOf(dst.cache)
	dst.cells = append(dst.cells, src.cells[:n]...)
	s.pool.hold(src.cells[:n])
	s.kv.shared(src, dst, n)
	return n
}

// copyPrefix gives dst, with a buffer of its own (Config.KVPerSlot), the
// first n tokens of src's cache, and returns n: llama.cpp copies src's
// whole buffer into dst's (memory, far cheaper than evaluating n tokens
// again), and dst drops what follows n. The cells keep their places: the
// start of the buffer, in position order. dst's cache is empty. Only a
// memory that can be cut back at any position (copies).
func (s *scheduler) copyPrefix(src, dst *slot, n int) int {
	if s.pool.avail() < n {
		return 0
	}
	s.lctx.SeqCopyBuffer(src.id, dst.id)
	s.lctx.SeqRemove(dst.id, src.pos(n), -1)
	dst.cache = append(dst.cache, src.cache[:n]...)
	dst.shift = shiftOf(dst.cache)
	for range n {
		dst.cells = append(dst.cells, s.pool.take())
	}
	s.kv.shared(src, dst, n)
	return n
}

// committed is the number of cells the slots' pending prompt tokens will
// take: the claims of requests already admitted, which a new admission
// must leave free.
func (s *scheduler) committed() int {
	n := 0
	for _, sl := range s.slots {
		if sl.state == statePrefill {
			n += len(sl.pending)
		}
	}
	return n
}

// freeIdle frees cells from idle slots' caches, least recently used
// first, until need cells are free or no idle cache has any to give:
// each idle cache is cut to the prefix a running slot shares with it
// (dropTail). It reports whether need cells are free.
func (s *scheduler) freeIdle(need int) bool {
	if s.pool.avail() >= need {
		return true
	}
	for _, t := range s.idleTails() {
		s.dropTail(t)
		if s.pool.avail() >= need {
			return true
		}
	}
	return false
}

// idleTail is an idle slot and the prefix of its cache a running slot
// shares (keep): cutting the slot back to keep frees the rest.
type idleTail struct {
	sl   *slot
	keep int
}

// idleTails lists the idle slots whose caches hold cells no running slot
// shares, least recently used first (in slot order on a tie), the slot
// being admitted to (s.protect) left out. Each keep is found once: cutting
// one idle cache back changes no other's, which depends only on the
// running slots' cells. The list is scratch, valid until the next call.
func (s *scheduler) idleTails() []idleTail {
	s.tails = s.tails[:0]
	for _, sl := range s.slots {
		if sl.active() || sl == s.protect || len(sl.cache) == 0 {
			continue
		}
		if keep := s.sharedWithRunning(sl); keep < len(sl.cache) {
			s.tails = append(s.tails, idleTail{sl, keep})
		}
	}
	slices.SortStableFunc(s.tails, func(a, b idleTail) int { return a.sl.lastUsed.Compare(b.sl.lastUsed) })
	return s.tails
}

// dropTail cuts the idle slot back to the prefix a running slot shares,
// its tail saved to the host cache first when worth it (minHostSave).
func (s *scheduler) dropTail(t idleTail) {
	if len(t.sl.cache)-t.keep >= minHostSave {
		s.save(t.sl)
	}
	s.truncate(t.sl, t.keep)
}

// sharedWithRunning is the longest prefix of the idle slot's cache whose
// cells a running slot (or the slot being admitted to) also holds.
func (s *scheduler) sharedWithRunning(idle *slot) int {
	keep := 0
	for _, a := range s.slots {
		if a == idle || (!a.active() && a != s.protect) {
			continue
		}
		n := min(len(a.cells), len(idle.cells))
		i := 0
		for i < n && a.cells[i] == idle.cells[i] {
			i++
		}
		keep = max(keep, i)
	}
	return keep
}

// makeRoom frees cells until need are free, for the request r: first from
// idle caches, then by preempting running requests served after r by the
// order of before, the last of them first. self, when not nil, is r's own
// slot: with nothing worse left to preempt, r gives its own slot up
// rather than wait for cells that only it could free. It reports whether
// need cells are free; false also when r itself was preempted.
func (s *scheduler) makeRoom(r *request, self *slot, need int) bool {
	if s.freeIdle(need) {
		return true
	}
	for s.pool.avail() < need {
		var v *slot
		for _, sl := range s.slots {
			if sl.active() && sl != self && before(sl.req, r) > 0 && (v == nil || before(sl.req, v.req) > 0) {
				v = sl
			}
		}
		if v == nil {
			if self != nil {
				s.waiting = append(s.waiting, s.preemptForCells(self))
			}
			return false
		}
		s.waiting = append(s.waiting, s.preemptForCells(v))
		s.freeIdle(need)
	}
	return true
}

// preemptForCells preempts the slot's request (see preempt) and gives its
// cells back to the pool, the history saved in the host cache first when
// it fits there.
func (s *scheduler) preemptForCells(sl *slot) *request {
	if sl.state != statePaused { // preempt saves a paused slot itself
		s.save(sl)
	}
	r := s.preempt(sl)
	s.truncate(sl, 0)
	s.poolPreemptions++
	return r
}

// activeCells counts the cells running slots hold.
func (s *scheduler) activeCells() int {
	s.activeLists = s.activeLists[:0]
	for _, sl := range s.slots {
		if sl.active() {
			s.activeLists = append(s.activeLists, sl.cells)
		}
	}
	return s.pool.distinct(s.activeLists)
}
