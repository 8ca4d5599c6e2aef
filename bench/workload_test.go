package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSharedPrefix(t *testing.T) {
	spec := RandomSpec{N: 8, InputLen: 20, SharedPrefixLen: 30, Seed: 3}
	ps, err := RandomPrompts(context.Background(), Words{}, spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 8 {
		t.Fatalf("got %d prompts, want 8", len(ps))
	}
	prefix := ps[0].Messages[0].Content
	bodies := map[string]bool{}
	for i, p := range ps {
		if len(p.Messages) != 2 || p.Messages[0].Role != "system" || p.Messages[1].Role != "user" {
			t.Fatalf("prompt %d: messages %+v, want system + user", i, p.Messages)
		}
		if p.Messages[0].Content != prefix {
			t.Errorf("prompt %d: prefix differs from prompt 0's", i)
		}
		if n := len(strings.Fields(p.Messages[1].Content)); n != 20 {
			t.Errorf("prompt %d: %d words after the prefix, want 20", i, n)
		}
		if p.Tokens != 50 {
			t.Errorf("prompt %d: Tokens = %d, want 30 + 20", i, p.Tokens)
		}
		if !strings.HasPrefix(p.Text(), prefix+"\n") {
			t.Errorf("prompt %d: Text does not start with the prefix", i)
		}
		bodies[p.Messages[1].Content] = true
	}
	if n := len(strings.Fields(prefix)); n != 30 {
		t.Errorf("prefix has %d words, want 30", n)
	}
	if len(bodies) != 8 {
		t.Errorf("%d distinct bodies among 8 prompts", len(bodies))
	}

	again, err := RandomPrompts(context.Background(), Words{}, spec)
	if err != nil {
		t.Fatal(err)
	}
	if again[5].Text() != ps[5].Text() {
		t.Error("the same seed gave different prompts")
	}
}

// syllables counts one token per started three letters of each word, a
// stand-in for a subword tokenizer whose ratio is not one per word.
type syllables struct{ calls int }

func (s *syllables) CountTokens(_ context.Context, text string) (int, error) {
	s.calls++
	n := 0
	for _, w := range strings.Fields(text) {
		n += (len(w) + 2) / 3
	}
	return n, nil
}

func TestRandomPromptsFitTokenizer(t *testing.T) {
	tok := &syllables{}
	ps, err := RandomPrompts(context.Background(), tok, RandomSpec{N: 50, InputLen: 64, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range ps {
		n, _ := tok.CountTokens(context.Background(), p.Text())
		if n != p.Tokens {
			t.Errorf("prompt %d: Tokens = %d, but the text has %d", i, p.Tokens, n)
		}
		// A word is at most 3 tokens here, so a fit is within 2.
		if p.Tokens < 62 || p.Tokens > 66 {
			t.Errorf("prompt %d: %d tokens, want 64 ± 2", i, p.Tokens)
		}
	}
}

func TestRandomPromptsBadSpec(t *testing.T) {
	for _, spec := range []RandomSpec{{N: 0, InputLen: 5}, {N: 1, InputLen: 0}, {N: 1, InputLen: 5, SharedPrefixLen: -1}} {
		if _, err := RandomPrompts(context.Background(), Words{}, spec); err == nil {
			t.Errorf("RandomPrompts(%+v) succeeded, want error", spec)
		}
	}
}

func TestReadDataset(t *testing.T) {
	in := `{"prompt": "Once upon a time"}

{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]}
`
	ps, err := ReadDataset(strings.NewReader(in), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 {
		t.Fatalf("got %d prompts, want 2", len(ps))
	}
	if got := ps[0].Messages; len(got) != 1 || got[0].Role != "user" || got[0].Content != "Once upon a time" {
		t.Errorf("prompt line: messages %+v", got)
	}
	if ps[0].Tokens != 4 {
		t.Errorf("prompt line: Tokens = %d, want 4 words", ps[0].Tokens)
	}
	if got := ps[1].Text(); got != "Be brief.\nHi there" {
		t.Errorf("messages line: Text = %q", got)
	}

	withPrefix, err := ReadDataset(strings.NewReader(in), "shared system words")
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range withPrefix {
		if p.Messages[0].Role != "system" || p.Messages[0].Content != "shared system words" {
			t.Errorf("prompt %d: first message %+v, want the shared prefix", i, p.Messages[0])
		}
	}
	if withPrefix[0].Tokens != 7 {
		t.Errorf("prefixed prompt: Tokens = %d, want 3 + 4", withPrefix[0].Tokens)
	}
}

func TestReadDatasetErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"prompt": "ok"}` + "\n" + `{"prompt": "unterminated`, "line 2:"},
		{`{"prompt": 5}`, "line 1:"},
		{`{"text": "neither"}`, `line 1: want "prompt" or a non-empty "messages"`},
		{`{"messages": []}`, `line 1: want "prompt" or a non-empty "messages"`},
		{`{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}`, "both"},
		{`{"prompt": ""}`, `empty "prompt"`},
		{`{"messages": [{"content": "no role"}]}`, `message 0 has no "role"`},
		{`{"prompt": "a"} {"prompt": "b"}`, "more than one JSON value"},
		{`[1, 2]`, "line 1:"},
	} {
		_, err := ReadDataset(strings.NewReader(tc.in), "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadDataset(%q) error %v, want it to mention %q", tc.in, err, tc.want)
		}
	}
	if _, err := ReadDataset(strings.NewReader("\n\n"), ""); !errors.Is(err, ErrEmptyDataset) {
		t.Errorf("blank file: error %v, want ErrEmptyDataset", err)
	}
}

func TestLoadDataset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.jsonl")
	if err := os.WriteFile(path, []byte(`{"prompt": "x"}`+"\n"+`oops`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadDataset(path, "")
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("error %v, want the path and line 2", err)
	}
	if _, err := LoadDataset(filepath.Join(t.TempDir(), "missing.jsonl"), ""); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: error %v, want ErrNotExist", err)
	}
}
