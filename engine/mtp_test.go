package engine_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/llama"
)

// TestMTPDraftsAreTheHeadsGuesses: with Speculation.MTP, the first token
// of each draft for a request is what the model's MTP head predicts from
// the request's tokens, computed here apart, with the llama package: the
// model evaluates the request's prompt and output in one pass, with the
// hidden row of every token, and the head evaluates each generated token
// with the row before it (the engine's head has no entries for a
// prompt's tokens but its last: neither has this one), its logits at each
// predicting the token after. The two compute the rows in other passes
// (a token or a draft at a time against all at once, another context
// size), and on this random model the last bits' differences grow along
// the sequence (0.013 in a log-probability by position 150): a
// prediction whose best two logits are closer than 0.3 may go either way
// and is not compared. Broken on purpose (the mirror pairing each row
// with the token it was computed at instead of the one after), most
// drafts differ.
//
// The random head's drafts are all refused, so the steps that mirror
// drafts the model took are not reached here (no random model repeats
// itself as a trained one does); TestSpeculationOutputIsTheSame shows
// the output is the model's either way.
func TestMTPDraftsAreTheHeadsGuesses(t *testing.T) {
	path := testsynth.ArchMTP(t, t.TempDir(), "qwen35")
	var mu sync.Mutex
	guesses := map[int]int32{} // the head's, by position, for the request running
	cfg := engine.Config{ModelPath: path, Parallel: 1, Threads: testThreads, Speculate: engine.Speculation{MTP: true}}
	e := startEngine(t, engine.Drafted(engine.DraftAlways(cfg), func(pos int, d []int32, model bool, _ int) {
		mu.Lock()
		defer mu.Unlock()
		if model {
			guesses[pos] = d[0]
		}
	}))
	if info := e.Info(); !slices.Equal(info.Speculation, []string{"mtp"}) {
		t.Errorf("ModelInfo.Speculation %q, want [mtp]", info.Speculation)
	}
	// A request whose drafts are refused drafts less and less often
	// (speculate.go): several requests give more drafts.
	drafts, compared := 0, 0
	check := func(prompt string) string {
		req := engine.Request{Prompt: prompt, AddSpecial: true, MaxTokens: 160, IgnoreEOS: true, Logprobs: true}
		out := run(t, e, req)
		ptoks, err := e.Tokenize(req.Prompt, true, false)
		if err != nil {
			t.Fatal(err)
		}
		toks := append(ptoks, tokensOf(out.lps)...)
		want, margin := headGuesses(t, path, toks, len(ptoks))
		mu.Lock()
		defer mu.Unlock()
		for pos, got := range guesses {
			q := pos - 1 // the draft follows the token at q
			switch {
			case q < len(ptoks) || q >= len(toks):
				t.Errorf("%q: a draft at position %d, outside the output (%d prompt tokens, %d in all)", prompt, pos, len(ptoks), len(toks))
			case margin[q] >= 0.3:
				compared++
				if got != want[q] {
					t.Errorf("%q, position %d: drafted %d, the head predicts %d (by %.3f)", prompt, pos, got, want[q], margin[q])
				}
			}
		}
		drafts += len(guesses)
		clear(guesses)
		return out.text
	}
	for _, prompt := range []string{"Once upon a time", "The little dog", "In the morning", "She said that", "We went to"} {
		out := check(prompt)
		check(prompt + out) // a longer prompt: drafts past position 128
	}
	st := e.Stats()
	t.Logf("%d drafts by the head, %d compared; %d drafted tokens, %d taken", drafts, compared, st.Spec.DraftTokens, st.Spec.Accepted)
	if compared < 20 {
		t.Errorf("only %d of %d drafts compared", compared, drafts)
	}
}

// headGuesses returns, for each position q from first to the end of
// toks, the token the MTP head of the model at path predicts at q+1 from
// the tokens up to q, and by how much its logit beats the next best.
func headGuesses(t *testing.T, path string, toks []int32, first int) (guess []int32, margin []float64) {
	t.Helper()
	m, err := llama.LoadModelOffload(context.Background(), path, llama.Offload{MTP: true}, llama.ContextParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cp := llama.ContextParams{NCtx: 1024, NBatch: 1024, Threads: testThreads}
	tctx, err := llama.NewContext(m, cp)
	if err != nil {
		t.Fatal(err)
	}
	defer tctx.Close()
	cp.MTP, cp.Other = true, tctx
	hctx, err := llama.NewContext(m, cp)
	if err != nil {
		t.Fatal(err)
	}
	defer hctx.Close()
	tctx.SetHidden(true)
	hctx.SetHidden(true)
	var b llama.Batch
	for i, tok := range toks {
		b.Add(tok, i, 0, true)
	}
	if err := tctx.Decode(&b); err != nil {
		t.Fatal(err)
	}
	var hb llama.Batch
	for q := first; q < len(toks); q++ {
		row := tctx.HiddenTo(nil, q-1)
		if row == nil {
			t.Fatalf("no hidden row at %d", q-1)
		}
		hb.AddHidden(toks[q], q, 0, true, row)
	}
	if err := hctx.Decode(&hb); err != nil {
		t.Fatal(err)
	}
	guess, margin = make([]int32, len(toks)), make([]float64, len(toks))
	for i := range hb.Len() {
		logits := hctx.Logits(i)
		best, second := 0, -1
		for j, l := range logits {
			switch {
			case l > logits[best]:
				best, second = j, best
			case j != best && (second < 0 || l > logits[second]):
				second = j
			}
		}
		guess[first+i] = int32(best)
		margin[first+i] = float64(logits[best] - logits[second])
	}
	return guess, margin
}

// TestMTPMemory: the estimate counts the MTP head's context and its
// layers' weights when the engine drafts with it, and not otherwise.
func TestMTPMemory(t *testing.T) {
	path := testsynth.ArchMTP(t, t.TempDir(), "qwen35")
	md, err := gguf.ReadMetadata(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{ModelPath: path, Parallel: 2, CtxSize: 1024}
	without, err := engine.EstimateMemory(md, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Speculate.MTP = true
	with, err := engine.EstimateMemory(md, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if without.Draft != 0 || with.Draft <= 0 {
		t.Errorf("Draft %d bytes without the head, %d with", without.Draft, with.Draft)
	}
	// llama.cpp loads the head's layers only to draft with them.
	if with.Weights <= without.Weights {
		t.Errorf("Weights %d bytes without the head, %d with", without.Weights, with.Weights)
	}
}

// TestMTPRefused: the MTP head is asked of a model without one, or
// beside a draft model: the engine does not start, and says why.
func TestMTPRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		spec engine.Speculation
		path string
		want string
	}{
		{"no head", engine.Speculation{MTP: true}, testsynth.Arch(t, dir, "qwen35"), "has none"},
		{"and a draft model", engine.Speculation{MTP: true, Model: testsynth.Arch(t, dir, "llama")}, testsynth.ArchMTP(t, dir, "qwen35"), "not both"},
	} {
		e, err := engine.New(context.Background(), engine.Config{ModelPath: tc.path, Parallel: 1, Speculate: tc.spec})
		if err == nil {
			e.Close()
			t.Errorf("%s: the engine started", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to say %q", tc.name, err, tc.want)
		}
	}
}
