package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/corral-llm/corral/llama"
)

// The model's own multi-token prediction head (Speculation.MTP): some
// models ship, after the layers that predict the next token, a layer
// trained to predict the one after it (Qwen3.5's and 3.6's, DeepSeek's
// and GLM's "nextn" layers). It reads the token at position p with the
// hidden row the model computed at p-1 (its last layer's output) and
// guesses the token at p+1; fed its own output row and guess, it guesses
// on. It is llama-server's draft-mtp, run by the scheduler for every slot
// that drafts in a step at once, as a draft model is (draftmodel.go).
//
// The head runs in a context of its own on the model (llama.cpp's MTP
// context), with keys and values for its layer only and a sequence per
// slot. After every step (mirror), it evaluates what the model took: for
// each slot the model gave logits for, the tokens the slot kept, each
// with the model's row at the position before, and the slot's next token
// (the one it sampled, evaluated by the model in the next step), whose
// logits give the first token of the slot's next draft. A draft of more
// tokens takes one pass of the head per token, for all drafting slots at
// once, each token with the head's own row; those passes' entries are
// cut afterwards, and the mirror evaluates the tokens taken with the
// model's rows instead.
//
// The model's rows come only for the tokens it computed logits for (the
// head's context would otherwise need llama.cpp's rows of every token,
// which it orders by micro-batch, not by batch, for hybrid models): a
// prompt's tokens but its last have no entry in the head's sequence. The
// head then attends over what the slot generated only; its row from the
// model carries the prompt, and its drafts are only guesses: the output
// stays the model's.
//
// Not for a request with media or one shifted past the context (its
// positions are no longer the model's).

// mtpHead is the MTP head's context and what it holds; only the
// scheduler uses it, after New.
type mtpHead struct {
	target, lctx *llama.Context
	batch        llama.Batch
	// toks[id] are the tokens of positions [0, len) of the slot's
	// cache when its sequence's entries were evaluated (an entry at
	// each position but those of prompts and shared prefixes), req[id]
	// the request they were for.
	toks [][]int32
	req  []*request
	// next[id] is the head's guess at the token after the slot's last
	// entry (-1: none), row[id] its hidden row there; idx[id] is the
	// batch index of the slot's output in the last pass.
	next []llama.Token
	row  [][]float32
	idx  []int
	// outs[id] are the batch indexes of the step's outputs of slot id
	// (mirror's scratch); ready the slots whose guesses grow.
	outs   [][]int
	ready  []*slot
	pMin   float32
	logits []float32
	hidden []float32
}

// newDrafter returns the drafter cfg asks for, nil when none: a draft
// model, or the MTP head of model, whose context lctx holds cells cells
// for the slots and can take a recurrent state back over rollback tokens.
func newDrafter(ctx context.Context, cfg Config, model *llama.Model, lctx *llama.Context, cells, rollback int) (drafter, error) {
	sp := cfg.Speculate
	if sp.MTP && sp.Model != "" {
		return nil, errors.New("speculation: one model drafts, a draft model or the model's MTP head, not both")
	}
	if sp.MTP {
		return newMTPHead(cfg, model, lctx, cells, rollback)
	}
	dm, err := loadDraftModel(ctx, cfg, model, cells, rollback)
	if dm == nil {
		return nil, err
	}
	return dm, err
}

// mtpArchs are the architectures whose head llama.cpp b10573 runs (a
// graph of type LLM_GRAPH_TYPE_DECODER_MTP). Step 3.5's chained heads
// are run as its first head alone, drafting token after token.
var mtpArchs = map[string]bool{
	"qwen35": true, "qwen35moe": true, "qwen3next": true, "deepseek2": true, "deepseek32": true,
	"deepseek4": true, "glm-dsa": true, "step35": true, "bailingmoe3": true, "cohere2moe": true,
	"nemotron_h_moe": true, "hy_v3": true, "mimo2": true,
}

