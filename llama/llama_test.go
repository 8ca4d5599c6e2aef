package llama_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/llama"
)

// generate runs a raw greedy loop over the binding: one sequence, the
// prompt in one batch, then one token per Decode.
func generate(t testing.TB, m *llama.Model, prompt string, n int) string {
	t.Helper()
	out, _ := generateWith(t, m, prompt, n, llama.SamplerParams{})
	return out
}

// promptBatch is the batch that evaluates prompt (with the model's
// special tokens) at positions 0… of sequence 0, logits for the last
// token, and the prompt's length in tokens.
func promptBatch(t testing.TB, m *llama.Model, prompt string) (llama.Batch, int) {
	t.Helper()
	toks, err := m.Tokenize(prompt, true, true)
	if err != nil {
		t.Fatal(err)
	}
	var b llama.Batch
	for i, tok := range toks {
		b.Add(tok, i, 0, i == len(toks)-1)
	}
	return b, len(toks)
}

// generateWith is generate with the sampler p; it also returns how often
// the sampler ran a grammar over the whole vocabulary.
func generateWith(t testing.TB, m *llama.Model, prompt string, n int, p llama.SamplerParams) (string, int) {
	t.Helper()
	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 512, NBatch: 512, NSeqMax: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	s, err := llama.NewSampler(m, p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, pos := promptBatch(t, m, prompt)
	var out []byte
	for range n {
		if err := ctx.Decode(&b); err != nil {
			t.Fatal(err)
		}
		tok, err := s.Sample(ctx, b.Len()-1)
		if err != nil {
			t.Fatal(err)
		}
		out = m.AppendPiece(out, tok, false)
		b.Reset()
		b.Add(tok, pos, 0, true)
		pos++
	}
	return string(out), s.Resampled
}

func TestGoldenRawLoop(t *testing.T) {
	for _, c := range testmodel.Goldens {
		m, err := llama.LoadModel(context.Background(), testmodel.Path(t, c.Model))
		if err != nil {
			t.Fatal(err)
		}
		got := generate(t, m, c.Prompt, c.N)
		m.Close()
		if got != c.Want {
			t.Errorf("%s %q: got %q, want %q", c.Model, c.Prompt, got, c.Want)
		}
	}
}

func TestTokenizeUnknownCharacterIsTheUnknownToken(t *testing.T) {
	// tinystories-656k has no byte-fallback tokens: llama.cpp throws for
	// characters outside its vocabulary. They become <unk> (id 0, which
	// this vocabulary marks as a control token), as SentencePiece does.
	m, err := llama.LoadModel(context.Background(), testmodel.Path(t, testmodel.TinyStories656K))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	toks, err := m.Tokenize("a{b", true, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) < 4 || toks[0] != m.BOS() || count(toks, 0) != 1 {
		t.Fatalf("\"a{b\" → %v, want BOS, a, <unk>, b", toks)
	}
	if toks, err := m.Tokenize("Hello", true, true); err != nil || len(toks) == 0 {
		t.Fatalf("model unusable afterwards: %v %v", toks, err)
	}
}

func TestLoadModelHonoursCancellation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := llama.LoadModel(ctx, testmodel.Path(t, testmodel.TinyStories656K)); !errors.Is(err, context.Canceled) {
		t.Fatalf("load with a cancelled context: %v, want context.Canceled", err)
	}
}

