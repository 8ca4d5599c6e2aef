package engine_test

import (
	"context"
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

// collectLogprobs reads a stream to the end, with its logprobs entries.
// It checks that every entry arrives with its token's first byte: by the
// chunk that carries it, the text received is longer than the text of
// the entries before it.
func collectLogprobs(t testing.TB, s *engine.Stream) (string, []engine.TokenLogprobs, engine.Result) {
	t.Helper()
	var b strings.Builder
	var lps []engine.TokenLogprobs
	start := 0 // where the next entry's text begins
	for {
		c, err := s.Recv(context.Background())
		if errors.Is(err, io.EOF) {
			return b.String(), lps, s.Result()
		}
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(c.Text)
		for _, e := range c.Logprobs {
			if start >= b.Len() && e.Text != "" {
				t.Fatalf("entry %d (%q) starts at byte %d, delivered with text %q", len(lps), e.Text, start, b.String())
			}
			start += len(e.Text)
			lps = append(lps, e)
		}
	}
}

// rawLogprobs runs greedy decoding of prompt over the binding, returning
// each step's token and the log-softmax of its logits.
func rawLogprobs(t *testing.T, model, prompt string, n int) ([]llama.Token, [][]float64) {
	t.Helper()
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
	toks, err := m.Tokenize(prompt, true, true)
	if err != nil {
		t.Fatal(err)
	}
	var b llama.Batch
	for i, tok := range toks {
		b.Add(tok, i, 0, i == len(toks)-1)
	}
	var out []llama.Token
	var lps [][]float64
	for pos := len(toks); len(out) < n; pos++ {
		if err := ctx.Decode(&b); err != nil {
			t.Fatal(err)
		}
		logits := ctx.Logits(b.Len() - 1)
		mx := math.Inf(-1)
		for _, l := range logits {
			mx = math.Max(mx, float64(l))
		}
		var sum float64
		for _, l := range logits {
			sum += math.Exp(float64(l) - mx)
		}
		lp := make([]float64, len(logits))
		for i, l := range logits {
			lp[i] = float64(l) - mx - math.Log(sum)
		}
		tok, err := s.Sample(ctx, b.Len()-1)
		if err != nil {
			t.Fatal(err)
		}
		out, lps = append(out, tok), append(lps, lp)
		b.Reset()
		b.Add(tok, pos, 0, true)
	}
	return out, lps
}

// TestGreedyLogprobsMatchTheLogits: through the scheduler, with other
// requests in the batch, a greedy request's entries are one per generated
// token, their texts are the output, and their values are the log-softmax
// of the logits a plain loop over the binding reads from its context.
func TestGreedyLogprobsMatchTheLogits(t *testing.T) {
	g := goldens[3] // TinyStories656K, "Once upon a time"
	e := newEngine(t, g.Model, engine.Config{Parallel: 3})
	const nTop = 5
	req := greedy(g.Prompt, g.N)
	req.Logprobs, req.TopLogprobs = true, nTop
	others := []*engine.Stream{submit(t, e, greedy("The little dog", g.N)), submit(t, e, greedy("Hello", g.N))}
	text, lps, res := collectLogprobs(t, submit(t, e, req))
	for _, s := range others {
		collect(t, s)
	}
	if text != g.Want || len(lps) != res.Usage.CompletionTokens || len(lps) != g.N {
		t.Fatalf("got %q with %d entries for %d tokens, want %q and %d", text, len(lps), res.Usage.CompletionTokens, g.Want, g.N)
	}
	toks, want := rawLogprobs(t, g.Model, g.Prompt, g.N)
	var joined strings.Builder
	const tol = 1e-3 // batched and alone differ in the last bits
	for i, en := range lps {
		joined.WriteString(en.Text)
		if en.Token != toks[i] {
			t.Fatalf("entry %d: token %d, the plain loop drew %d", i, en.Token, toks[i])
		}
		if d := math.Abs(float64(en.Logprob) - want[i][en.Token]); d > tol {
			t.Fatalf("entry %d: logprob %g, the logits give %g", i, en.Logprob, want[i][en.Token])
		}
		if len(en.Top) != nTop || en.Top[0].Token != en.Token || en.Top[0].Logprob != en.Logprob {
			t.Fatalf("entry %d: greedy token %d (%g) is not the first of %v", i, en.Token, en.Logprob, en.Top)
		}
		for j, a := range en.Top {
			if j > 0 && a.Logprob > en.Top[j-1].Logprob {
				t.Fatalf("entry %d: alternatives not sorted: %v", i, en.Top)
			}
			if d := math.Abs(float64(a.Logprob) - want[i][a.Token]); d > tol {
				t.Fatalf("entry %d: alternative %d (token %d) has %g, the logits give %g", i, j, a.Token, a.Logprob, want[i][a.Token])
			}
		}
	}
	if joined.String() != text {
		t.Fatalf("entry texts join to %q, the output is %q", joined.String(), text)
	}
}

// TestLogprobsStopAtTheStopString: tokens whose text begins at or after a
// matched stop string have no entry; those before it do, and a request
// without Logprobs gets none.
func TestLogprobsStopAtTheStopString(t *testing.T) {
	g := goldens[3]
	e := newEngine(t, g.Model, engine.Config{Parallel: 2})
	const stop = " bird"
	before, _, _ := strings.Cut(g.Want, stop)
	req := greedy(g.Prompt, g.N)
	req.Stop = []string{"a dragon", stop} // "a" is held at times
	req.Logprobs = true
	text, lps, res := collectLogprobs(t, submit(t, e, req))
	if text != before || res.StopWord != stop {
		t.Fatalf("got %q (stop %q), want %q", text, res.StopWord, before)
	}
	var joined strings.Builder
	for _, en := range lps {
		if joined.Len() >= len(text) {
			t.Fatalf("entry %q begins at byte %d, after the text %q", en.Text, joined.Len(), text)
		}
		if en.Top != nil {
			t.Fatalf("alternatives %v with TopLogprobs 0", en.Top)
		}
		joined.WriteString(en.Text)
	}
	if !strings.HasPrefix(joined.String(), text) || len(lps) >= res.Usage.CompletionTokens {
		t.Fatalf("entries %q for %d tokens, output %q", joined.String(), res.Usage.CompletionTokens, text)
	}
	req.Logprobs = false
	if _, lps, _ := collectLogprobs(t, submit(t, e, req)); lps != nil {
		t.Fatalf("%d entries without Logprobs", len(lps))
	}
}

func TestBadLogprobs(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	for _, req := range []engine.Request{
		{Prompt: "Hi", Logprobs: true, TopLogprobs: -1},
		{Prompt: "Hi", Logprobs: true, TopLogprobs: engine.MaxTopLogprobs + 1},
		{Prompt: "Hi", Logprobs: true, Chunking: &engine.Chunking{}},
	} {
		if _, err := e.Submit(context.Background(), req); !errors.Is(err, engine.ErrBadLogprobs) {
			t.Errorf("%+v: err %v, want ErrBadLogprobs", req, err)
		}
	}
	waitIdle(t, e)
}
