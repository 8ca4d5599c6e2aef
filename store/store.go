// Package store is corral's local model directory: models pulled from
// Hugging Face or a URL, listed, shown and removed by id (the file name
// without .gguf).
package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DefaultDir is the model directory: $CORRAL_MODELS when set, else
// "corral/models" under the user cache directory.
func DefaultDir() string {
	if d := os.Getenv("CORRAL_MODELS"); d != "" {
		return d
	}
	if c, err := os.UserCacheDir(); err == nil {
		return filepath.Join(c, "corral", "models")
	}
	return filepath.Join(os.TempDir(), "corral-models")
}

// Resolve returns the GGUF file ref names: ref itself when it is an existing
// file, else the model with id ref in dir.
func Resolve(dir, ref string) (string, error) {
	if st, err := os.Stat(ref); err == nil && st.Mode().IsRegular() {
		return ref, nil
	}
	p := filepath.Join(dir, strings.TrimSuffix(ref, ".gguf")+".gguf")
	if filepath.Base(p) != strings.TrimSuffix(filepath.Base(ref), ".gguf")+".gguf" || strings.ContainsRune(ref, os.PathSeparator) {
		return "", fmt.Errorf("model %q: no such file", ref)
	}
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("model %q: not a file and not in %s (corral pull it first)", ref, dir)
		}
		return "", fmt.Errorf("model %q: %w", ref, err)
	}
	return p, nil
}
