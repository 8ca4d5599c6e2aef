package llama_test

import (
	"errors"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

// generate runs a raw greedy loop over the binding: one sequence, the
// prompt in one batch, then one token per Decode.
func generate(t testing.TB, m *llama.Model, prompt string, n int) string {
	t.Helper()
	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 512, NBatch: 512, NSeqMax: 1, Threads: 1})
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
	var out []byte
	pos := len(toks)
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
	return string(out)
}

func TestGoldenRawLoop(t *testing.T) {
	for _, c := range testmodel.Goldens {
		m, err := llama.LoadModel(testmodel.Path(t, c.Model))
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

func TestTokenizeUnknownCharacterIsAnError(t *testing.T) {
	// tinystories-656k has no byte-fallback tokens: llama.cpp throws for
	// characters outside its vocabulary. That must be an error, not an abort.
	m, err := llama.LoadModel(testmodel.Path(t, testmodel.TinyStories656K))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Tokenize("{", true, true); !errors.Is(err, llama.ErrTokenize) {
		t.Fatalf("got %v, want ErrTokenize", err)
	}
	if toks, err := m.Tokenize("Hello", true, true); err != nil || len(toks) == 0 {
		t.Fatalf("model unusable after a failed tokenize: %v %v", toks, err)
	}
}
