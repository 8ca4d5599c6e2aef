package engine

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
// place follows the model's distribution without it. That holds up to
// the logits' last digits: a step that evaluates a draft after a token
// computes with other kernels than a step of that token alone (llama.cpp's
// CPU matrix products pick their path by row count), which over a long
// context moves a log-probability by a few thousandths
// (TestDraftModelCatchesUpOverSteps), enough to flip a near-tie, as
// batching with other slots can.
//
// The first draft source is the request's own tokens (prompt lookup,
// n-gram speculation): when its last n tokens (n from NgramMax down to 2)
// came before, in its prompt or its output, the tokens that followed
// their latest occurrence are the draft. It needs no other model and
// suits what repeats its input: code edits, quotes, summaries, JSON.
// Where it finds nothing, what followed the same tokens in any request of
// the same cache salt is the draft (the shared n-gram pool,
// ngrampool.go), and where that finds nothing either, a draft model
// (Speculation.Model, draftmodel.go) or the model's own multi-token
// prediction head (Speculation.MTP, mtp.go) guesses it, for every such
// slot of the step at once.
//
// A drafted token the model does not take costs its share of a forward
// pass, and what that share is depends on the batch: on a CPU a lone
// sequence's step of two tokens costs about as much as two steps of one
// (BenchmarkDecodeWithDraft), while beside other slots' tokens a draft
// costs little. So whether to draft is decided by measurement, per step
// and per slot (draftCost): a slot drafts when the tokens it is expected
// to take, at its recent acceptance, save more of the batch's time than
// its drafted tokens add, measured at the step's number of decoding
// slots. A slot for which drafting does not pay probes again, with a
// draft of DraftMin tokens, after a wait that doubles while it still does
// not (up to maxSpecWait steps); where no acceptance would pay, the step
// measures again now and then instead (costProbe). Its
// drafts also shrink to one token more than it last took and grow back,
// doubling, while it takes them whole, and a draft refused whole pauses
// its drafting for a number of steps that doubles at each such refusal
// (64 at most).
//
// Where more slots decode than MaxDecoding, a step's drafts are few
// measures of a rare count of slots, and few drafted tokens a slot cost
// more than decoded ones (bulkDraftLen); long drafts of a request that
// repeats its input cost less. So such a step drafts only lookups of
// bulkDraftLen tokens or more (bulkDraft), where their measured cost
// pays, as below the bound: from a slot whose drafts grew that long by
// being taken whole, or, as a probe, where the request's last
// bulkDraftLen tokens came before in its prompt (a quote); a draft not
// taken whole there makes the slot wait before it drafts again.
//
// Not for a paced request (it may pause after any token). A model with
// a recurrent state (alone or a hybrid's) advances it over the whole
// draft: with Speculation.Recurrent it speculates where llama.cpp keeps
// the state after each of a step's last tokens (Qwen3.5, LFM2,
// Nemotron-H: llama.Context.Rollback, a draft's worth, DraftMax) and
// drafts no more than that. Those copies cost every pass, drafted or
// not: on a synthetic 122M Qwen3.5 (24 layers, half recurrent, 2 threads)
// a lone stream decoded about 10 % slower with them and nothing drafted,
// and at 16 streams the batches took 13-15 % more passes (llama.cpp keeps
// a sequence's last tokens in one micro-batch), 11-20 % slower. So it is
// not the default.
// Without it, and on the other recurrent architectures (Mamba, RWKV,
// Jamba, ...: they would go back to a checkpoint and evaluate again), such
// a model does not draft.

import (
	"math"
	"slices"
	"time"
)

