package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
)

var embedTexts = []string{
	"Once upon a time",
	"The little dog ran to the park and played with a red ball.",
	"Lily liked to eat apples",
	"Tom was sad.",
	"Once upon a time", // a repeat: the same vector as the first
}

// embedTol is how far a component may move between the same input
// embedded alone and in a batch: its cells sit elsewhere in the cache, so
// attention sums in another order (see TestGoldenAloneAndBatched).
const embedTol = 1e-4

func embedOne(t testing.TB, e *engine.Engine, in engine.EmbedInput) []float32 {
	t.Helper()
	res, err := e.Embed(context.Background(), []engine.EmbedInput{in})
	if err != nil {
		t.Fatalf("Embed %+v: %v", in, err)
	}
	return res.Vectors[0]
}

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

func norm(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// TestEmbedBatchedEqualsAlone: for each pooling, inputs embedded in one
// call (one forward pass) give the vectors they give alone; vectors have
// the model's size and unit length; the same text gives the same vector
// and different texts different ones (with cls pooling, on this causal
// model, the same: the BOS token's); token ids embed like their text.
func TestEmbedBatchedEqualsAlone(t *testing.T) {
	for _, pooling := range []string{"mean", "last", "cls"} {
		t.Run(pooling, func(t *testing.T) {
			e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 2, Pooling: pooling})
			info := e.Info()
			if info.Pooling != pooling || info.EmbeddingSize <= 0 || info.EmbedMaxTokens <= 0 {
				t.Fatalf("info: pooling %q, size %d, max tokens %d", info.Pooling, info.EmbeddingSize, info.EmbedMaxTokens)
			}
			var inputs []engine.EmbedInput
			var alone [][]float32
			for _, text := range embedTexts {
				in := engine.EmbedInput{Text: text}
				inputs = append(inputs, in)
				alone = append(alone, embedOne(t, e, in))
			}
			passes := e.Stats().EmbedPasses
			res, err := e.Embed(context.Background(), inputs)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.Stats().EmbedPasses - passes; got != 1 {
				t.Errorf("%d inputs took %d passes, want 1", len(inputs), got)
			}
			if len(res.Vectors) != len(inputs) {
				t.Fatalf("%d vectors for %d inputs", len(res.Vectors), len(inputs))
			}
			for i, v := range res.Vectors {
				if len(v) != info.EmbeddingSize {
					t.Fatalf("vector %d has %d values, want %d", i, len(v), info.EmbeddingSize)
				}
				if n := norm(v); math.Abs(n-1) > 1e-5 {
					t.Errorf("vector %d: norm %v, want 1", i, n)
				}
				if d := maxDiff(v, alone[i]); d > embedTol {
					t.Errorf("input %d %q: batched differs from alone by %v", i, embedTexts[i], d)
				}
			}
			if d := maxDiff(res.Vectors[0], res.Vectors[4]); d > embedTol {
				t.Errorf("the same text gave vectors %v apart", d)
			}
			for i := 1; i < 4; i++ {
				d := maxDiff(res.Vectors[0], res.Vectors[i])
				if pooling == "cls" {
					// The first token is BOS whatever the text, and a causal
					// model's first position sees nothing else.
					if d > embedTol {
						t.Errorf("cls: %q and %q: vectors %v apart, want equal (BOS)", embedTexts[0], embedTexts[i], d)
					}
				} else if d < 1e-3 {
					t.Errorf("%q and %q gave vectors only %v apart", embedTexts[0], embedTexts[i], d)
				}
			}
			// The text's tokens embed like the text.
			toks, err := e.Tokenize(embedTexts[1], true, false)
			if err != nil {
				t.Fatal(err)
			}
			if d := maxDiff(embedOne(t, e, engine.EmbedInput{Tokens: toks}), alone[1]); d > embedTol {
				t.Errorf("tokens and text differ by %v", d)
			}
			want := 0
			for _, in := range inputs {
				toks, _ := e.Tokenize(in.Text, true, false)
				want += len(toks)
			}
			if res.Tokens != want {
				t.Errorf("usage %d tokens, want %d", res.Tokens, want)
			}
		})
	}
}