// TestGrammarChecksTheSampledTokenFirst: when the model's own choice fits
// the grammar, the grammar never runs over the whole vocabulary; when it
// does not, it does, and the output still follows the grammar.
func TestGrammarChecksTheSampledTokenFirst(t *testing.T) {
	g := testmodel.Goldens[3] // TinyStories656K, "Once upon a time"
	m, err := llama.LoadModel(context.Background(), testmodel.Path(t, g.Model))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	run := func(grammar string, n int) (string, int) {
		return generateWith(t, m, g.Prompt, n, llama.SamplerParams{Grammar: grammar})
	}
	// The golden continuation itself as the grammar: greedy always fits.
	want := g.Want
	lit := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(want)
	got, resampled := run(`root ::= "`+lit+`"`, 16)
	if !strings.HasPrefix(want, got) || got == "" {
		t.Fatalf("grammar of the golden text: got %q, want a prefix of %q", got, want)
	}
	if resampled != 0 {
		t.Fatalf("the grammar ran over the whole vocabulary %d times though every greedy token fit", resampled)
	}
	// A grammar the greedy choice does not fit: the full pass runs.
	got, resampled = run(`root ::= "the dog" [a-z ]*`, 6)
	if !strings.HasPrefix("the dog", got) && !strings.HasPrefix(got, "the dog") {
		t.Fatalf("forced text: got %q, want it to start with %q", got, "the dog")
	}
	if resampled == 0 {
		t.Fatal("the greedy token fit a grammar it cannot fit")
	}
}

// greedyTokens generates n[i] tokens greedily for each of prompts, all in
// one context: the prompts in one batch (one sequence each), then one
// token per unfinished sequence per Decode.
func greedyTokens(t testing.TB, m *llama.Model, prompts []string, n []int) [][]int32 {
	t.Helper()
	return greedyTokensWith(t, m, llama.SamplerParams{}, prompts, n)
}

// greedyTokensWith is greedyTokens with sampler settings sp (a logit
// bias) on top of greedy selection.
func greedyTokensWith(t testing.TB, m *llama.Model, sp llama.SamplerParams, prompts []string, n []int) [][]int32 {
	t.Helper()
	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 256 * len(prompts), NBatch: 256, NSeqMax: len(prompts), Threads: 1, Unified: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	out := make([][]int32, len(prompts))
	pos := make([]int, len(prompts))
	idx := make([]int, len(prompts)) // each sequence's output row in the batch
	samplers := make([]*llama.Sampler, len(prompts))
	var b llama.Batch
	for i, p := range prompts {
		s, err := llama.NewSampler(m, sp)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		samplers[i] = s
		toks, err := m.Tokenize(p, true, true)
		if err != nil {
			t.Fatal(err)
		}
		for j, tok := range toks {
			b.Add(tok, j, i, j == len(toks)-1)
		}
		pos[i], idx[i] = len(toks), b.Len()-1
	}
	for b.Len() > 0 {
		if err := ctx.Decode(&b); err != nil {
			t.Fatal(err)
		}
		var next llama.Batch
		for i := range prompts {
			if len(out[i]) == n[i] {
				continue
			}
			tok, err := samplers[i].Sample(ctx, idx[i])
			if err != nil {
				t.Fatal(err)
			}
			out[i] = append(out[i], tok)
			if len(out[i]) < n[i] {
				idx[i] = next.Len()
				next.Add(tok, pos[i], i, true)
				pos[i]++
			}
		}
		b = next
	}
	return out
}

// A synthetic model (random weights, a synthetic vocabulary) generates
// what llama-server b10573 generates, alone and with every prompt in the
// same passes (under 64 tokens each: see testmodel.Goldens).
func TestGoldenSynthetic(t *testing.T) {
	if len(testmodel.SynthGoldens) == 0 {
		t.Fatal("no synthetic goldens")
	}
	m, err := llama.LoadModel(context.Background(), testsynth.Golden(t, testmodel.SynthGoldens[0].Shape))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var prompts []string
	var n []int
	for _, g := range testmodel.SynthGoldens {
		got := greedyTokens(t, m, []string{g.Prompt}, []int{g.N})[0]
		if !slices.Equal(got, g.Want) {
			t.Errorf("alone, %q: got %v, want %v", g.Prompt, got, g.Want)
		}
		prompts, n = append(prompts, g.Prompt), append(n, g.N)
	}
	for i, got := range greedyTokens(t, m, prompts, n) {
		if g := testmodel.SynthGoldens[i]; !slices.Equal(got, g.Want) {
			t.Errorf("batched, %q: got %v, want %v", g.Prompt, got, g.Want)
		}
	}
}
