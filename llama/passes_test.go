package llama_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
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

// sameOutputs checks that every row of b with an output reads from got,
// by b's index, the logits (to the bit) and the greedy token that ref
// gives at at[i], and returns how many rows it checked.
func sameOutputs(t *testing.T, m *llama.Model, got *llama.Context, b *llama.Batch, ref *llama.Context, at []int) int {
	t.Helper()
	greedy, err := llama.NewSampler(m, llama.SamplerParams{Temperature: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer greedy.Close()
	outputs := 0
	for i := range b.Len() {
		if !b.Logits[i] {
			continue
		}
		outputs++
		if g, w := got.Logits(i), ref.Logits(at[i]); g == nil || !slices.Equal(g, w) {
			t.Fatalf("row %d (sequence %d): logits are not the reference's (nil: %v)", i, b.Seq[i], g == nil)
		}
		g, err1 := greedy.Sample(got, i)
		w, err2 := greedy.Sample(ref, at[i])
		if err1 != nil || err2 != nil || g != w {
			t.Fatalf("row %d: greedy token %d (%v), the reference's %d (%v)", i, g, err1, w, err2)
		}
	}
	return outputs
}

// TestPerSeqBuffersTakeSequencesInOrder: where llama.cpp evaluates a
// batch in micro-batches of consecutive sequences (a buffer per
// sequence; a recurrent memory, even in one buffer), Decode gives it the
// rows in sequence order, so a step of decoding tokens of sequences 0-4
// and 6-7 with a prompt chunk of sequence 5 after them takes two passes
// (a row of each, then the rest of the chunk), not three, and every
// output read by the batch's index is the one a batch built in that
// order gives, to the bit.
func TestPerSeqBuffersTakeSequencesInOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		model   func() string
		unified bool
	}{
		{"buffer per sequence", func() string { return testmodel.Path(t, testmodel.TinyStories656K) }, false},
		{"mamba, one buffer", func() string { return testsynth.Arch(t, archDir, "mamba") }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := llama.LoadModel(context.Background(), tc.model())
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			decoding := []int{0, 1, 2, 3, 4, 6, 7}
			step := func() (*llama.Context, *llama.Batch) {
				ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 8 * 256, NBatch: 256, NSeqMax: 8, Threads: 1, Unified: tc.unified})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(ctx.Close)
				return ctx, mixedBatch(t, ctx, decoding, 5, 40)
			}
			ctx, b := step()
			before := ctx.Passes()
			if err := ctx.Decode(b); err != nil {
				t.Fatal(err)
			}
			if passes := ctx.Passes() - before; passes != 2 {
				t.Fatalf("a mixed step took %d passes, want 2", passes)
			}
			// The reference: the same rows, put in sequence order by hand.
			ref, _ := step()
			var sorted llama.Batch
			at := make([]int, b.Len())
			for seq := range 8 {
				for i := range b.Len() {
					if int(b.Seq[i]) == seq {
						at[i] = sorted.Len()
						sorted.Add(b.Tokens[i], int(b.Pos[i]), seq, b.Logits[i])
					}
				}
			}
			if err := ref.Decode(&sorted); err != nil {
				t.Fatal(err)
			}
			if outputs := sameOutputs(t, m, ctx, b, ref, at); outputs != 1+len(decoding) {
				t.Fatalf("%d outputs checked, want %d", outputs, 1+len(decoding))
			}
		})
	}
}

// TestDecodeSplit: DecodeSplit evaluates a step's rows before their
// sequence's first output (a prompt's chunk, all but its last token) in a
// pass of their own and then the rest, and the outputs read by the
// batch's indexes are what two Decodes of those parts compute, to the
// last bit (one pass of the whole batch differs in the last digits: its
// attention takes the kernel's tiled path).
func TestDecodeSplit(t *testing.T) {
	m, err := llama.LoadModel(context.Background(), testmodel.Path(t, testmodel.TinyStories656K))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	decoding := []int{0, 3, 6}
	const prefill = 5
	// step returns a context where the decoding sequences have a history,
	// and the batch of a step: chunk prompt tokens of sequence prefill,
	// the last with an output, then a token for each decoding sequence.
	step := func(t *testing.T, chunk int) (*llama.Context, *llama.Batch) {
		ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 8 * 256, NBatch: 256, NSeqMax: 8, Threads: 1, Unified: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ctx.Close)
		b := mixedBatch(t, ctx, decoding, prefill, 0)
		b.Reset()
		for i := range chunk {
			b.Add(llama.Token(30+i%40), i, prefill, i == chunk-1)
		}
		for _, seq := range decoding {
			b.Add(llama.Token(20), 3+seq, seq, true)
		}
		return ctx, b
	}
	for _, tc := range []struct {
		chunk, passes int
	}{{80, 2}, {40, 1}} { // 40 + 3 rows: fewer than a tile of the kernel, one pass
		t.Run(fmt.Sprintf("chunk=%d", tc.chunk), func(t *testing.T) {
			split, b := step(t, tc.chunk)
			before := split.Passes()
			if _, err := split.DecodeSplit(b); err != nil {
				t.Fatal(err)
			}
			if passes := split.Passes() - before; passes != uint64(tc.passes) {
				t.Fatalf("DecodeSplit took %d passes, want %d", passes, tc.passes)
			}
			// The reference: the same parts, in one Decode each where
			// DecodeSplit took two passes; at is a row's index in the last.
			ref, _ := step(t, tc.chunk)
			var first, rest llama.Batch
			at := make([]int, b.Len())
			for i := range b.Len() {
				part := &rest
				if tc.passes == 2 && i < tc.chunk-1 {
					part = &first
				}
				at[i] = part.Len()
				part.Add(b.Tokens[i], int(b.Pos[i]), int(b.Seq[i]), b.Logits[i])
			}
			for _, part := range []*llama.Batch{&first, &rest} {
				if err := ref.Decode(part); err != nil {
					t.Fatal(err)
				}
			}
			if !b.Logits[0] && split.Logits(0) != nil {
				t.Fatal("row 0: logits where the batch asked for none")
			}
			if outputs := sameOutputs(t, m, split, b, ref, at); outputs != 1+len(decoding) {
				t.Fatalf("%d outputs checked, want %d", outputs, 1+len(decoding))
			}
		})
	}
	t.Run("long rest", func(t *testing.T) {
		// A chunk beside 64 rows with outputs (drafts): those take the
		// tiled path all the same, so one pass.
		ctx, b := step(t, 8)
		for i := range 61 {
			b.Add(llama.Token(40+i%20), 4+i, 0, true)
		}
		before := ctx.Passes()
		if _, err := ctx.DecodeSplit(b); err != nil {
			t.Fatal(err)
		}
		if passes := ctx.Passes() - before; passes != 1 {
			t.Fatalf("DecodeSplit took %d passes beside 64 rows with outputs, want 1", passes)
		}
	})
	t.Run("prompts alone", func(t *testing.T) {
		// Two prompts' chunks and nothing decoding: one pass.
		ctx, _ := step(t, 0)
		var b llama.Batch
		for _, seq := range []int{prefill, 7} {
			for i := range 40 {
				b.Add(llama.Token(30+i), i, seq, i == 39)
			}
		}
		before := ctx.Passes()
		if _, err := ctx.DecodeSplit(&b); err != nil {
			t.Fatal(err)
		}
		if passes := ctx.Passes() - before; passes != 1 {
			t.Fatalf("DecodeSplit took %d passes for prompts alone, want 1", passes)
		}
		if ctx.Logits(39) == nil || ctx.Logits(79) == nil {
			t.Fatal("no logits at the prompts' last tokens")
		}
	})
}