// TestEmbedManyInputsTakeSeveralPasses: more inputs than one pass holds
// (lanes or tokens) are split over passes in order.
func TestEmbedManyInputsTakeSeveralPasses(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, BatchSize: 32, Pooling: "mean"})
	var inputs []engine.EmbedInput
	for i := range 20 {
		inputs = append(inputs, engine.EmbedInput{Text: fmt.Sprintf("Once upon a time there were %d cats", i)})
	}
	res, err := e.Embed(context.Background(), inputs)
	if err != nil {
		t.Fatal(err)
	}
	if p := e.Stats().EmbedPasses; p < 2 {
		t.Errorf("%d passes for %d tokens with a 32-token batch", p, res.Tokens)
	}
	for i, in := range inputs {
		if d := maxDiff(res.Vectors[i], embedOne(t, e, in)); d > embedTol {
			t.Errorf("input %d differs from alone by %v", i, d)
		}
	}
}

// TestEmbedPoolingNone: a model that declares no pooling, served as it
// is, cannot embed.
func TestEmbedPoolingNone(t *testing.T) {
	for _, pooling := range []string{"", "none"} {
		e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, Pooling: pooling})
		if p := e.Info().Pooling; p != "none" {
			t.Errorf("Pooling %q: info says %q, want none", pooling, p)
		}
		_, err := e.Embed(context.Background(), []engine.EmbedInput{{Text: "hi"}})
		if !errors.Is(err, engine.ErrNotEmbedding) {
			t.Errorf("Pooling %q: Embed: %v, want ErrNotEmbedding", pooling, err)
		}
		e.Close()
	}
	_, err := engine.New(context.Background(), engine.Config{ModelPath: testmodel.Path(t, testmodel.TinyStories656K), Pooling: "max"})
	if err == nil {
		t.Fatal("New with pooling max: no error")
	}
}

// TestEmbedBadInputs are refused before anything is queued, naming the
// input.
func TestEmbedBadInputs(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, BatchSize: 64, Pooling: "mean"})
	long := make([]int32, e.Info().EmbedMaxTokens+1)
	for i := range long {
		long[i] = 100
	}
	ok := engine.EmbedInput{Text: "fine"}
	for _, c := range []struct {
		name   string
		inputs []engine.EmbedInput
		want   error
		index  int
	}{
		{"no inputs", nil, engine.ErrEmptyPrompt, -1},
		{"empty text", []engine.EmbedInput{ok, {}}, engine.ErrEmptyPrompt, 1},
		{"bad token", []engine.EmbedInput{ok, ok, {Tokens: []int32{1, int32(e.Info().VocabSize)}}}, engine.ErrBadToken, 2},
		{"negative token", []engine.EmbedInput{{Tokens: []int32{-1}}}, engine.ErrBadToken, 0},
		{"too long", []engine.EmbedInput{ok, {Tokens: long}}, engine.ErrPromptTooLong, 1},
		{"too long text", []engine.EmbedInput{{Text: longText(200)}}, engine.ErrPromptTooLong, 0},
		{"too many", make([]engine.EmbedInput, engine.MaxEmbedInputs+1), engine.ErrTooManyInputs, -1},
	} {
		_, err := e.Embed(context.Background(), c.inputs)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
			continue
		}
		var ie *engine.EmbedInputError
		if got := errors.As(err, &ie); got != (c.index >= 0) || (got && ie.Index != c.index) {
			t.Errorf("%s: %v: want input index %d", c.name, err, c.index)
		}
	}
	if st := e.Stats(); st.QueueDepth != 0 || st.EmbedPasses != 0 {
		t.Errorf("after refused calls: queue %d, passes %d", st.QueueDepth, st.EmbedPasses)
	}
}