// Speculation configures speculative decoding (Config.Speculate). The
// zero value drafts nothing.
type Speculation struct {
	// Ngram drafts from each request's own tokens (prompt lookup).
	Ngram bool
	// NgramMax is the longest run of a request's last tokens looked up
	// (0: 4); runs down to 2 are tried.
	NgramMax int
	// DraftMax bounds a draft model's or MTP head's draft and a
	// request's first lookup draft (0: 8; at most 32); a draft of fewer
	// than DraftMin is not evaluated (0: 1).
	DraftMax, DraftMin int
	// NgramDraftMax bounds a lookup's draft (0: maxLookupDraft, at most
	// that, at least DraftMax): a request's lookup drafts grow from
	// DraftMax to it, doubling, while it takes them whole. Where a request
	// repeats its input, a long draft is as cheap a token as a prompt's (a
	// step of 33 tokens costs a few steps of one on a CPU), and its tokens
	// come from the request's own text, not from a pass of another model.
	NgramDraftMax int
	// MaxDecoding: where more slots than this decode (0: no bound), a
	// step drafts only in bulk: lookups of bulkDraftLen tokens or more
	// (see bulkDraft), where their measured cost pays.
	MaxDecoding int
	// Model is a draft model's GGUF file ("": none), a smaller model of
	// the same vocabulary: it drafts for a slot where the request's own
	// tokens give no draft (see draftmodel.go).
	Model string
	// PMin ends a draft model's draft before a token it gives less than
	// this probability (0: none; llama-server's --spec-draft-p-min).
	PMin float64
	// Recurrent lets a model with a recurrent state speculate where
	// llama.cpp can take the state back over a refused draft: its
	// context then keeps DraftMax more copies of each slot's state, and
	// every pass writes them, drafts or not (see the package comment of
	// speculate.go for what that costs). Without it such a model drafts
	// nothing.
	Recurrent bool
	// MTP drafts with the model's own multi-token prediction head, where
	// its file has one (Qwen3.5's and 3.6's, DeepSeek's, GLM's nextn
	// layers; llama-server's --spec-type draft-mtp), for a slot where
	// the request's own tokens give no draft (see mtp.go). Not with a
	// draft Model. On a model with a recurrent state it implies
	// Recurrent.
	MTP bool
}

// on reports whether sp drafts at all.
func (sp Speculation) on() bool { return sp.Ngram || sp.Model != "" || sp.MTP }

// Speculation's defaults and bounds.
const (
	// maxLookupDraft bounds a lookup's draft (NgramDraftMax), beyond
	// maxDraft, which bounds the drafts of a model: a lookup's draft
	// costs no pass of its own.
	maxLookupDraft = 64
	// bulkDraftLen is the shortest draft made where more slots decode
	// than MaxDecoding. Beside 15 other decoding sequences a drafted
	// token costs 0.6-0.85 of a decoded token's share of the step in
	// drafts of 16-31 tokens a sequence, but 1.3 in drafts of 4
	// (BenchmarkDecodeWithDraft, 135M, 2 threads): a step of 64 rows
	// or more takes the CPU's tiled attention, which visits every cell
	// in use, and few drafts a sequence do not make up for it.
	bulkDraftLen     = 16
	defaultNgramMax  = 4
	minNgram         = 2
	defaultSpecDraft = 8
	defaultSpecMin   = 1
	maxSpecSkip      = 64
	// A slot for which drafting does not pay waits minSpecWait steps
	// before probing again, then twice as long while it still does not
	// pay, up to maxSpecWait: at most one step in 256 probes.
	minSpecWait = 16
	maxSpecWait = 256
	// specAccWeight is the weight of a draft's share taken in a request's
	// moving average of acceptance.
	specAccWeight = 0.3
	// costRefresh: one step in costRefresh of those with a given number
	// of decoding slots drafts nothing, to measure again what such a
	// step costs without drafts.
	costRefresh = 64
	// costProbe: where a drafted token costs at least a decoded one's
	// share of the step (draftCost.dear), no acceptance pays for drafts;
	// one step in costProbe of those with a given number of decoding slots,
	// times how dear (draftCost.probed), drafts, DraftMax tokens in all,
	// to measure that cost again.
	costProbe = 256
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
	if sp.NgramDraftMax <= 0 {
		sp.NgramDraftMax = maxLookupDraft
	}
	sp.NgramDraftMax = max(min(sp.NgramDraftMax, maxLookupDraft), sp.DraftMax)
	sp.MaxDecoding = max(sp.MaxDecoding, 0)
	return sp
}

