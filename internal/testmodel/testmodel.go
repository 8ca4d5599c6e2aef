// Package testmodel finds the GGUF models that tests load.
//
// The models live in ../shared/models relative to the repository root; the
// environment variable CORRAL_TEST_MODELS overrides that folder. When a model is
// missing the test fails (it never skips): CI must have the models.
package testmodel

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// The test models (see ../shared/models/SOURCES.md).
const (
	// Stories260K is an F32 llama model with a 512-token SPM vocab, ctx 2048.
	Stories260K = "stories260K.gguf"
	// TinyStories656K is a Q8_0 llama model with a 2048-token vocab, ctx 512.
	TinyStories656K = "tinystories-656k-q8_0.gguf"
)

// Dir returns the folder holding the test models.
func Dir() string {
	if d := os.Getenv("CORRAL_TEST_MODELS"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	return filepath.Join(root, "..", "shared", "models")
}

// Path returns the path of the named model, failing t when it is missing.
func Path(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(Dir(), name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("test model %s missing (set CORRAL_TEST_MODELS or provide ../shared/models): %v", name, err)
	}
	return p
}