func longText(words int) string {
	b := make([]byte, 0, words*6)
	for range words {
		b = append(b, " hello"...)
	}
	return string(b)
}

// TestEmbedBesideGeneration: embedding passes between generation steps
// leave the greedy streams' text exactly what it is alone.
func TestEmbedBesideGeneration(t *testing.T) {
	cases := testmodel.GoldensFor(testmodel.TinyStories656K)
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: len(cases), BatchSize: 64, Pooling: "mean"})
	want := embedOne(t, e, engine.EmbedInput{Text: embedTexts[1]})
	var streams []*engine.Stream
	for _, g := range cases {
		s := submit(t, e, greedy(g.Prompt, g.N))
		if _, err := s.Recv(context.Background()); err != nil { // decoding now
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				res, err := e.Embed(context.Background(), []engine.EmbedInput{{Text: embedTexts[0]}, {Text: embedTexts[1]}})
				if err != nil {
					t.Error(err)
					return
				}
				if d := maxDiff(res.Vectors[1], want); d > embedTol {
					t.Errorf("embedded beside generation: %v from alone", d)
				}
			}
		}()
	}
	for i, s := range streams {
		// The first chunk was read above: compare the rest.
		got, _ := collect(t, s)
		g := cases[i]
		if !hasSuffixAfterFirst(g.Want, got) {
			t.Errorf("%q beside embeddings:\n got …%q\nwant %q", g.Prompt, got, g.Want)
		}
	}
	wg.Wait()
	if st := e.Stats(); st.EmbedPasses == 0 {
		t.Error("no embedding pass ran")
	}
}

// hasSuffixAfterFirst reports whether rest is want less a first chunk.
func hasSuffixAfterFirst(want, rest string) bool {
	return len(rest) < len(want) && want[len(want)-len(rest):] == rest
}

// TestEmbedCancel: Embed calls whose context ends, queued or not, leave
// the engine serving, with nothing left in the queue or the cache.
func TestEmbedCancel(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, Pooling: "last"})
	in := engine.EmbedInput{Text: embedTexts[1]}
	want := embedOne(t, e, in)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Embed(ctx, []engine.EmbedInput{in}); !errors.Is(err, context.Canceled) {
		t.Errorf("Embed with a cancelled context: %v", err)
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			if i%2 == 0 {
				cancel()
			}
			defer cancel()
			var inputs []engine.EmbedInput
			for range 40 {
				inputs = append(inputs, in)
			}
			_, err := e.Embed(ctx, inputs)
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	waitIdle(t, e)
	if d := maxDiff(embedOne(t, e, in), want); d > embedTol {
		t.Errorf("after cancelled calls the vector moved by %v", d)
	}
	s := submit(t, e, greedy("Once upon a time", 8))
	if _, res := collect(t, s); res.FinishReason != engine.FinishLength {
		t.Errorf("generation after cancelled embeds: %+v", res)
	}
}

// TestEmbedQueueFull: an Embed call takes a place in the bounded queue.
func TestEmbedQueueFull(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 1, MaxQueue: 1, Pooling: "mean"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	busy := longRunning(t, e, ctx, 100000)
	queued := submit(t, e, greedy("Hello", 4)) // waits for the busy slot
	if _, err := e.Embed(context.Background(), []engine.EmbedInput{{Text: "hi"}}); !errors.Is(err, engine.ErrQueueFull) {
		t.Errorf("Embed with a full queue: %v", err)
	}
	cancel()
	collect(t, busy)
	collect(t, queued)
	if _, err := e.Embed(context.Background(), []engine.EmbedInput{{Text: "hi"}}); err != nil {
		t.Errorf("Embed after the queue emptied: %v", err)
	}
}

// TestEmbedDrain: a draining engine takes no Embed call.
func TestEmbedDrain(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, Pooling: "mean"})
	e.Drain()
	if _, err := e.Embed(context.Background(), []engine.EmbedInput{{Text: "hi"}}); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Embed after Drain: %v", err)
	}
}

