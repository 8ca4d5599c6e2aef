package engine

import (
	"errors"
	"slices"
	"time"

	"github.com/corral-llm/corral/llama"
)

// Jump-forward decoding: where a request's grammar leaves no choice of
// text, the tokens that write it are evaluated together, in the step
// that evaluates the token sampled before them, instead of one step each.
//
// llama.cpp's grammar allows every token whose text fits, so even a
// literal like `<tool_call>\n{"name": "` is never a single token's choice:
// the model may write it in pieces of any length, or byte by byte with
// byte-fallback tokens. So the engine does not decide the tokens; it
// guesses them (a draft) and the model confirms them. After a token is
// sampled, the text the grammar requires next (llama.Sampler.Forced) is
// cut into the tokens with the longest text (llama.Pieces.Split), and
// the next step evaluates the sampled token and those, with logits at
// each. The request then samples at each position in turn, exactly as
// it would one step at a time, for as long as the token it samples is
// the drafted one: a confirmed token's successor is already evaluated.
// At the first token that differs, or when the request ends, the cells
// of the drafted tokens after it are dropped, and the sampled token is
// evaluated in the next step as usual.
//
// The drafted tokens come last in the batch, so that their cells are the
// last ones: dropped, they are the first the next step fills, and each
// sequence's cells stay in position order as they would without drafts
// (llama.cpp's CPU attention sums over a sequence's cells in cell order;
// see TestGoldenAloneAndBatched), unless two slots drop drafted tokens
// in one step.
//
// Sampling is unchanged (the same sampler, the same order, the same
// random draws), so the output is the one of plain decoding. A drafted
// token the model does not confirm costs its share of a forward pass
// (BenchmarkDecodeWithDraft), and its logits. A model that writes the
// markup its own way (as a model with random weights does, with byte
// tokens as often as not) confirms little, so each request's drafts
// shrink to one token more than it last confirmed, and grow back,
// doubling, while it confirms them whole.
//
// A recurrent state (Mamba, RWKV, and the hybrids' recurrent layers)
// holds no cells to drop: it advanced over the whole draft. On such a
// model a slot drafts only text the request has written for it
// (JumpForce, see forces), which it takes whole unless the request ends
// on the way (a stop string). Should a draft still not be taken while the
// request goes on (the grammar refusing a drafted token), the slot goes
// back to its last checkpoint within what it wrote and the request
// resumes from there like a preempted one (see requeue): it evaluates
// the tokens after the checkpoint again, but its output is unchanged.

// maxDraft bounds the tokens drafted for one slot in one step.
const maxDraft = 32

// maxDraftText bounds the forced text a draft is cut from, in bytes.
const maxDraftText = 256

// draft sets the slot's draft (gen.draft): the tokens the next step
// evaluates after gen.last, just added to the batch, at most room of
// them. It returns their number.
func (s *scheduler) draft(sl *slot, room int) int {
	r := sl.req
	g := &r.gen
	g.draft, g.spec = g.draft[:0], false
	// A drafted token is worth evaluating only where plain decoding would
	// evaluate it: before the request's last token (max tokens) and
	// within the slot's cells.
	room = min(room, g.maxTokens-g.decoded-1, sl.nctx-len(sl.cache))
	if s.e.jump == "" || g.pace != nil || !r.sampler.HasGrammar() || s.recurrent && !s.forces(sl) {
		// A paced request may pause after any token: its tokens are
		// evaluated one step at a time. A recurrent state drafts only
		// text it writes.
		return s.speculate(sl, room)
	}
	n := min(g.draftLimit(), room)
	if n <= 0 {
		return 0
	}
	s.forced = r.sampler.Forced(s.forced[:0], maxDraftText)
	if len(s.forced) == 0 {
		return s.speculate(sl, room) // the grammar leaves a choice: guess
	}
	g.draft, _ = s.e.model.Pieces().Split(s.forced, n, g.draft)
	s.draftTokens += uint64(len(g.draft))
	return len(g.draft)
}

