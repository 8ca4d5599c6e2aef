package llama_test

import (
	"context"
	"math"
	"sort"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

// logSoftmax is the log-softmax of logits, in float64.
func logSoftmax(logits []float32) []float64 {
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = math.Max(mx, float64(l))
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l) - mx)
	}
	norm := mx + math.Log(sum)
	out := make([]float64, len(logits))
	for i, l := range logits {
		out[i] = float64(l) - norm
	}
	return out
}

// TestGreedyLogprobsAreTheLogSoftmaxOfTheLogits: with greedy sampling the
// filter chain keeps every token, so the reported log-probabilities are
// the log-softmax of the raw logits read from the context, the top list is
// the n best of them in order, and the drawn token is the first.
func TestGreedyLogprobsAreTheLogSoftmaxOfTheLogits(t *testing.T) {
	for _, model := range []string{testmodel.TinyStories656K, testmodel.Stories260K} {
		t.Run(model, func(t *testing.T) {
			m, err := llama.LoadModel(context.Background(), testmodel.Path(t, model))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 256, NBatch: 256, NSeqMax: 1, Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer ctx.Close()
			s, err := llama.NewSampler(m, llama.SamplerParams{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			toks, err := m.Tokenize("Once upon a time", true, true)
			if err != nil {
				t.Fatal(err)
			}
			var b llama.Batch
			for i, tok := range toks {
				b.Add(tok, i, 0, i == len(toks)-1)
			}
			const nTop = 20
			const tol = 1e-4
			var top []llama.TokenLogprob
			pos := len(toks)
			for step := range 24 {
				if err := ctx.Decode(&b); err != nil {
					t.Fatal(err)
				}
				want := logSoftmax(ctx.Logits(b.Len() - 1))
				var tok llama.Token
				var chosen float32
				tok, chosen, top, err = s.SampleLogprobs(ctx, b.Len()-1, nTop, top)
				if err != nil {
					t.Fatal(err)
				}
				if d := math.Abs(float64(chosen) - want[tok]); d > tol {
					t.Fatalf("step %d: token %d has logprob %g, the logits give %g", step, tok, chosen, want[tok])
				}
				ids := make([]int, len(want))
				for i := range ids {
					ids[i] = i
				}
				sort.SliceStable(ids, func(a, b int) bool { return want[ids[a]] > want[ids[b]] })
				if len(top) != nTop {
					t.Fatalf("step %d: %d alternatives, want %d", step, len(top), nTop)
				}
				if top[0].Token != tok || top[0].Logprob != chosen {
					t.Fatalf("step %d: greedy drew %d (%g), but the most likely is %v", step, tok, chosen, top[0])
				}
				for j, a := range top {
					if j > 0 && a.Logprob > top[j-1].Logprob {
						t.Fatalf("step %d: alternatives not sorted: %v", step, top)
					}
					if d := math.Abs(float64(a.Logprob) - want[a.Token]); d > tol {
						t.Fatalf("step %d: alternative %d (token %d) has logprob %g, the logits give %g", step, j, a.Token, a.Logprob, want[a.Token])
					}
					// Ties aside, the j-th alternative is the j-th best logit.
					if d := math.Abs(float64(a.Logprob) - want[ids[j]]); d > tol {
						t.Fatalf("step %d: alternative %d is token %d (%g); the %d-th best logit is token %d (%g)", step, j, a.Token, a.Logprob, j, ids[j], want[ids[j]])
					}
				}
				b.Reset()
				b.Add(tok, pos, 0, true)
				pos++
			}
		})
	}
}

// TestSampledLogprobsFollowTheFilters: with a temperature the logprobs are
// those of the truncated, tempered distribution: only top_k candidates,
// summing to one, and the drawn token among them.
func TestSampledLogprobsFollowTheFilters(t *testing.T) {
	m, err := llama.LoadModel(context.Background(), testmodel.Path(t, testmodel.TinyStories656K))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 256, NBatch: 256, NSeqMax: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	s, err := llama.NewSampler(m, llama.SamplerParams{Temperature: 0.7, TopK: 5, Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	toks, _ := m.Tokenize("Once upon a time", true, true)
	var b llama.Batch
	for i, tok := range toks {
		b.Add(tok, i, 0, i == len(toks)-1)
	}
	if err := ctx.Decode(&b); err != nil {
		t.Fatal(err)
	}
	logits := ctx.Logits(b.Len() - 1)
	tok, chosen, top, err := s.SampleLogprobs(ctx, b.Len()-1, 20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 5 {
		t.Fatalf("%d alternatives with top_k 5, want 5: %v", len(top), top)
	}
	var sum float64
	found := false
	kept := make([]float32, len(top))
	for j, a := range top {
		sum += math.Exp(float64(a.Logprob))
		found = found || (a.Token == tok && a.Logprob == chosen)
		kept[j] = logits[a.Token] / 0.7
	}
	if math.Abs(sum-1) > 1e-4 || !found {
		t.Fatalf("top-5 probabilities sum to %g (want 1), drawn token %d (%g) in %v: %v", sum, tok, chosen, top, found)
	}
	want := logSoftmax(kept)
	for j, a := range top {
		if math.Abs(float64(a.Logprob)-want[j]) > 1e-4 {
			t.Fatalf("alternative %d: %g, the tempered top-5 logits give %g", j, a.Logprob, want[j])
		}
	}
}