// sources names the draft sources of sp (ModelInfo.Speculation).
func (sp Speculation) sources() []string {
	var srcs []string
	if sp.Ngram {
		srcs = append(srcs, "ngram")
	}
	if sp.Model != "" {
		srcs = append(srcs, "draft:"+draftName(sp.Model))
	}
	if sp.MTP {
		srcs = append(srcs, "mtp")
	}
	return srcs
}

// SpecStats counts speculative decoding's work (vLLM's spec_decode
// metrics): drafts evaluated, their tokens, the tokens the requests took,
// and of those, how many at each position of a draft.
type SpecStats struct {
	Drafts, DraftTokens, Accepted uint64
	AcceptedAt                    []uint64
}

// draftCost measures what drafts cost and save, as moving averages over
// steps that evaluate no prompt (like prefillBudget's), by the number d
// of slots a step decodes. A step's cost is its whole time, the forward
// pass and the sampling and bookkeeping around it: on a small model the
// latter weigh as much, and a taken draft saves them too.
//
// A step without drafts (decode[d]) gives d tokens, so a drafted token
// the request takes saves decode[d]/d of the batch's time. What a drafted
// token costs is measured in that unit, as rel[d]: the time drafts add to
// a step, per drafted token, over decode[d]/d. A slot whose drafts are
// taken at the rate acc pays for them when acc > rel[d] (worth). On a CPU
// a lone sequence's 8-token draft costs a fraction of a step (rel 0.2-0.3
// on the 135M model) but a 1-token draft a whole one, while beside 15
// other slots, whose step is already bound by the arithmetic, a drafted
// token costs what a decoded one does or more: where rel[d] >= 1 no
// acceptance pays (dear), and drafts are made only in one step in
// costProbe, to measure again.
//
// A draft model's measure has a cost of its own: it first catches up
// with the tokens the slot wrote since it last drafted (draftmodel.go), a
// prompt's worth or hundreds of tokens, where a slot that drafts every
// step catches up with two. That catch-up (resume) is not what a draft
// costs, so rel leaves it out; it is what measuring costs, so with a
// draft model a count of decoding slots is first measured only once the
// batch has stayed there a while (settle: not where it only passes
// through, as when requests end one by one), and dear drafts are
// measured again only as rarely as keeps the catch-ups under
// 1/resumeShare of the time between.
type draftCost struct {
	decode, rel []float64 // by decoding slots; decode in seconds
	steps       []uint64  // steps seen, by decoding slots
	measured    []uint64  // measures of rel, by decoding slots
	probeAt     []uint64  // by decoding slots: the step from which dear drafts are measured again
	// settle is the steps a count of decoding slots is seen before its
	// first measure (0: at once).
	settle uint64
	// resumed is the catch-up, in seconds, that drafts since the last
	// measure needed.
	resumed float64
}

// resumeShare: dear drafts are measured again no sooner than the steps
// that take resumeShare times what the last measure's catch-up took.
// draftSettle: with a draft model, the steps a count of decoding slots is
// seen before drafts are first measured there (draftCost.settle).
const (
	resumeShare = 50
	draftSettle = 32
	// minMeasures: drafts are judged dear at a count of decoding slots
	// on this many measures at least, averaged alike.
	minMeasures = 2
)

func newDraftCost(slots int) draftCost {
	return draftCost{decode: make([]float64, slots+1), rel: make([]float64, slots+1), steps: make([]uint64, slots+1),
		measured: make([]uint64, slots+1), probeAt: make([]uint64, slots+1)}
}

