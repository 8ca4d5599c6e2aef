package engine

// Checkpoints of recurrent state. A recurrent or hybrid model's sequence
// holds one recurrent state, at its end: llama.cpp cannot cut it back to
// an earlier position, so a prompt that shares only part of a cached
// sequence (the next turn of a conversation whose last answer the client
// sends back in other tokens, a second question after the same system
// prompt) would be evaluated from its start. The scheduler keeps, for
// each slot, copies of the recurrent state at the end of its recent
// prompts (Context.SeqStatePartial: the recurrent part alone; attention
// cells are cut back as for any model), and a request that runs in that
// slot continues from the longest one within its common prefix.

// maxCheckpoints bounds the checkpoints a slot keeps: the newest ones,
// which the next turns of its conversation find.
const maxCheckpoints = 4

// checkpoint keeps the recurrent state of a slot that just evaluated its
// prompt, at the prompt's end, dropping the slot's oldest checkpoint when
// it has maxCheckpoints.
func (s *scheduler) checkpoint(sl *slot) {
	if !s.recurrent || len(sl.cache) == 0 {
		return
	}
	pos := len(sl.cache)
	if n := len(sl.checkpoints); n > 0 && sl.checkpoints[n-1].pos == pos {
		return
	}
	state := s.lctx.SeqStatePartial(sl.id)
	if len(state) == 0 {
		return
	}
	if len(sl.checkpoints) == maxCheckpoints {
		sl.checkpoints = append(sl.checkpoints[:0], sl.checkpoints[1:]...)
	}
	sl.checkpoints = append(sl.checkpoints, checkpoint{pos: pos, state: state})
	s.checkpointsSaved++
}

// dropCheckpoints forgets the slot's checkpoints past its first n tokens.
func (s *scheduler) dropCheckpoints(sl *slot, n int) {
	kept := sl.checkpoints[:0]
	for _, c := range sl.checkpoints {
		if c.pos <= n {
			kept = append(kept, c)
		}
	}
	clear(sl.checkpoints[len(kept):])
	sl.checkpoints = kept
}

// checkpointStats counts the slots' checkpoints and their bytes.
func (s *scheduler) checkpointStats() (n int, bytes int64) {
	for _, sl := range s.slots {
		n += len(sl.checkpoints)
		for _, c := range sl.checkpoints {
			bytes += int64(len(c.state))
		}
	}
	return n, bytes
}
