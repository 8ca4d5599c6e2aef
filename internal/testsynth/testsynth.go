// Package testsynth writes synthetic models for tests that need a
// vocabulary the shared test models do not have. (It is apart from
// testmodel, which package gguf's own tests import.)
package testsynth

import (
	"path/filepath"
	"testing"

	"github.com/corral-llm/corral/gguf"
)

// ChatML writes a tiny synthetic model whose vocabulary ends with the
// control tokens <|im_start|> and <|im_end|> (ids vocabSize-2 and
// vocabSize-1) into a temporary folder of t, and returns its path.
func ChatML(t testing.TB) (path string, vocabSize int) {
	t.Helper()
	shape, err := gguf.ParseShape("tiny,chatml=true")
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "chatml.gguf")
	if err := gguf.WriteSynthetic(path, shape, 1); err != nil {
		t.Fatal(err)
	}
	return path, shape.Vocab
}