// step counts a step where d slots decode, with a prompt or not, and
// reports whether it may draft: not before a step without drafts has
// measured decode[d] (a step with a prompt measures nothing, so it may),
// not before the count has settled, and not one step in costRefresh,
// which measures decode[d] again.
func (c *draftCost) step(d int, prompt bool) bool {
	if d <= 0 || d >= len(c.steps) {
		return false
	}
	c.steps[d]++
	return (c.decode[d] > 0 || prompt) && (c.rel[d] > 0 || c.steps[d] > c.settle) && c.steps[d]%costRefresh != 0
}

// observe records a step where d slots decoded, with drafts drafted
// tokens after theirs and prefill prompt tokens, that took secs, of which
// the drafter took drafter seconds and, of those, its catch-up with what
// slots wrote while they did not draft took resume. A step where the
// drafter caught up but drafted nothing (a catch-up spread over steps) is
// neither a plain step nor a draft's.
func (c *draftCost) observe(d, drafts, prefill int, secs, drafter, resume float64) {
	c.resumed += resume
	switch {
	case d <= 0 || d >= len(c.decode) || prefill > 0:
	case drafts == 0 && drafter == 0:
		c.decode[d] = avg(c.decode[d], secs)
	case drafts > 0 && c.decode[d] > 0:
		share := c.decode[d] / float64(d)
		rel := max(secs-resume-c.decode[d], 1e-9) / float64(drafts) / share
		if n := c.measured[d]; n < minMeasures {
			c.rel[d] = (c.rel[d]*float64(n) + rel) / float64(n+1) // the first measures count alike
		} else {
			c.rel[d] = avg(c.rel[d], rel)
		}
		c.measured[d]++
		if c.dear(d) {
			c.probed(d)
		}
		c.resumed = 0
	}
}

// measures reports whether the step last counted for d decoding slots
// drafts to measure what drafts cost: no step has yet, or they are dear
// on fewer than minMeasures measures (one step slowed by something else
// would stop drafts there for hundreds of steps), or dear and it is time
// to measure again (probed).
func (c *draftCost) measures(d int) bool {
	return c.rel[d] == 0 || c.dear(d) && (c.measured[d] < minMeasures || c.steps[d] >= c.probeAt[d])
}

// promptRel is what a drafted token costs, in what a taken one saves (as
// rel), in a step that also evaluates a prompt where d slots decode: such
// a step measures nothing (observe), and its batch is a prompt's, where a
// drafted token costs about what a prompt token does (perTok, from
// prefillBudget). 0 when either is not known yet.
func (c *draftCost) promptRel(d int, perTok float64) float64 {
	if d <= 0 || d >= len(c.decode) || perTok <= 0 {
		return 0
	}
	decode := c.decode[d]
	if decode == 0 {
		// Not measured: a step of fewer slots costs no more (the most
		// of those measured, which errs toward dear), or else one of
		// more costs no less (the least of those).
		if decode = slices.Max(c.decode[:d]); decode == 0 {
			for _, t := range c.decode[d+1:] {
				if t > 0 && (decode == 0 || t < decode) {
					decode = t
				}
			}
		}
	}
	if decode == 0 {
		return 0
	}
	return perTok / (decode / float64(d))
}

// dearBelow reports whether drafts are dear at fewer decoding slots than
// d (a drafted token's cost, over a decoded token's shrinking share of a
// growing step, only grows with the slots). A draft model is not asked
// for a first measure at such a d (speculate): its measure costs a
// catch-up. Lookups measure every d: taken as dear, unmeasured, they lost
// 11-17 % at 4 and 8 streams on the short row.
func (c *draftCost) dearBelow(d int) bool {
	for _, r := range c.rel[1:d] {
		if r >= 1 {
			return true
		}
	}
	return false
}

