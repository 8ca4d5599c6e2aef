package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testsynth"
)

// cleansSpaces are the vocabularies whose decoding, in llama.cpp as in
// Hugging Face's tokenizers (clean_up_tokenization_spaces), drops the space
// before some punctuation and contractions: llama.cpp's vocabularies of
// type BPE with an older pre-tokenizer, and WordPiece.
var cleansSpaces = map[string]bool{
	"gpt-2": true, "falcon": true, "mpt": true, "starcoder": true, "refact": true, "bert-bge": true,
}

// cleanedSpaces are the character pairs whose space such a decoding drops.
var cleanedSpaces = []string{" ?", " !", " .", " ,", " ' ", " 's", " 'm", " 're", " 've"}

// TestVocabTokenize serves a tiny synthetic model with each of llama.cpp's
// test vocabularies and checks that POST /tokenize, without special tokens
// and without parsing special-token text (as llama.cpp's test-tokenizer-0
// tokenizes), gives the token ids llama.cpp's tests expect for every test
// string; and that POST /detokenize of those ids gives the text back,
// where the vocabulary's decoding keeps every character: not WordPiece
// (bert-bge lower-cases and strips accents), and not where the decoding
// cleans spaces.
func TestVocabTokenize(t *testing.T) {
	for _, name := range testsynth.VocabTested {
		t.Run(name, func(t *testing.T) {
			model, vocab, cases := testsynth.Vocab(t, name)
			ts := startModel(t, model, engine.Config{Parallel: 1})
			if ts.Info.VocabSize != vocab.VocabSize {
				t.Fatalf("served vocabulary of %d tokens, the file has %d", ts.Info.VocabSize, vocab.VocabSize)
			}
			matched, roundTrips, decodable := 0, 0, 0
			for i, c := range cases {
				resp, b := ts.Post(t, "/tokenize", map[string]any{"content": c.Text, "add_special": false, "parse_special": false})
				if resp.StatusCode != 200 {
					t.Errorf("string %d %q: /tokenize: %d %s", i+1, c.Text, resp.StatusCode, b)
					continue
				}
				var tok struct{ Tokens []int32 }
				if err := json.Unmarshal(b, &tok); err != nil {
					t.Fatalf("/tokenize: %v: %s", err, b)
				}
				if slices.Equal(tok.Tokens, c.Tokens) {
					matched++
				} else {
					t.Errorf("string %d %q:\ngot  %v\nwant %v", i+1, c.Text, tok.Tokens, c.Tokens)
				}
				if name == "bert-bge" || cleansSpaces[name] && slices.ContainsFunc(cleanedSpaces, func(s string) bool { return strings.Contains(c.Text, s) }) {
					continue
				}
				decodable++
				resp, b = ts.Post(t, "/detokenize", map[string]any{"tokens": c.Tokens})
				var detok struct{ Content *string }
				if resp.StatusCode != 200 || json.Unmarshal(b, &detok) != nil || detok.Content == nil {
					t.Errorf("string %d %q: /detokenize: %d %s", i+1, c.Text, resp.StatusCode, b)
					continue
				}
				if *detok.Content == c.Text {
					roundTrips++
				} else {
					t.Errorf("string %d %q: /detokenize of %v gives %q", i+1, c.Text, c.Tokens, *detok.Content)
				}
			}
			if len(cases) == 0 {
				t.Fatalf("%s has no test strings", name)
			}
			summary := fmt.Sprintf("%s: %d/%d strings tokenize as llama.cpp expects", name, matched, len(cases))
			if decodable > 0 {
				summary += fmt.Sprintf("; %d/%d detokenize to the text", roundTrips, decodable)
			}
			t.Log(summary)
		})
	}
}