// verify samples the slot's next token from the step's output and, when
// the step evaluated a draft after the slot's last token, goes on at each
// drafted position: with JumpConfirm, sampling there for as long as the
// token sampled is the one drafted; with JumpForce, taking the drafted
// tokens as written (see write) and sampling after the last. The cells
// of drafted tokens past the last output sampled from are dropped, so
// that the slot's cache holds what plain decoding would hold.
func (s *scheduler) verify(sl *slot, now time.Time) {
	g := &sl.req.gen
	draft, spec := g.draft, g.spec
	g.draft, g.spec = g.draft[:0], false // draft keeps the tokens until the next buildBatch
	// The cells the sequence holds up to the output at outIdx.
	base := len(sl.cache) - len(draft)
	force := s.forces(sl) && !spec // a guess is sampled, never written
	for i := 0; ; i++ {
		idx := sl.outIdx
		if i > 0 {
			idx = sl.draftIdx + i - 1
		}
		var tok llama.Token
		var more, written bool
		if force && i < len(draft) {
			tok, more, written = s.write(sl, draft[i], base+i, now)
		}
		if !written {
			tok, more = s.next(sl, idx, base+i, now)
		}
		if more && i < len(draft) && tok == draft[i] && (s.e.cfg.cutDraft == nil || !s.e.cfg.cutDraft(i)) {
			if !spec {
				s.draftAccepted++
			}
			continue
		}
		// truncate only reslices the cache, so hist keeps its tokens
		// should the memory go back further than base+i.
		hist := sl.cache[:base+i]
		s.truncate(sl, base+i)
		if more && len(sl.cache) < base+i {
			s.requeue(sl, hist)
			return
		}
		switch {
		case len(draft) == 0:
		case spec:
			s.specTook(g, min(i, len(draft)), len(draft))
		case i == len(draft):
			g.draftMax = min(maxDraft, 2*g.draftLimit())
		default:
			g.draftMax = i + 1
		}
		return
	}
}

// requeue takes the slot's request, going on after a draft its memory
// could not drop (the slot went back to a checkpoint, or to nothing),
// out of the slot as a preemption does and queues it again to resume
// from hist, the tokens it had evaluated before the draft's first
// dropped token, and its last token.
func (s *scheduler) requeue(sl *slot, hist []int32) {
	kept := len(sl.cache)
	r := s.preempt(sl)
	r.resume = append(slices.Clone(hist), r.resume[kept:]...)
	s.waiting = append(s.waiting, r)
}

// forces reports whether the slot's request has the text its grammar
// forces written for it (JumpForce), rather than sampled.
func (s *scheduler) forces(sl *slot) bool {
	r := sl.req
	return s.e.jump == JumpForce && r.gen.pace == nil && !r.params.Logprobs && !r.gen.think.bounds() && r.sampler.HasGrammar()
}

// forcedToken is the token that starts the text the slot's grammar
// forces next, cut as a draft cuts it, when the request has that text
// written for it (see forces); ok is false when the grammar leaves a
// choice. Writing it rather than sampling wherever the text is forced,
// drafted or not, makes the output independent of how the steps drafted
// (the room a batch left, a preemption's re-evaluation).
func (s *scheduler) forcedToken(sl *slot) (tok llama.Token, ok bool) {
	if !s.forces(sl) {
		return 0, false
	}
	s.forced = sl.req.sampler.Forced(s.forced[:0], maxDraftText)
	if len(s.forced) == 0 {
		return 0, false
	}
	s.forcedTok, _ = s.e.model.Pieces().Split(s.forced, 1, s.forcedTok[:0])
	if len(s.forcedTok) == 0 {
		return 0, false
	}
	return s.forcedTok[0], true
}

// write takes tok, a drafted token of the text the grammar forces, as
// the slot's next output without sampling (JumpForce), as emit does with
// a sampled one; cells is the number of cells the sequence holds before
// it. written is false, and nothing changed, when the grammar does not
// take tok here after all: the caller samples instead. more reports
// whether the request goes on.
func (s *scheduler) write(sl *slot, tok llama.Token, cells int, now time.Time) (_ llama.Token, more, written bool) {
	switch err := sl.req.sampler.Accept(tok); {
	case errors.Is(err, llama.ErrNotAllowed):
		return tok, false, false
	case err != nil:
		s.finish(sl, FinishError, err)
		return tok, false, true
	}
	s.top = s.top[:0]
	return tok, s.emit(sl, tok, 0, cells, now), true
}

// draftLimit is the most tokens the request's next draft may have: fewer
// after drafts the model did not confirm (see verify).
func (g *generation) draftLimit() int {
	if g.draftMax == 0 {
		return maxDraft
	}
	return g.draftMax
}

// jumpMode is the engine's jump-forward mode: "" when it does not jump
// forward.
func jumpMode(m JumpMode) JumpMode {
	switch {
	case m == JumpOff:
		return ""
	case m == "":
		return JumpForce
	}
	return m
}