// probed records that the step last counted for d decoding slots drafted
// where drafts are dear, to measure them: the next such step comes
// costProbe steps later for each unit of rel[d] (drafts that cost ten
// times what a taken token saves are measured ten times less often),
// 64 times that at most, and no sooner than resumeShare times the
// catch-up the last measure needed takes in steps of d slots.
func (c *draftCost) probed(d int) {
	wait := uint64(costProbe * min(c.rel[d], 64))
	if c.resumed > 0 && c.decode[d] > 0 {
		wait = max(wait, uint64(resumeShare*c.resumed/c.decode[d]))
	}
	c.probeAt[d] = c.steps[d] + wait
}

// dear reports whether, where d slots decode, a drafted token costs at
// least what a taken one saves: then no acceptance pays for drafts.
func (c *draftCost) dear(d int) bool { return c.rel[d] >= 1 }

// worth reports whether drafting pays for a slot whose drafts are taken
// at the rate acc in a step where d slots decode.
func (c *draftCost) worth(d int, acc float64) bool { return acc > c.rel[d] }

// speculate sets the slot's draft from its request's tokens, at most n
// of them, and returns their number.
func (s *scheduler) speculate(sl *slot, n int) int {
	sp := &s.e.cfg.Speculate
	g := &sl.req.gen
	if !s.specStep || g.pace != nil || s.recurrent && s.rollback == 0 {
		return 0
	}
	if s.recurrent {
		n = min(n, s.rollback) // what its state can go back over
	}
	var salt uint64
	if s.ngrams != nil {
		salt = sl.poolSalt(s.ngrams)
		s.ngrams.learn(sl, salt)
	}
	if g.specSkip > 0 {
		g.specSkip--
		return 0
	}
	if g.specAcc == 0 {
		g.specAcc = s.specAcc
	}
	// A step that evaluates a prompt too measures nothing: where the
	// count of decoding slots is not measured yet, its slots' drafts are
	// judged by what a prompt token costs.
	d, rel, measuring := s.nDecoding, s.cost.rel[s.nDecoding], false
	if s.withPrompt && rel == 0 {
		rel = s.cost.promptRel(d, s.budget.perTok)
	}
	limit := g.specLimit(sp, sp.NgramDraftMax)
	if s.bulk {
		limit = max(limit, bulkDraftLen)
	}
	switch {
	case s.e.cfg.draftAlways:
		n = min(n, limit)
	case rel == 0 || !s.withPrompt && s.cost.measures(d):
		measuring = true
		if s.bulk {
			// Above MaxDecoding only bulk drafts are made, so they
			// are what the step measures.
			n = min(n, limit)
			break
		}
		// A step that measures drafts' cost drafts DraftMax tokens in
		// all, not that many for each slot: at many slots, where drafts
		// are dear, that would cost several steps. So does a step with a
		// prompt where nothing tells what its drafts cost.
		n = min(n, g.specLimit(sp, sp.DraftMax), sp.DraftMax-s.nDrafts)
	case rel >= 1:
		return 0 // no slot's acceptance pays: no slot probes on its own
	case !g.specProbe && g.specAcc <= rel:
		g.specWait = min(maxSpecWait, max(minSpecWait, 2*g.specWait))
		g.specSkip, g.specProbe = g.specWait, true
		g.specMax = sp.DraftMin // a probe is short: it costs little, and grows if taken
		return 0
	default:
		n = min(n, limit)
	}
	if s.bulk {
		return s.bulkDraft(sl, n)
	}
	if n < sp.DraftMin {
		return 0
	}
	g.draft, g.specPool = g.draft[:0], false
	if sp.Ngram {
		g.draft = lookup(g.draft, sl.cache, minNgram, sp.NgramMax, n)
		// The pool's drafts are judged apart from the request's own: a
		// request whose text is not the others' stops asking the pool
		// without ceasing to draft from itself.
		if len(g.draft) < sp.DraftMin && s.ngrams != nil && (1-g.poolMiss > rel || measuring || s.e.cfg.draftAlways) {
			g.draft = s.ngrams.draft(g.draft[:0], sl.cache, salt, n)
			g.specPool = len(g.draft) > 0
		}
	}
	if d := s.drafter; d != nil && len(g.draft) < sp.DraftMin && d.can(sl) && !s.unmeasuredDear() && (!measuring || s.measurer == nil || sl == s.measurer) {
		// The request's own tokens give no draft: the draft model or the
		// MTP head will (modelDrafts, once every slot has asked), n
		// tokens at most, which the step reserves.
		g.draft = g.draft[:0]
		n = min(n, sp.DraftMax)
		if !measuring && !s.e.cfg.draftAlways {
			n = min(n, worthLen(g.specAcc, rel, n))
		}
		sl.draftWant = n
		s.asking = append(s.asking, sl)
		return n
	}
	return s.keepDraft(sl, sp.DraftMin)
}

