package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/corral-llm/corral/llama"
)

// A draft model (Speculation.Model): a smaller model of the same
// vocabulary guesses, greedily, the tokens a decoding slot's model is
// about to write; the step evaluates them after the slot's sampled token
// and the request keeps those it samples (speculate.go). It is
// llama-server's -md, run by the scheduler for every slot that drafts in
// a step at once: its passes take one token of each such slot.
//
// The draft model has a context of its own with a sequence per slot,
// which holds the tokens of the slot's cache it has evaluated. Before a
// slot drafts, its sequence is cut to what it shares with the slot's
// cache (what the request took of the last draft, or nothing for a new
// request) and the rest of the cache is evaluated: the catch-up. A
// prompt's catch-up is spread over steps, at most maxDraftCatchUp tokens
// a step in all, and a slot still catching up drafts nothing, so a long
// prompt does not stall the other slots' step. The draft model's context
// has as many cells as the slots' pool and a draft's worth per slot;
// sequences of slots that do not draft are dropped when it is full.
//
// Not for a request with media (the draft model has no projector): it
// drafts from its own tokens only. A draft model with a sliding window
// drops what a refused draft left by cutting its sequence back; where
// llama.cpp cannot (the cut reaches past the window), every sequence is
// emptied and caught up again.

// maxDraftCatchUp bounds the tokens the draft model evaluates in one
// step to catch up with the slots' caches.
const maxDraftCatchUp = 256

// draftModel is the draft model and its context; only the scheduler uses
// it, after New.
type draftModel struct {
	model *llama.Model
	lctx  *llama.Context
	batch llama.Batch
	cells int // the context's cells
	used  int // cells the sequences hold: the sum of len(seqs)
	// seqs[id] are the tokens slot id's sequence holds, in position order.
	seqs [][]int32
	// ready are the asking slots caught up, whose draft grows.
	ready  []*slot
	idx    []int // by slot: the batch index of its logits in the last pass
	pMin   float32
	logits []float32 // scratch
}

// loadDraftModel loads cfg.Speculate.Model for a target model with ctx
// cells and cfg.Parallel slots, and checks that its vocabulary is the
// target's. It returns nil when there is none.
func loadDraftModel(ctx context.Context, cfg Config, target *llama.Model, cells, rollback int) (*draftModel, error) {
	path := cfg.Speculate.Model
	if path == "" {
		return nil, nil
	}
	if target.Recurrent() && rollback == 0 {
		arch, _ := target.Meta("general.architecture")
		return nil, fmt.Errorf("draft model: a %s model's recurrent state goes back over a refused draft only where llama.cpp %s can take it back and speculation on recurrent states is asked for (Speculation.Recurrent): it does not speculate", arch, llama.Release())
	}
	m, err := llama.LoadModelOffload(ctx, path, llama.Offload{}, llama.ContextParams{})
	if err != nil {
		return nil, fmt.Errorf("draft model: %w", err)
	}
	fail := func(err error) (*draftModel, error) {
		m.Close()
		return nil, fmt.Errorf("draft model %s: %w", filepath.Base(path), err)
	}
	if m.Recurrent() || m.HasEncoder() || m.Diffusion() {
		return fail(errors.New("its memory cannot go back over a refused draft (a recurrent state), or it does not decode token by token (encoder-decoder, diffusion)"))
	}
	if err := sameVocab(target, m); err != nil {
		return fail(err)
	}
	dc := cfg.draftConfig(cells)
	lctx, err := llama.NewContext(m, dc.contextParams(m.CtxTrain(), llama.PoolingNone, 0, 0))
	if err != nil {
		return fail(err)
	}
	return &draftModel{
		model: m, lctx: lctx, cells: lctx.NCtx(),
		seqs: make([][]int32, cfg.Parallel), idx: make([]int, cfg.Parallel),
		pMin: float32(cfg.Speculate.PMin),
	}, nil
}

