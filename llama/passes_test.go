package llama_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

// mixedBatch is the batch a busy step builds: one decode token for each of
// the sequences in decoding (each with its history already cached), and a
// prompt chunk of chunk tokens for sequence prefill.
func mixedBatch(t testing.TB, ctx *llama.Context, decoding []int, prefill, chunk int) *llama.Batch {
	t.Helper()
	var b llama.Batch
	for _, seq := range decoding { // give every decoding sequence a history
		for i := range 3 + seq {
			b.Add(llama.Token(10+i), i, seq, false)
		}
	}
	if err := ctx.Decode(&b); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	for _, seq := range decoding {
		b.Add(llama.Token(20), 3+seq, seq, true)
	}
	for i := range chunk {
		b.Add(llama.Token(30+i), i, prefill, i == chunk-1)
	}
	return &b
}

// TestUnifiedCacheDecodesAnyMixInOnePass: with one KV buffer for all
// sequences, a step mixing decode tokens of non-adjacent sequences with a
// prompt chunk is one forward pass. With a buffer per sequence llama.cpp
// must split it into micro-batches of equal length per sequence, each one
// a pass that reads every weight again.
func TestUnifiedCacheDecodesAnyMixInOnePass(t *testing.T) {
	m, err := llama.LoadModel(context.Background(), testmodel.Path(t, testmodel.TinyStories656K))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, unified := range []bool{true, false} {
		t.Run(fmt.Sprintf("unified=%v", unified), func(t *testing.T) {
			ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 8 * 256, NBatch: 256, NSeqMax: 8, Threads: 1, Unified: unified})
			if err != nil {
				t.Fatal(err)
			}
			defer ctx.Close()
			b := mixedBatch(t, ctx, []int{0, 3, 6}, 5, 40)
			before := ctx.Passes()
			if err := ctx.Decode(b); err != nil {
				t.Fatal(err)
			}
			passes := ctx.Passes() - before
			switch {
			case unified && passes != 1:
				t.Fatalf("a mixed step took %d forward passes with the unified cache, want 1", passes)
			case !unified && passes < 2:
				t.Fatalf("a mixed step took %d forward passes with per-sequence buffers; the counter is not counting", passes)
			}
			t.Logf("%d forward passes", passes)
		})
	}
}