// bulkDraft sets the slot's draft, at most n tokens, in a step where
// more slots decode than Speculation.MaxDecoding (s.bulk), and returns
// its length: a lookup of the request's own tokens of bulkDraftLen
// tokens or more (bulkLookup), or none. A slot whose drafts have not
// grown that long by being taken whole makes a probe, which grows while
// taken whole and otherwise waits (specTook).
func (s *scheduler) bulkDraft(sl *slot, n int) int {
	sp := &s.e.cfg.Speculate
	g := &sl.req.gen
	if n < bulkDraftLen || !sp.Ngram {
		return 0
	}
	grown := g.specLimit(sp, sp.NgramDraftMax) >= bulkDraftLen
	g.draft, g.specPool = bulkLookup(g.draft[:0], sl.cache, len(sl.req.tokens), grown, sp.NgramMax, n), false
	return s.keepDraft(sl, bulkDraftLen)
}

// bulkLookup is bulkDraft's lookup: toks' draft of at most n tokens
// from runs of 2 to most of its last tokens where the request's drafts
// have grown to bulkDraftLen (grown), else only where its last
// bulkDraftLen tokens came before in its prompt, toks[:prompt], and the
// draft starts there: a quote of the prompt. A request whose output
// loops on itself also repeats runs of 16 once the loop is long enough,
// but its drafts of 16 tokens were taken about half on the synthetic
// 135M at 16 streams (45 %, 2026-12-06) and cost 5-14 % of the short
// row's throughput; one that quotes its prompt has every draft taken.
func bulkLookup(dst, toks []int32, prompt int, grown bool, most, n int) []int32 {
	if grown {
		return lookup(dst, toks, minNgram, most, n)
	}
	return lookupBefore(dst, toks, prompt-1, bulkDraftLen, max(bulkDraftLen, most), n)
}

// A drafter is a model that drafts for the slots of a step that ask it,
// all at once, after every slot has asked (speculate): a draft model
// (draftmodel.go) or the model's own multi-token prediction head
// (mtp.go). Only the scheduler uses it.
type drafter interface {
	// can reports whether the slot may ask for a draft.
	can(sl *slot) bool
	// behind is how many of the slot's tokens the drafter evaluates
	// before it drafts for it: a draft model's catch-up (0 for the MTP
	// head, which mirror keeps in step).
	behind(sl *slot) int
	// fill sets the draft (gen.draft) of each asking slot, at most
	// sl.draftWant tokens; slots are all the scheduler's. It returns the
	// time it took to catch up with what slots wrote while they did not
	// draft (draftCost).
	fill(slots, asking []*slot) (resume time.Duration)
	// mirror follows the step just decoded and sampled (s.batch): the
	// MTP head evaluates what the model did.
	mirror(s *scheduler)
	close()
}

// modelDrafts fills the drafts of the step's slots that asked the
// drafter for one (s.asking) and returns how many of the tokens they
// reserved were not drafted.
func (s *scheduler) modelDrafts() (unused int) {
	reserved := 0
	for _, sl := range s.asking {
		reserved += sl.draftWant
		sl.req.gen.draft = sl.req.gen.draft[:0]
	}
	start := time.Now()
	s.drafterResume += s.drafter.fill(s.slots, s.asking)
	s.drafterTime += time.Since(start)
	drafted := 0
	for _, sl := range s.asking {
		drafted += s.keepDraft(sl, s.e.cfg.Speculate.DraftMin)
		sl.draftWant = 0
	}
	s.asking = s.asking[:0]
	return reserved - drafted
}