// newMTPHead makes the MTP head's context on model, whose context lctx
// holds cells cells for the slots.
func newMTPHead(cfg Config, model *llama.Model, lctx *llama.Context, cells, rollback int) (*mtpHead, error) {
	arch, _ := model.Meta("general.architecture")
	if model.MTPHeads() == 0 {
		return nil, fmt.Errorf("MTP head: this %s model has none (no nextn layers in its file)", arch)
	}
	if !mtpArchs[arch] {
		return nil, fmt.Errorf("MTP head: llama.cpp %s does not run a %s model's head", llama.Release(), arch)
	}
	if model.Recurrent() && rollback == 0 {
		return nil, fmt.Errorf("MTP head: a %s model's recurrent state goes back over a refused draft only where llama.cpp %s can take it back: it does not speculate", arch, llama.Release())
	}
	cp := cfg.draftConfig(cells).contextParams(model.CtxTrain(), llama.PoolingNone, 0, 0)
	cp.MTP, cp.Other = true, lctx
	hctx, err := llama.NewContext(model, cp)
	if err != nil {
		return nil, fmt.Errorf("MTP head: %w", err)
	}
	lctx.SetHidden(true)
	hctx.SetHidden(true)
	h := &mtpHead{
		target: lctx, lctx: hctx,
		toks: make([][]int32, cfg.Parallel), req: make([]*request, cfg.Parallel),
		next: make([]llama.Token, cfg.Parallel), row: make([][]float32, cfg.Parallel),
		idx: make([]int, cfg.Parallel), outs: make([][]int, cfg.Parallel),
		pMin: float32(cfg.Speculate.PMin),
	}
	for i := range h.next {
		h.next[i] = -1
	}
	return h, nil
}

// can reports whether the slot may draft with the head: its request has
// no media and was not shifted, so its positions are the model's.
func (h *mtpHead) can(sl *slot) bool {
	return sl.shift == 0 && len(sl.req.params.Media) == 0
}

func (h *mtpHead) close() {
	h.target.SetHidden(false)
	h.lctx.Close()
}

// reset empties every sequence: after a failed pass the context's cells
// are not known.
func (h *mtpHead) reset() {
	h.lctx.Clear()
	for i := range h.toks {
		h.toks[i], h.req[i], h.next[i] = h.toks[i][:0], nil, -1
	}
}

// sync cuts the slot's sequence to what its cache still holds. Within
// one request a position's token never changes (the sequence has
// entries only for tokens the request kept), so only a sequence longer
// than the cache, or another request's, is compared token by token.
func (h *mtpHead) sync(sl *slot) bool {
	seq := h.toks[sl.id]
	if h.req[sl.id] == sl.req && len(seq) <= len(sl.cache) {
		return true
	}
	n := commonPrefix(seq, sl.cache)
	if n == len(seq) {
		return true
	}
	if !h.lctx.SeqRemove(sl.id, n, -1) {
		h.reset()
		return false
	}
	h.toks[sl.id] = seq[:n]
	return true
}

