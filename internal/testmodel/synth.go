package testmodel

import (
	"path/filepath"
	"testing"

	"github.com/corral-llm/corral/gguf"
)

// SynthVocab is the vocabulary-only GGUF (in ../shared/vocab) whose
// tokenizer the synthetic golden model takes: GPT-2's byte-level BPE,
// whose pieces are text, unlike the synthetic vocabulary's byte tokens
// (llama-server b10573 fails a completion whose bytes are not UTF-8).
const SynthVocab = "ggml-vocab-gpt-2.gguf"

// Synth writes the synthetic model of gguf.Shapes[shape] with seed 1 and
// SynthVocab's tokenizer (the model SynthGoldens come from, as
// corral synth --shape SHAPE --seed 1 --vocab writes it) into t's
// temporary folder and returns its path. Use it for small shapes ("tiny"):
// the file is written per test.
func Synth(t testing.TB, shape string) string {
	t.Helper()
	s, ok := gguf.Shapes[shape]
	if !ok {
		t.Fatalf("testmodel: no shape %q", shape)
	}
	vocab := filepath.Join(Dir(), "..", "vocab", SynthVocab)
	md, err := gguf.ReadMetadata(vocab)
	if err != nil {
		t.Fatalf("testmodel: synthetic model's vocabulary: %v", err)
	}
	p := filepath.Join(t.TempDir(), "synth-"+shape+".gguf")
	if err := gguf.WriteSyntheticOptions(p, s, 1, gguf.SynthOptions{Tokenizer: md}); err != nil {
		t.Fatalf("testmodel: write synthetic %s: %v", shape, err)
	}
	return p
}