// takeDrafterTime returns the time the drafter's passes took since it was
// last asked, and of that, its catch-up with what slots wrote while they
// did not draft, and starts the next count: not the scheduler's own time
// (Stats.StepOwnTime). It is part of what the step's drafts cost
// (draftCost), less the catch-up, which is what resuming cost.
func (s *scheduler) takeDrafterTime() (t, resume time.Duration) {
	t, resume = s.drafterTime, s.drafterResume
	s.drafterTime, s.drafterResume = 0, 0
	return t, resume
}

// mayDraft reports whether the next step may draft if as many slots
// decode as now: under MaxDecoding, and where drafts are not dear, or
// are due to be measured (draftCost).
func (s *scheduler) mayDraft() bool {
	d := s.decoding()
	if sp := &s.e.cfg.Speculate; d == 0 || d >= len(s.cost.steps) || sp.MaxDecoding > 0 && d > sp.MaxDecoding {
		return false
	}
	return s.e.cfg.draftAlways || !s.cost.dear(d) || s.cost.measures(d)
}

// unmeasuredDear reports whether the step's count of decoding slots is
// unmeasured above one where drafts are dear: the draft model is not
// asked for a first measure there (dearBelow).
func (s *scheduler) unmeasuredDear() bool {
	d := s.nDecoding
	return s.cost.rel[d] == 0 && s.cost.dearBelow(d) && !s.e.cfg.draftAlways
}

// chooseMeasurer picks, for a step where d slots decode that measures
// drafts' cost, the one decoding slot that may ask the drafter for a
// draft: the one it is least behind (drafter.behind), first in slot order
// among equals; none (any may ask) where all are as far behind. A draft
// model catches up with the slot it measures on first, and that may be
// a prompt of thousands of tokens where another slot's costs a few.
func (s *scheduler) chooseMeasurer(d int) {
	s.measurer = nil
	if s.drafter == nil || !s.specStep || !s.cost.measures(d) {
		return
	}
	least, most := math.MaxInt, -1
	for _, sl := range s.slots {
		if sl.state != stateDecode {
			continue
		}
		if g := &sl.req.gen; g.pace != nil || g.specSkip > 0 || !s.drafter.can(sl) {
			continue // a paced request does not draft, nor one pausing its drafts
		}
		b := s.drafter.behind(sl)
		if b < least {
			least, s.measurer = b, sl
		}
		most = max(most, b)
	}
	if least == most {
		s.measurer = nil
	}
}

// keepDraft takes the slot's draft (gen.draft) for the step, cut where
// its grammar would refuse it, or drops it when that leaves fewer than
// least tokens, and returns its length.
func (s *scheduler) keepDraft(sl *slot, least int) int {
	g := &sl.req.gen
	// A grammar's request samples only what the grammar allows: the
	// draft ends where the grammar would refuse it, before it costs a
	// forward pass.
	g.draft = g.draft[:sl.req.sampler.GrammarAllows(g.draft)]
	if len(g.draft) < least {
		g.draft = g.draft[:0]
		return 0
	}
	if s.e.cfg.drafted != nil {
		s.e.cfg.drafted(len(sl.cache), g.draft, sl.draftWant > 0, s.nDecoding)
	}
	g.spec, g.specProbe = true, false
	s.spec.Drafts++
	s.spec.DraftTokens += uint64(len(g.draft))
	return len(g.draft)
}

