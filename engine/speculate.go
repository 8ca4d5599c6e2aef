package engine

import "slices"

// Speculative decoding: a decoding slot's step evaluates, after its
// sampled token, tokens guessed to follow it (a draft), with logits at
// each, in the same forward pass as every other slot's work; the request
// then samples at each drafted position in turn for as long as it
// samples the drafted token, so one step may yield several tokens. It is
// jump-forward decoding's mechanism (jump.go) with another source of
// drafts: where jump-forward drafts the text a grammar forces, a
// speculative draft is a guess.
//
// Sampling is unchanged (the same sampler, the same order, the same
// random draws), so the output is that of plain decoding, at any
// temperature, with or without a seed. For a draft of fixed tokens this
// is the standard rejection rule: the drafted token is kept with the
// probability the model gives it, and otherwise the token sampled in its
// place follows the model's distribution without it.
//
// The draft source is the request's own tokens (prompt lookup, n-gram
// speculation): when its last n tokens (n from NgramMax down to 2) came
// before, in its prompt or its output, the tokens that followed their
// latest occurrence are the draft. It needs no other model and suits
// what repeats its input: code edits, quotes, summaries, JSON.
//
// A drafted token the model does not take costs its share of a forward
// pass (and on a CPU a lone sequence's short draft costs about what it
// saves even when taken: see Speculation.DraftMin). So a slot's drafts
// shrink to one token more than it last took (at least DraftMin) and
// grow back, doubling, while it takes them whole; a slot whose draft
// is refused whole drafts nothing for a number of steps that doubles at
// each such refusal (64 at most) and resets when a draft is taken; and a
// step drafts nothing when more than MaxDecoding slots decode, where a
// batch is compute-bound and the extra tokens cost what they save (the
// bound is a guess: measured gains stop at 4 streams, not beyond).
//
// Not for a paced request (it may pause after any token) nor on a model
// with a recurrent state (its state advanced over the whole draft: it
// would go back to a checkpoint).

// Speculation configures speculative decoding (Config.Speculate). The
// zero value drafts nothing.
type Speculation struct {
	// Ngram drafts from each request's own tokens (prompt lookup).
	Ngram bool
	// NgramMax is the longest run of a request's last tokens looked up
	// (0: 4); runs down to 2 are tried.
	NgramMax int
	// DraftMax bounds a draft's tokens (0: 8; at most 32); a draft of
	// fewer than DraftMin is not evaluated (0: 1). On a CPU a lone
	// sequence's step of two tokens costs as much as two steps of one
	// (BenchmarkDecodeWithDraft: 7.5 ms for one token of the 135M model,
	// 15 ms for two, 23 ms for five), while in a batch of four the drafts
	// cost little; a minimum of 3 lost more in batches than it saved
	// alone (BenchmarkSpeculation), so the default takes any draft.
	DraftMax, DraftMin int
	// MaxDecoding: a step drafts only while at most this many slots
	// decode (0: 4).
	MaxDecoding int
}

// Speculation's defaults and bounds.
const (
	defaultNgramMax    = 4
	minNgram           = 2
	defaultSpecDraft   = 8
	defaultSpecMin     = 1
	defaultMaxDecoding = 4
	maxSpecSkip        = 64
)

// withDefaults fills the zero fields of a Speculation.
func (sp Speculation) withDefaults() Speculation {
	if sp.NgramMax <= 0 {
		sp.NgramMax = defaultNgramMax
	}
	sp.NgramMax = max(sp.NgramMax, minNgram)
	if sp.DraftMax <= 0 {
		sp.DraftMax = defaultSpecDraft
	}
	sp.DraftMax = min(sp.DraftMax, maxDraft)
	if sp.DraftMin <= 0 {
		sp.DraftMin = defaultSpecMin
	}
	sp.DraftMin = min(sp.DraftMin, sp.DraftMax)
	if sp.MaxDecoding <= 0 {
		sp.MaxDecoding = defaultMaxDecoding
	}
	return sp
}

// sources names the draft sources of sp (ModelInfo.Speculation).
func (sp Speculation) sources() []string {
	if sp.Ngram {
		return []string{"ngram"}
	}
	return nil
}

// SpecStats counts speculative decoding's work (vLLM's spec_decode
// metrics): drafts evaluated, their tokens, the tokens the requests took,
// and of those, how many at each position of a draft.
type SpecStats struct {
	Drafts, DraftTokens, Accepted uint64
	AcceptedAt                    []uint64
}

// speculate sets the slot's draft from its request's tokens, at most n
// of them, and returns their number.
func (s *scheduler) speculate(sl *slot, n int) int {
	sp := &s.e.cfg.Speculate
	g := &sl.req.gen
	if !s.specStep || g.pace != nil || s.recurrent {
		return 0
	}
	if g.specSkip > 0 {
		g.specSkip--
		return 0
	}
	n = min(n, g.specLimit(sp.DraftMax))
	if n < sp.DraftMin {
		return 0
	}
	g.draft = lookup(g.draft[:0], sl.cache, sp.NgramMax, n)
	if len(g.draft) < sp.DraftMin {
		g.draft = g.draft[:0]
		return 0
	}
	g.spec = true
	s.spec.Drafts++
	s.spec.DraftTokens += uint64(len(g.draft))
	return len(g.draft)
}

// lookup appends to dst at most n tokens drafted from toks: for the
// longest run of toks' last tokens, from most tokens down to 2, that
// occurs earlier in toks, the tokens after its latest earlier occurrence,
// up to the first medium's placeholder.
func lookup(dst, toks []int32, most, n int) []int32 {
	for k := min(most, len(toks)-1); k >= minNgram; k-- {
		pat := toks[len(toks)-k:]
		for j := len(toks) - k - 1; j >= 0; j-- {
			if toks[j+k-1] != pat[k-1] || !slices.Equal(toks[j:j+k-1], pat[:k-1]) {
				continue
			}
			for _, t := range toks[j+k : min(j+k+n, len(toks))] {
				if isPlaceholder(t) {
					break
				}
				dst = append(dst, t)
			}
			if len(dst) > 0 {
				return dst
			}
		}
	}
	return dst
}

// specLimit is the most tokens the request's next speculative draft may
// have: fewer after drafts it did not take whole (see specTook).
func (g *generation) specLimit(most int) int {
	if g.specMax == 0 {
		return most
	}
	return min(g.specMax, most)
}

// specTook records that the request took took of its draft of n tokens.
func (s *scheduler) specTook(g *generation, took, n int) {
	sp := &s.e.cfg.Speculate
	switch {
	case took == n:
		g.specMax = min(sp.DraftMax, 2*g.specLimit(sp.DraftMax))
		g.specMiss = 0
	case took == 0:
		g.specMax = sp.DraftMin
		g.specMiss = min(maxSpecSkip, max(1, 2*g.specMiss))
		g.specSkip = g.specMiss
	default:
		g.specMax = max(sp.DraftMin, took+1)
		g.specMiss = 0
	}
	for i := range took {
		s.spec.AcceptedAt[i]++
	}
	s.spec.Accepted += uint64(took)
}