// draftConfig is the configuration of the draft model's context
// (EstimateMemory sizes it too), and of the MTP head's, for a target of
// cells cells: as many,
// and a draft's worth per slot, one buffer, batches of the larger of the
// target's and a step's catch-up, F16 keys and values.
func (cfg Config) draftConfig(cells int) Config {
	return Config{
		ModelPath: cfg.Speculate.Model, Parallel: cfg.Parallel, Threads: cfg.Threads, NoFlashAttn: cfg.NoFlashAttn,
		CtxSize: cells + cfg.Parallel*(maxDraft+1), BatchSize: max(cfg.BatchSize, maxDraftCatchUp), Pooling: "none",
	}
}

// sameVocab reports why a draft model's tokens are not the target's,
// when they are not: the same count, the same special tokens, the same
// text for every token.
func sameVocab(target, draft *llama.Model) error {
	if target.NVocab() != draft.NVocab() || target.BOS() != draft.BOS() || target.EOS() != draft.EOS() {
		return fmt.Errorf("its vocabulary is not the model's: %d tokens (BOS %d, EOS %d) against %d (BOS %d, EOS %d)",
			draft.NVocab(), draft.BOS(), draft.EOS(), target.NVocab(), target.BOS(), target.EOS())
	}
	var a, b []byte
	for tok := range llama.Token(target.NVocab()) {
		a, b = target.AppendPiece(a[:0], tok, true), draft.AppendPiece(b[:0], tok, true)
		if string(a) != string(b) || target.IsEOG(tok) != draft.IsEOG(tok) {
			return fmt.Errorf("its vocabulary is not the model's: token %d is %q, the model's %q", tok, b, a)
		}
	}
	return nil
}

// close frees the context and the model.
func (dm *draftModel) close() {
	dm.lctx.Close()
	dm.model.Close()
}

// draftName is the draft model's file name without .gguf.
func draftName(path string) string { return strings.TrimSuffix(filepath.Base(path), ".gguf") }

// can reports whether the slot may draft with the model: its request
// has no media, so its cache holds tokens only.
func (dm *draftModel) can(sl *slot) bool {
	return sl.shift == 0 && len(sl.req.params.Media) == 0
}

// kept is how much of slot id's sequence catchUpTo keeps: what it shares
// with the slot's cache, but the cache's last token (whose logits start
// the draft).
func (dm *draftModel) kept(sl *slot) int {
	return min(commonPrefix(dm.seqs[sl.id], sl.cache), len(sl.cache)-1)
}

// behind is how many of the slot's tokens the draft model evaluates
// before it drafts for it (catchUpTo).
func (dm *draftModel) behind(sl *slot) int { return len(sl.cache) - dm.kept(sl) }

// reset empties every sequence: after a failed pass the context's cells
// are not known.
func (dm *draftModel) reset() {
	dm.lctx.Clear()
	for i := range dm.seqs {
		dm.seqs[i] = dm.seqs[i][:0]
	}
	dm.used = 0
}

// cut cuts slot id's sequence to its first n tokens.
func (dm *draftModel) cut(id, n int) {
	seq := dm.seqs[id]
	if n >= len(seq) {
		return
	}
	if !dm.lctx.SeqRemove(id, n, -1) {
		dm.reset()
		return
	}
	dm.used -= len(seq) - n
	dm.seqs[id] = seq[:n]
}

// fill fills the drafts of the asking slots (see drafter).
func (dm *draftModel) fill(slots, asking []*slot) (resume time.Duration) {
	resume = dm.catchUpTo(slots, asking)
	dm.extend()
	dm.ready = dm.ready[:0]
	return resume
}

// steadyCatchUp is the most tokens a slot that drafted in its last step
// catches up with: its draft's last token, which the draft model did not
// evaluate, and the token sampled after it.
const steadyCatchUp = 2

// mirror does nothing: the draft model catches up from the slots'
// tokens when they ask.
func (dm *draftModel) mirror(*scheduler) {}