// worthLen is the length of a draft model's draft worth making, at most
// n, for a request that takes each drafted token with probability acc
// (its moving average) where a drafted token costs rel of a taken one
// (draftCost.rel): the k-th token is taken only if the k-1 before it
// were, with probability acc^k, and each costs a pass of the draft model
// (linear in k, unlike a lookup's draft, whose first token costs the
// most), so the draft ends where acc^k no longer beats rel. At least 1.
func worthLen(acc, rel float64, n int) int {
	k, p := 1, acc
	for k < n && p*acc > rel {
		p *= acc
		k++
	}
	return k
}

// lookup appends to dst at most n tokens drafted from toks: where the
// longest run of toks' last tokens (most tokens at most, least at least)
// occurs earlier in toks, at its latest such occurrence, the tokens that
// follow it, up to the first medium's placeholder. Where those reach the
// end of toks, the draft goes on as though the text repeats from there
// (a loop of period p drafts p tokens and then the same again).
func lookup(dst, toks []int32, least, most, n int) []int32 {
	return lookupBefore(dst, toks, len(toks)-1, least, most, n)
}

// lookupBefore is lookup with the occurrences that end before toks[before]
// only, so that the draft starts at or before it.
func lookupBefore(dst, toks []int32, before, least, most, n int) []int32 {
	last := len(toks) - 1
	end, best := -1, least-1
	// An occurrence ending at e (e < last) matches the last k tokens
	// where toks[e-i] == toks[last-i] for i < k; the latest end with the
	// longest match wins.
	for e := min(last, before) - 1; e >= 0 && best < most; e-- {
		if toks[e] != toks[last] || isPlaceholder(toks[e+1]) {
			continue
		}
		k := 1
		for k < most && k <= e && toks[e-k] == toks[last-k] {
			k++
		}
		if k > best {
			end, best = e, k
		}
	}
	if end < 0 {
		return dst
	}
	from := len(dst)
	for i := end + 1; len(dst)-from < n; i++ {
		t := toks[min(i, last)]
		if i > last { // the draft's own tokens, a period back
			t = dst[from+i-len(toks)]
		}
		if isPlaceholder(t) {
			break
		}
		dst = append(dst, t)
	}
	return dst
}

// specLimit is the most tokens, most at most, the request's next
// speculative draft may have: DraftMax for its first, fewer after drafts
// it did not take whole, more after drafts it took whole (see specTook).
func (g *generation) specLimit(sp *Speculation, most int) int {
	if g.specMax == 0 {
		return min(sp.DraftMax, most)
	}
	return min(g.specMax, most)
}

// specTook records that the request took took of its draft of n tokens.
func (s *scheduler) specTook(g *generation, took, n int) {
	sp := &s.e.cfg.Speculate
	for i := range took {
		s.spec.AcceptedAt[i]++
	}
	s.spec.Accepted += uint64(took)
	if g.specPool {
		g.poolMiss += specAccWeight * (1 - float64(took)/float64(n) - g.poolMiss)
		return
	}
	switch {
	case took == n:
		g.specMax = min(sp.NgramDraftMax, 2*g.specLimit(sp, sp.NgramDraftMax))
		g.specMiss = 0
	case took == 0:
		g.specMax = sp.DraftMin
		g.specMiss = min(maxSpecSkip, max(1, 2*g.specMiss))
		g.specSkip = g.specMiss
	default:
		g.specMax = max(sp.DraftMin, took+1)
		g.specMiss = 0
	}
	if s.bulk && took < n {
		// Above MaxDecoding a draft's step is long (bulkDraftLen
		// tokens or more a slot) and pays only where drafts are taken
		// whole: the slot probes again later, after a wait that
		// doubles while its drafts are not.
		g.specWait = min(maxSpecWait, max(minSpecWait, 2*g.specWait))
		g.specSkip = max(g.specSkip, g.specWait)
	}
	rate := float64(took) / float64(n)
	g.specAcc += specAccWeight * (rate - g.specAcc)
	s.specAcc += specAccWeight * (rate - s.specAcc)
	if s.cost.worth(s.nDecoding, g.specAcc) && (!s.bulk || took == n) {
		g.specWait = 0
	}
}
