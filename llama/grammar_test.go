package llama_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

func loadModel(t *testing.T, name string) *llama.Model {
	t.Helper()
	m, err := llama.LoadModel(context.Background(), testmodel.Path(t, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// accept feeds text to s token by token (Pieces.Split's tokens).
func accept(t *testing.T, m *llama.Model, s *llama.Sampler, text string) {
	t.Helper()
	toks, n := m.Pieces().Split([]byte(text), len(text), nil)
	if n != len(text) {
		t.Fatalf("the vocabulary writes only %q of %q", text[:n], text)
	}
	for _, tok := range toks {
		if err := s.Accept(tok); err != nil {
			t.Fatalf("accept %q: %v", m.AppendPiece(nil, tok, true), err)
		}
	}
}

// Forced is the text a grammar leaves no choice about, from where the
// answer is; it stops at a choice of characters, of ending, or a range.
func TestForcedText(t *testing.T) {
	m := loadModel(t, testmodel.Stories260K)
	const g = `root ::= "<call>\n{" ws "\"name\"" ws ":" ws ("\"a\"" | "\"b\"") "}" [0-9] "é!" "\n" "x"?
ws ::= "" | " "`
	s, err := llama.NewSampler(m, llama.SamplerParams{Grammar: g})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, step := range []struct{ accept, want string }{
		{"", "<call>\n{"},
		{"<call>\n{", ""}, // a space or not
		{" ", `"name"`},
		{`"na`, `me"`},
		{`me" :`, ""},
		{` "`, ""}, // a or b
		{`a`, `"}`},
		{`"}`, ""},    // [0-9]
		{"7", "é!\n"}, // then x or the end
		{"é!\n", ""},
	} {
		accept(t, m, s, step.accept)
		if got := string(s.Forced(nil, 64)); got != step.want {
			t.Fatalf("after %q: forced %q, want %q", step.accept, got, step.want)
		}
		// Forced changes nothing: asked again, it says the same.
		if got := string(s.Forced(nil, 64)); got != step.want {
			t.Fatalf("after %q, asked again: forced %q, want %q", step.accept, got, step.want)
		}
	}
	// The bound is in bytes, and cuts no character in two.
	s2, err := llama.NewSampler(m, llama.SamplerParams{Grammar: `root ::= "aéb"`})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for limit, want := range []string{"", "a", "a", "aé", "aéb", "aéb"} {
		if got := string(s2.Forced([]byte("x"), limit)); got != "x"+want {
			t.Errorf("Forced(max %d) = %q, want %q", limit, got, "x"+want)
		}
	}
	if got := (&llama.Sampler{}).Forced(nil, 8); len(got) != 0 {
		t.Errorf("no grammar: forced %q", got)
	}
}

// Accept refuses a token the grammar does not allow and then changes
// nothing; an allowed one moves the grammar on.
func TestAcceptChecksTheGrammar(t *testing.T) {
	m := loadModel(t, testmodel.Stories260K)
	s, err := llama.NewSampler(m, llama.SamplerParams{Grammar: `root ::= "ab" "c"`})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	x, _ := m.Pieces().Split([]byte("x"), 1, nil)
	if err := s.Accept(x[0]); !errors.Is(err, llama.ErrNotAllowed) {
		t.Fatalf("accept x: %v, want ErrNotAllowed", err)
	}
	if got := string(s.Forced(nil, 8)); got != "abc" {
		t.Fatalf("after a refused token: forced %q, want %q", got, "abc")
	}
	if err := s.Accept(m.EOS()); !errors.Is(err, llama.ErrNotAllowed) {
		t.Fatalf("accept EOS before the end: %v, want ErrNotAllowed", err)
	}
	accept(t, m, s, "ab")
	if got := string(s.Forced(nil, 8)); got != "c" {
		t.Fatalf("after ab: forced %q", got)
	}
}

// Pieces.Split writes text with the longest tokens, byte tokens only where
// no other token fits; Reach finds how much of a text a vocabulary can
// write at all.
func TestPieces(t *testing.T) {
	m := loadModel(t, testmodel.TinyStories656K)
	p := m.Pieces()
	text := []byte(" Once upon a time")
	toks, n := p.Split(text, 100, nil)
	if n != len(text) {
		t.Fatalf("split covers %d of %d bytes", n, len(text))
	}
	var got []byte
	for _, tok := range toks {
		got = m.AppendPiece(got, tok, true)
	}
	want, _ := m.Tokenize("Once upon a time", false, false)
	if string(got) != string(text) || len(toks) != len(want) {
		t.Fatalf("split %v (%q), the tokenizer's %v", toks, got, want)
	}
	if toks, n := p.Split(text, 2, nil); len(toks) != 2 || n >= len(text) {
		t.Fatalf("max 2: %v covering %d", toks, n)
	}
	// tinystories-656k has no "{", not even as a byte.
	for _, tc := range []struct {
		text string
		want int
	}{{"", 0}, {"a b", 3}, {"{", 0}, {"ab{c", 2}, {"ab", 2}, {`a"`, 2}} {
		if got := p.Reach([]byte(tc.text)); got != tc.want {
			t.Errorf("Reach(%q) = %d, want %d", tc.text, got, tc.want)
		}
	}
	if toks, n := p.Split([]byte("ab{c"), 10, nil); n != 2 || len(toks) == 0 {
		t.Errorf("split of ab{c: %v covering %d bytes, want 2", toks, n)
	}
}

// A grammar whose required start the vocabulary cannot write fails at
// once, naming the text; one that gets stuck later fails at the sample
// that cannot continue it, naming the text it needed.
func TestUnwritableGrammars(t *testing.T) {
	m := loadModel(t, testmodel.TinyStories656K)
	for _, tc := range []struct{ grammar, reason string }{
		{`root ::= "<tool_call>\n{" [a-z]+ "}"`, `no token writes the start of "{", which the grammar requires after "<tool_call>\n"`},
		{`root ::= "a{" [a-z]*`, `no token writes the start of "{", which the grammar requires after "a"`},
		{`root ::= "{" [a-z]*`, `no token writes the start of "{", the text the grammar starts with`},
		{`root ::= "ééé" | "{"`, "no token of the vocabulary can start it"},
	} {
		_, err := llama.NewSampler(m, llama.SamplerParams{Grammar: tc.grammar})
		var ue *llama.UnwritableError
		if !errors.As(err, &ue) || !errors.Is(err, llama.ErrGrammarDead) || ue.Reason != tc.reason {
			t.Errorf("%s: NewSampler error %v, want ErrGrammarDead because %s", tc.grammar, err, tc.reason)
		}
	}

	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 256, NBatch: 64, NSeqMax: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	for _, temp := range []float32{0, 0.8} {
		s, err := llama.NewSampler(m, llama.SamplerParams{Grammar: `root ::= ("a" | "b") "{"`, Temperature: temp, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		toks, _ := m.Tokenize("Once upon a time", true, false)
		var b llama.Batch
		for i, tok := range toks {
			b.Add(tok, i, 0, i == len(toks)-1)
		}
		ctx.Clear()
		if err := ctx.Decode(&b); err != nil {
			t.Fatal(err)
		}
		tok, err := s.Sample(ctx, b.Len()-1)
		if piece := string(m.AppendPiece(nil, tok, false)); err != nil || (piece != "a" && piece != "b") {
			t.Fatalf("first token %q, %v", piece, err)
		}
		b.Reset()
		b.Add(tok, len(toks), 0, true)
		if err := ctx.Decode(&b); err != nil {
			t.Fatal(err)
		}
		_, err = s.Sample(ctx, 0)
		var ue *llama.UnwritableError
		if !errors.As(err, &ue) || !errors.Is(err, llama.ErrGrammarStuck) || !strings.Contains(ue.Reason, `"{"`) {
			t.Fatalf("temperature %g: second sample: %v, want ErrGrammarStuck naming \"{\"", temp, err)
		}
		s.Close()
	}
}

// GrammarAllows counts the tokens of a draft the grammar accepts one
// after another, up to the first it refuses or an end-of-generation
// token it accepts, and leaves the grammar where it was.
func TestGrammarAllowsADraftsPrefix(t *testing.T) {
	m := loadModel(t, testmodel.Stories260K)
	s, err := llama.NewSampler(m, llama.SamplerParams{Grammar: `root ::= "ab" [a-z ]* "."`})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	split := func(text string) []llama.Token {
		toks, n := m.Pieces().Split([]byte(text), len(text), nil)
		if n != len(text) {
			t.Fatalf("the vocabulary writes only %q of %q", text[:n], text)
		}
		return toks
	}
	draft := split("ab cd")
	ok := len(draft)
	draft = append(draft, split("X e.")...)
	if got := s.GrammarAllows(draft); got != ok {
		t.Errorf("%d tokens allowed of %q, want %d (up to the capital)", got, "ab cdX e.", ok)
	}
	if got := s.GrammarAllows(draft); got != ok {
		t.Errorf("asked again: %d, want %d: the grammar moved", got, ok)
	}
	accept(t, m, s, "a") // the grammar is where it was: "a" is still allowed first
	tail := split("b x.")
	eog := m.EOS()
	if got := s.GrammarAllows(append(tail, eog, tail[0])); got != len(tail)+1 {
		t.Errorf("%d allowed of %q, end, more; want %d (the end ends the count)", got, "b x.", len(tail)+1)
	}
	if got := s.GrammarAllows(append(split("b x"), eog)); got != len(split("b x")) {
		t.Errorf("the end before the grammar allows it: %d allowed, want %d", got, len(split("b x")))
	}
	if got := (&llama.Sampler{}).GrammarAllows(draft); got != len(draft) {
		t.Errorf("no grammar: %d of %d allowed", got, len(draft))
	}
}
