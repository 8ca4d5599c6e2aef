package llama_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/llama"
)

// TestRollbackAfterCellsMove: a hybrid model's recurrent state goes back
// over a sequence's refused draft (ContextParams.Rollback) to the state
// plain decoding would hold, whatever cells its sequences' states took
// (each prompt takes the next free one, so the order the prompts came in
// decides) and however llama.cpp split the batch that evaluated the
// draft, with a buffer per sequence (as the engine runs such a model).
// llama.cpp b10573 alone fails 18 of the 96 cases of two of the three
// batches: a micro-batch evaluated after the draft's moved the drafting
// sequence's state to another cell, without the copies its rollback
// reads (see Context.homeStates). With one buffer (kv_unified) llama.cpp may also
// put non-adjacent sequences in one micro-batch and move the one
// between them: 48 of the 96 cases where a sequence sits out the batch
// failed so even with homeStates.
func TestRollbackAfterCellsMove(t *testing.T) {
	m, err := llama.LoadModel(context.Background(), testsynth.Arch(t, archDir, "qwen35"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	prompt := []llama.Token{1, 70, 80, 90}
	const a, b = 100, 110
	draft := []llama.Token{120, 121, 122, 123, 124, 125, 126, 127}

	// What plain decoding gives after prompt, a, b.
	ref, err := llama.NewContext(m, llama.ContextParams{NCtx: 256, NBatch: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	var batch llama.Batch
	for i, tok := range append(append([]llama.Token{}, prompt...), a, b) {
		batch.Add(tok, i, 0, i == len(prompt)+1)
	}
	if err := ref.Decode(&batch); err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), ref.Logits(batch.Len()-1)...)

	// rollback decodes the four sequences' prompts in order, then a batch
	// where drafter evaluates a and the draft, two others (with chunks)
	// the next 20 tokens of their prompts, and the one left a (or, absent,
	// nothing), then goes back over the draft and evaluates b: the largest
	// difference from want.
	rollback := func(t *testing.T, chunks, absent bool, order []int, drafter int) float64 {
		ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 1024, NBatch: 64, NSeqMax: 4, Rollback: len(draft)})
		if err != nil {
			t.Fatal(err)
		}
		defer ctx.Close()
		for _, seq := range order {
			batch.Reset()
			for i, tok := range prompt {
				batch.Add(tok, i, seq, false)
			}
			if err := ctx.Decode(&batch); err != nil {
				t.Fatal(err)
			}
		}
		batch.Reset()
		for seq := range 4 {
			if chunks && seq != drafter && seq != (drafter+2)%4 {
				for i := range 20 {
					batch.Add(llama.Token(130+i), len(prompt)+i, seq, false)
				}
				continue
			}
			if absent && seq == (drafter+2)%4 {
				continue
			}
			batch.Add(a, len(prompt), seq, true)
		}
		for i, tok := range draft {
			batch.Add(tok, len(prompt)+1+i, drafter, true)
		}
		if err := ctx.Decode(&batch); err != nil {
			t.Fatal(err)
		}
		if !ctx.SeqRemove(drafter, len(prompt)+1, -1) {
			t.Fatal("the rollback over the draft was refused")
		}
		batch.Reset()
		batch.Add(b, len(prompt)+1, drafter, true)
		if err := ctx.Decode(&batch); err != nil {
			t.Fatal(err)
		}
		diff := 0.0
		for i, l := range ctx.Logits(0) {
			diff = max(diff, math.Abs(float64(l-want[i])))
		}
		return diff
	}
	for _, batching := range []struct{ chunks, absent bool }{{false, false}, {true, false}, {true, true}} {
		chunks, absent := batching.chunks, batching.absent
		t.Run(fmt.Sprintf("chunks=%v/absent=%v", chunks, absent), func(t *testing.T) {
			failed, cases := 0, 0
			for _, order := range permutations([]int{0, 1, 2, 3}) {
				for drafter := range 4 {
					cases++
					// The chunked computation of several tokens moves
					// logits by ~1e-5; another state's, by whole units.
					if d := rollback(t, chunks, absent, order, drafter); d > 1e-3 {
						if failed++; failed <= 3 {
							t.Logf("prompts in order %v, drafts in %d: logits differ from plain decoding's by up to %.3f", order, drafter, d)
						}
					}
				}
			}
			if failed > 0 {
				t.Errorf("%d of %d cases went back to another state", failed, cases)
			}
		})
	}
}

// permutations lists every order of a's elements.
func permutations(a []int) [][]int {
	if len(a) <= 1 {
		return [][]int{append([]int(nil), a...)}
	}
	var out [][]int
	for i := range a {
		rest := append(append([]int(nil), a[:i]...), a[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]int{a[i]}, p...))
		}
	}
	return out
}

// TestRecurrentStatesComeHome: in a context with rollback copies, states
// that llama.cpp moved between cells (one buffer: a micro-batch of
// sequences 0 and 2 moves 2 into 1's cell) and a state copied to another
// sequence (SeqCopy, which shares the cell) are put back in their own
// cells, with their rows, before the next decode (Context.homeStates):
// each sequence then goes on from its own state.
func TestRecurrentStatesComeHome(t *testing.T) {
	m, err := llama.LoadModel(context.Background(), testsynth.Arch(t, archDir, "qwen35"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	prompts := [][]llama.Token{
		{1, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38},
		{1, 40, 41},
		{1, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68},
	}
	const next = 99
	// What each prompt, then next, gives alone.
	want := make([][]float32, len(prompts))
	for i, p := range prompts {
		ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 256, NBatch: 64})
		if err != nil {
			t.Fatal(err)
		}
		var b llama.Batch
		for j, tok := range append(append([]llama.Token{}, p...), next) {
			b.Add(tok, j, 0, j == len(p))
		}
		if err := ctx.Decode(&b); err != nil {
			t.Fatal(err)
		}
		want[i] = append([]float32(nil), ctx.Logits(b.Len()-1)...)
		ctx.Close()
	}

	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 1024, NBatch: 64, NSeqMax: 4, Rollback: 8, Unified: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	var b llama.Batch
	for seq, p := range prompts {
		for j, tok := range p {
			b.Add(tok, j, seq, false)
		}
	}
	if err := ctx.Decode(&b); err != nil {
		t.Fatal(err)
	}
	ctx.SeqCopy(0, 3, -1, -1) // 3 shares 0's state cell
	b.Reset()
	for seq := range 4 {
		b.Add(next, len(prompts[seq%3]), seq, true)
	}
	if err := ctx.Decode(&b); err != nil {
		t.Fatal(err)
	}
	for seq := range 4 {
		diff := 0.0
		for i, l := range ctx.Logits(seq) {
			diff = max(diff, math.Abs(float64(l-want[seq%3][i])))
		}
		if diff > 1e-3 {
			t.Errorf("sequence %d: logits differ from its prompt's alone by up to %.3f", seq, diff)
		}
	}
}
