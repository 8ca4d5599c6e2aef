package llama_test

import (
	"context"
	"slices"
	"testing"

	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/llama"
)

// Token types of tokenizer.ggml.token_type that llama.cpp can split out of
// text before tokenizing the rest: unknown, control and user-defined.
const (
	typeUnknown     = 2
	typeControl     = 3
	typeUserDefined = 4
)

// TestVocabFragmentsMatchLlamaCpp compares corral's own tokenization path
// (split at special-token text in Go, then tokenize each run of text with
// llama.cpp; chat prompts whose client text holds special-token text take
// it) with llama_tokenize itself, over the test strings of llama.cpp's
// vocabularies wrapped in each vocabulary's special tokens, with and
// without adding and parsing special tokens: they must agree token for
// token.
func TestVocabFragmentsMatchLlamaCpp(t *testing.T) {
	var texts []string
	for _, name := range append(slices.Clone(testsynth.VocabTested), "baichuan", "gpt-neox") {
		t.Run(name, func(t *testing.T) {
			path, vocab, cases := testsynth.Vocab(t, name)
			if texts == nil {
				for _, c := range cases {
					texts = append(texts, c.Text)
				}
			}
			if len(texts) == 0 {
				t.Fatal("no test strings")
			}
			m, err := llama.LoadModel(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			specials := specialTexts(vocab.KV["tokenizer.ggml.tokens"].([]string), vocab.KV["tokenizer.ggml.token_type"].([]int32))
			agree, total := 0, 0
			for i, s := range texts {
				for _, text := range wrapSpecial(s, specials, i) {
					for _, o := range []llama.TokenizeOptions{{}, {ParseSpecial: true}, {AddSpecial: true}, {AddSpecial: true, ParseSpecial: true}} {
						total++
						want, err := m.Tokenize(text, o.AddSpecial, o.ParseSpecial)
						if err != nil {
							t.Fatalf("llama_tokenize %q: %v", text, err)
						}
						got, err := m.TokenizeFragments(text, o)
						if err != nil {
							t.Errorf("%q %+v: %v", text, o, err)
							continue
						}
						if slices.Equal(got, want) {
							agree++
						} else if total-agree <= 5 {
							t.Errorf("%q %+v:\ngo   %v\nllama.cpp %v", text, o, got, want)
						}
					}
				}
			}
			if agree != total {
				t.Errorf("%s: corral's path agrees with llama_tokenize on %d of %d", name, agree, total)
			} else {
				t.Logf("%s: corral's path agrees with llama_tokenize on %d of %d", name, agree, total)
			}
		})
	}
}

// specialTexts returns the texts of up to four control or unknown tokens
// and two user-defined ones, spread over the vocabulary.
func specialTexts(tokens []string, types []int32) []string {
	var ctrl, user []string
	for i, typ := range types {
		switch typ {
		case typeControl, typeUnknown:
			ctrl = append(ctrl, tokens[i])
		case typeUserDefined:
			user = append(user, tokens[i])
		}
	}
	return append(spread(ctrl, 4), spread(user, 2)...)
}

// spread returns up to n elements of s, evenly spaced.
func spread(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	out := make([]string, n)
	for i := range out {
		out[i] = s[i*(len(s)-1)/(n-1)]
	}
	return out
}

// wrapSpecial returns s, and s next to the i-th and next special-token
// texts (round the list), with and without whitespace around them.
func wrapSpecial(s string, specials []string, i int) []string {
	a, b := specials[i%len(specials)], specials[(i+1)%len(specials)]
	return []string{
		s,
		a + s + b,
		a + "\n" + s + " " + b + "\n\n " + s,
		" " + a + "  " + s + "\t" + b + " ",
	}
}