// mirror evaluates what the step just sampled took (see the comment at
// the top), and the head's guess after each decoding slot's next token.
func (h *mtpHead) mirror(s *scheduler) {
	for i := range h.outs {
		h.outs[i] = h.outs[i][:0]
		h.next[i] = -1
	}
	b := &s.batch
	for i, out := range b.Logits {
		if out {
			h.outs[b.Seq[i]] = append(h.outs[b.Seq[i]], i)
		}
	}
	h.batch.Reset()
	h.ready = h.ready[:0]
	drafts := s.mayDraft()
	for _, sl := range s.slots {
		outs := h.outs[sl.id]
		if len(outs) == 0 || sl.state != stateDecode || !h.can(sl) || !h.sync(sl) {
			continue
		}
		h.req[sl.id] = sl.req
		for _, i := range outs {
			q := int(b.Pos[i])
			if q >= len(sl.cache) || sl.cache[q] != b.Tokens[i] {
				break // a draft the request did not take, and those after it
			}
			seq := h.toks[sl.id]
			if q+1 < len(seq) {
				continue
			}
			tok := sl.req.gen.last
			if q+1 < len(sl.cache) {
				tok = sl.cache[q+1]
			}
			row := h.target.HiddenTo(h.hidden, i)
			if row == nil {
				break
			}
			h.hidden = row
			// The guess after the slot's next token, for its next
			// draft: not for a slot that will not ask (speculate), nor
			// where the next step will not draft, as the vocabulary's
			// logits cost what the model's do.
			g := &sl.req.gen
			guess := drafts && q+1 == len(sl.cache) && g.pace == nil && g.specSkip == 0
			if guess {
				h.idx[sl.id] = h.batch.Len()
				h.ready = append(h.ready, sl)
			}
			h.batch.AddHidden(tok, q+1, sl.id, guess, row)
			// The positions before without an entry are holes.
			h.toks[sl.id] = append(append(seq, sl.cache[len(seq):q+1]...), tok)
		}
	}
	if h.batch.Len() == 0 {
		return
	}
	if err := h.lctx.Decode(&h.batch); err != nil {
		h.reset()
		return
	}
	for _, sl := range h.ready {
		h.next[sl.id] = h.guess(sl)
	}
	h.ready = h.ready[:0]
}

// guess returns the head's most likely token at the slot's output of the
// last pass, and keeps its row there; -1 when that token's probability
// is under PMin.
func (h *mtpHead) guess(sl *slot) llama.Token {
	h.logits = h.lctx.LogitsTo(h.logits, h.idx[sl.id])
	row := h.lctx.HiddenTo(h.row[sl.id], h.idx[sl.id])
	if h.logits == nil || row == nil {
		return -1
	}
	h.row[sl.id] = row
	tok, p := argmax(h.logits, h.pMin > 0)
	if p < h.pMin {
		return -1
	}
	return tok
}

// behind is 0: mirror keeps the head in step with every slot.
func (h *mtpHead) behind(*slot) int { return 0 }

// fill drafts for the asking slots: the guess the last mirror made after
// each one's next token, and more, a pass of the head per token, while a
// slot wants more. The head has nothing to catch up with: mirror keeps
// it in step.
func (h *mtpHead) fill(_, asking []*slot) time.Duration {
	h.ready = h.ready[:0]
	for _, sl := range asking {
		id := sl.id
		// The step has put the slot's next token in its cache: the
		// mirror's last entry.
		if h.next[id] < 0 || h.req[id] != sl.req || len(h.toks[id]) != len(sl.cache) {
			continue // nothing guessed for this state of the slot
		}
		g := &sl.req.gen
		g.draft = append(g.draft, h.next[id])
		if len(g.draft) < sl.draftWant {
			h.ready = append(h.ready, sl)
		}
	}
	extended := false
	for len(h.ready) > 0 {
		extended = true
		h.batch.Reset()
		for _, sl := range h.ready {
			g := &sl.req.gen
			h.idx[sl.id] = h.batch.Len()
			h.batch.AddHidden(g.draft[len(g.draft)-1], len(h.toks[sl.id])+len(g.draft)-1, sl.id, true, h.row[sl.id])
		}
		if err := h.lctx.Decode(&h.batch); err != nil {
			h.reset()
			h.ready = h.ready[:0]
			return 0
		}
		ready := h.ready[:0]
		for _, sl := range h.ready {
			tok := h.guess(sl)
			if tok < 0 {
				continue
			}
			g := &sl.req.gen
			g.draft = append(g.draft, tok)
			if len(g.draft) < sl.draftWant {
				ready = append(ready, sl)
			}
		}
		h.ready = ready
	}
	if !extended {
		return 0
	}
	// The draft's entries were evaluated with the head's rows; the
	// mirror evaluates what the model takes of it with the model's.
	for _, sl := range asking {
		if len(sl.req.gen.draft) > 1 && !h.lctx.SeqRemove(sl.id, len(h.toks[sl.id]), -1) {
			h.reset()
			return 0
		}
	}
	return 0
}