// catchUpTo cuts each wanting slot's sequence to what it shares with the
// slot's cache, but the cache's last token (whose logits start the
// draft), evaluates what follows, maxDraftCatchUp tokens at most in all,
// and starts the drafts of the slots it caught up (dm.ready). Sequences
// of other slots go when the cells are short. It returns the share of
// its pass's time that went to tokens beyond steadyCatchUp a slot: what
// a pause in the slot's drafting cost (draftCost).
func (dm *draftModel) catchUpTo(slots, asking []*slot) (resume time.Duration) {
	need := 0
	for _, sl := range asking {
		n := dm.kept(sl)
		dm.cut(sl.id, n)
		need += len(sl.cache) - n + sl.draftWant
	}
	if dm.used+need > dm.cells {
		for _, sl := range slots {
			if sl.draftWant == 0 {
				dm.cut(sl.id, 0)
			}
		}
	}
	budget, resumed := maxDraftCatchUp, 0
	dm.batch.Reset()
	for _, sl := range asking {
		seq := dm.seqs[sl.id]
		k := min(len(sl.cache)-len(seq), budget)
		if k <= 0 || dm.used+k+sl.draftWant > dm.cells {
			continue
		}
		resumed += max(k-steadyCatchUp, 0)
		for i, tok := range sl.cache[len(seq) : len(seq)+k] {
			pos := len(seq) + i
			last := pos == len(sl.cache)-1
			if last {
				dm.idx[sl.id] = dm.batch.Len()
				dm.ready = append(dm.ready, sl)
			}
			dm.batch.Add(tok, pos, sl.id, last)
		}
		dm.seqs[sl.id] = append(seq, sl.cache[len(seq):len(seq)+k]...)
		dm.used += k
		budget -= k
	}
	if dm.batch.Len() == 0 {
		return 0
	}
	start := time.Now()
	err := dm.lctx.Decode(&dm.batch)
	took := time.Since(start)
	if err != nil {
		dm.reset()
		dm.ready = dm.ready[:0]
		return took
	}
	dm.next()
	return took * time.Duration(resumed) / time.Duration(dm.batch.Len())
}

// extend grows the ready slots' drafts a token a pass, each until it has
// the tokens it wants or its draft's last token falls below PMin.
func (dm *draftModel) extend() {
	for len(dm.ready) > 0 {
		dm.batch.Reset()
		for _, sl := range dm.ready {
			g := &sl.req.gen
			tok := g.draft[len(g.draft)-1]
			pos := len(dm.seqs[sl.id])
			dm.idx[sl.id] = dm.batch.Len()
			dm.batch.Add(tok, pos, sl.id, true)
			dm.seqs[sl.id] = append(dm.seqs[sl.id], tok)
			dm.used++
		}
		if err := dm.lctx.Decode(&dm.batch); err != nil {
			dm.reset()
			return
		}
		dm.next()
	}
}

// next appends to each ready slot's draft the draft model's most likely
// token after the last pass, and keeps ready those whose draft may grow.
func (dm *draftModel) next() {
	ready := dm.ready[:0]
	for _, sl := range dm.ready {
		dm.logits = dm.lctx.LogitsTo(dm.logits, dm.idx[sl.id])
		if dm.logits == nil {
			continue
		}
		tok, p := argmax(dm.logits, dm.pMin > 0)
		if p < dm.pMin {
			continue
		}
		g := &sl.req.gen
		g.draft = append(g.draft, tok)
		if len(g.draft) < sl.draftWant {
			ready = append(ready, sl)
		}
	}
	dm.ready = ready
}

// argmax is the most likely token of logits and, when prob is set, its
// probability (else 1).
func argmax(logits []float32, prob bool) (llama.Token, float32) {
	best := 0
	for i, l := range logits {
		if l > logits[best] {
			best = i
		}
	}
	if !prob {
		return llama.Token(best), 1
	}
	top, sum := float64(logits[best]), 0.0
	for _, l := range logits {
		sum += math.Exp(float64(l) - top)
	}
	return llama.Token(best), float32(1 / sum)
}
