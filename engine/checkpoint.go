package engine

import "slices"

// Checkpoints. Part of some models' memory cannot be cut back to an
// earlier position: a recurrent or hybrid model's sequence holds one
// recurrent state, at its end, and a sliding-window layer keeps only the
// last window of positions (llama.cpp drops the cells behind it). A
// prompt that shares only part of such a cached sequence (the next turn
// of a conversation whose last answer the client sends back in other
// tokens, a second question after the same system prompt) would be
// evaluated from its start. The scheduler keeps, for each slot, copies of
// that part at the end of its recent prompts (Context.SeqStatePartial;
// the other attention cells are cut back as for any model), and a request
// that runs in that slot continues from the longest one within its
// common prefix.

// maxCheckpoints bounds the checkpoints a slot keeps: the newest ones,
// which the next turns of its conversation find.
const maxCheckpoints = 4

// checkpoint keeps the partial state of a slot that just evaluated its
// prompt, at the prompt's end, dropping the slot's oldest checkpoint when
// it has maxCheckpoints. Checkpoints and the host cache's entries share
// its byte budget (Config.HostCacheBytes, which the memory budget counts
// once): whatever of either was used least recently goes first, and
// without a budget no checkpoint is kept.
func (s *scheduler) checkpoint(sl *slot) {
	if !s.partial || len(sl.cache) == 0 || s.host.budget <= 0 {
		return
	}
	pos := len(sl.cache)
	if n := len(sl.checkpoints); n > 0 && sl.checkpoints[n-1].pos == pos {
		return
	}
	state := s.lctx.SeqStatePartial(sl.id)
	if len(state) == 0 || int64(len(state)) > s.host.budget {
		return
	}
	if len(sl.checkpoints) == maxCheckpoints {
		s.dropCheckpoint(sl, 0)
	}
	s.host.fit(int64(len(state)))
	sl.checkpoints = append(sl.checkpoints, checkpoint{pos: pos, state: state, used: s.host.tick()})
	s.checkpointBytes += int64(len(state))
	s.checkpointsSaved++
}

// lastCheckpoint is the position of the last of cps within the first m
// tokens, 0 for none.
func lastCheckpoint(cps []checkpoint, m int) int {
	k := 0
	for _, c := range cps {
		if c.pos <= m {
			k = max(k, c.pos)
		}
	}
	return k
}

// fromCheckpoint cuts dst back to its first n tokens from src's
// checkpoint there: dst holds src's first n cells (copied, or its own
// when src is dst) with a later recurrent state and window, which the
// checkpoint replaces. It reports false when src has none or llama.cpp
// cannot load it.
func (s *scheduler) fromCheckpoint(src, dst *slot, n int) bool {
	for i, c := range src.checkpoints {
		if c.pos == n {
			if !s.lctx.SetSeqStatePartial(dst.id, c.state) || !s.lctx.SeqRemove(dst.id, src.pos(n), -1) {
				return false
			}
			s.checkpointsUsed++
			src.checkpoints[i].used = s.host.tick()
			return true
		}
	}
	return false
}

// adoptCheckpoint gives the slot, just restored from a host entry or a
// file, a checkpoint that came with it.
func (s *scheduler) adoptCheckpoint(sl *slot, c checkpoint) {
	sl.checkpoints = append(sl.checkpoints, c)
	s.checkpointBytes += int64(len(c.state))
}

// dropCheckpoint forgets the slot's i-th checkpoint.
func (s *scheduler) dropCheckpoint(sl *slot, i int) {
	s.checkpointBytes -= int64(len(sl.checkpoints[i].state))
	sl.checkpoints = slices.Delete(sl.checkpoints, i, i+1)
}

// leastUsedCheckpoint finds the checkpoint, of any slot, used least
// recently; nil when there is none.
func (s *scheduler) leastUsedCheckpoint() (*slot, int) {
	var from *slot
	at := 0
	for _, sl := range s.slots {
		for i, c := range sl.checkpoints {
			if from == nil || c.used < from.checkpoints[at].used {
				from, at = sl, i
			}
		}
	}
	return from, at
}

// checkpoints are the host cache's other budgetHolder.
type checkpoints struct{ s *scheduler }

func (h checkpoints) held() int64 { return h.s.checkpointBytes }

func (h checkpoints) oldest() (uint64, bool) {
	sl, i := h.s.leastUsedCheckpoint()
	if sl == nil {
		return 0, false
	}
	return sl.checkpoints[i].used, true
}

func (h checkpoints) dropOldest() {
	if sl, i := h.s.leastUsedCheckpoint(); sl != nil {
		h.s.dropCheckpoint(sl, i)
	}
}

// cuttable reports whether the slot's sequence can be cut back to its
// first n tokens as it is: always, unless part of the model's memory
// cannot (partial); then only when that part still holds the window
// before n (nothing of a recurrent state does). It is also what another
// sequence given the slot's cells (share) holds: a recurrent state's
// copies (slot.undo) go back for the slot's own sequence only.
func (s *scheduler) cuttable(sl *slot, n int) bool {
	if !s.partial || n >= len(sl.cache) {
		return true
	}
	lo := s.lctx.SeqPosMin(sl.id)
	return lo <= 0 && s.window > 0 || lo >= 0 && lo < sl.pos(n)-s.window
}

// dropCheckpoints forgets the slot's checkpoints past its first n tokens.
func (s *scheduler) dropCheckpoints(sl *slot, n int) {
	kept := sl.checkpoints[:0]
	for _, c := range sl.checkpoints {
		if c.pos <= n {
			kept = append(kept, c)
		} else {
			s.checkpointBytes -= int64(len(c.state))
		}
	}
	clear(sl.checkpoints[len(kept):])
	sl.checkpoints = kept
}