// BenchmarkEmbed32: 32 short inputs embedded as one call (one forward
// pass) against 32 calls one after the other. $CORRAL_EMBED_BENCH_MODEL
// names another GGUF file to measure (corral synth --shape 135m makes
// one whose passes are dominated by reading the weights).
func BenchmarkEmbed32(b *testing.B) {
	path := os.Getenv("CORRAL_EMBED_BENCH_MODEL")
	if path == "" {
		path = testmodel.Path(b, testmodel.TinyStories656K)
	}
	e, err := engine.New(context.Background(), engine.Config{
		ModelPath: path, Parallel: 1, Threads: testThreads, Pooling: "mean",
	})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	var inputs []engine.EmbedInput
	for i := range 32 {
		inputs = append(inputs, engine.EmbedInput{Text: fmt.Sprintf("The cat number %d sat on the mat.", i)})
	}
	b.Run("batched", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.Embed(context.Background(), inputs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sequential", func(b *testing.B) {
		for b.Loop() {
			for _, in := range inputs {
				if _, err := e.Embed(context.Background(), []engine.EmbedInput{in}); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// TestEstimateMemoryPooling: an engine that embeds is estimated with its
// reserved batch of KV cells and its larger output buffer; the pooling
// the GGUF declares counts like the one asked for.
func TestEstimateMemoryPooling(t *testing.T) {
	md := &gguf.Metadata{
		Architecture: "llama", ContextLength: 1000, EmbeddingLength: 512, BlockCount: 2, VocabSize: 1000,
		KV:      map[string]any{"general.architecture": "llama", "llama.attention.head_count": uint32(8)},
		Tensors: []gguf.TensorInfo{{Name: "token_embd.weight", Dims: []uint64{512, 1000}, Type: gguf.TypeQ8_0}},
	}
	// 2 slots of 768 cells; with the reserve, 1,536 + 512 = 2,048 cells
	// (no padding either way), and passes of 512 tokens.
	cfg := engine.Config{Parallel: 2, CtxSize: 1536}
	plain, err := engine.EstimateMemory(md, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pooling = "none"
	if none, err := engine.EstimateMemory(md, cfg); err != nil || none != plain {
		t.Errorf("pooling none: %+v, %v; want %+v", none, err, plain)
	}
	cfg.Pooling = "mean"
	mean, err := engine.EstimateMemory(md, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := plain.KV * 2048 / 1536; mean.KV != want {
		t.Errorf("KV %d with pooling, want %d (512 more cells)", mean.KV, want)
	}
	// The output buffer: (vocab + embd) × 512 tokens × 4 B, where one
	// token's logits per slot were.
	if grow := mean.Compute - plain.Compute; grow < (1000+512)*512*4-1000*4*2 {
		t.Errorf("compute grows by %d with pooling, less than the output buffer", grow)
	}
	// -1 as a uint32 is llama.cpp's "unspecified" (test-llama-archs'
	// models declare it): no pooling, not an error.
	md.KV["llama.pooling_type"] = uint32(math.MaxUint32)
	cfg.Pooling = ""
	if unspecified, err := engine.EstimateMemory(md, cfg); err != nil || unspecified != plain {
		t.Errorf("pooling type -1: %+v, %v; want %+v", unspecified, err, plain)
	}
	md.KV["llama.pooling_type"] = uint32(7)
	if _, err := engine.EstimateMemory(md, cfg); err == nil {
		t.Error("pooling type 7: no error")
	}
	md.KV["llama.pooling_type"] = uint32(1) // mean
	if declared, err := engine.EstimateMemory(md, cfg); err != nil || declared != mean {
		t.Errorf("declared mean: %+v, %v; want %+v", declared, err, mean)
	}
	cfg.Pooling = "max"
	if _, err := engine.EstimateMemory(md, cfg); err == nil {
		t.Error("pooling max: no error")
	}
}
