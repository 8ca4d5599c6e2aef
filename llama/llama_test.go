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
	cases := []struct {
		model, prompt string
		n             int
		want          string
	}{
		{testmodel.Stories260K, "Once upon a time", 60, ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\nLily"},
		{testmodel.Stories260K, "Hello", 16, " was a big, red ball. He was very excit"},
		{testmodel.Stories260K, "The little dog", 48, " was a little girl named Lily. She loved to play with her toys and her toys. One day, she saw a big box with a big box. It was a big,"},
		{testmodel.TinyStories656K, "Once upon a time", 32, ", a little girl named Lily lived in a small house. She loved to eat yummy food. One day, she saw a small bird on the ground. The bird was sad because it could not eat it.\nLily wanted to help the bird. She tried to eat the food and "},
		{testmodel.TinyStories656K, "Hello", 16, " and a girl were walking in the park. One day she saw a small bird flying in the sk"},
		{testmodel.TinyStories656K, "The little dog", 48, "was in a big forest. He liked to run and jump all day long. He liked to run and jump and play with his friends. One day, he saw a small bird flying in the sky. He wanted to be friends with it, but he was scared. He tried to jump and reach the bird, but he could not reach the bird"},
	}
	for _, c := range cases {
		m, err := llama.LoadModel(testmodel.Path(t, c.model))
		if err != nil {
			t.Fatal(err)
		}
		got := generate(t, m, c.prompt, c.n)
		m.Close()
		if got != c.want {
			t.Errorf("%s %q: got %q, want %q", c.model, c.prompt, got, c.want)
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
