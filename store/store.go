// Package store is corral's local model directory: models pulled from
// Hugging Face or a URL, listed, shown and removed by id (the file name
// without .gguf).
//
// A model is one file, DIR/ID.gguf. A download in progress (or an
// interrupted one, which the next Pull resumes) is DIR/ID.gguf.part, with
// DIR/ID.gguf.part.meta beside it.
package store

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/corral-llm/corral/gguf"
)

const (
	ext     = ".gguf"
	partExt = ".part"
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

// Model is one model of the directory.
type Model struct {
	// ID is the file name without .gguf.
	ID string
	// Path is the file's path.
	Path string
	// Size is the file size in bytes.
	Size int64
	// Modified is the file's modification time (when it was pulled).
	Modified time.Time
	// Architecture is general.architecture, such as "llama".
	Architecture string
	// Quant is the quantization, such as "Q8_0" (see
	// gguf.Metadata.Quantization).
	Quant string
	// Context is the context length the model was trained with.
	Context int
	// Parameters is the number of weights: the elements of every tensor.
	Parameters int64
	// Err is why the GGUF header could not be read; the fields above that
	// come from it are then zero.
	Err error
}

// Inspect describes the GGUF file at path. The metadata is nil when the
// header cannot be read; the error is then returned and also kept in the
// Model's Err, whose ID and Path are always set.
func Inspect(path string) (Model, *gguf.Metadata, error) {
	m := Model{ID: strings.TrimSuffix(filepath.Base(path), ext), Path: path}
	st, err := os.Stat(path)
	if err != nil {
		m.Err = fmt.Errorf("inspect model: %w", err)
		return m, nil, m.Err
	}
	m.Size, m.Modified = st.Size(), st.ModTime()
	md, err := gguf.ReadMetadata(path)
	if err != nil {
		m.Err = err
		return m, nil, err
	}
	m.Architecture = md.Architecture
	m.Quant = md.Quantization()
	m.Context = md.ContextLength
	m.Parameters = int64(md.Parameters())
	return m, md, nil
}

// List returns the models in dir, most recently modified first. A file
// whose header cannot be read is listed with the error in its Err. A
// directory that does not exist holds no models. Multimodal projectors
// are not models and are left out: files named as projectors are (see
// gguf.IsProjectorName), and files whose general.architecture is "clip".
func List(dir string) ([]Model, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	var models []Model
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ext) || strings.HasPrefix(name, ".") || gguf.IsProjectorName(name) {
			continue
		}
		m, md, err := Inspect(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since ReadDir, or a dangling link
		}
		if md != nil && md.IsProjector() {
			continue
		}
		models = append(models, m)
	}
	slices.SortFunc(models, func(a, b Model) int {
		if c := b.Modified.Compare(a.Modified); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return models, nil
}

// Remove deletes the model id (a trailing .gguf, in any case, is ignored)
// from dir, along with a partial download of it. It fails when there is
// neither.
func Remove(dir, id string) error {
	p, err := modelPath(dir, id)
	if err != nil {
		return fmt.Errorf("remove model: %w", err)
	}
	found := false
	for _, f := range []string{p, p + partExt} {
		err := os.Remove(f)
		switch {
		case err == nil:
			found = true
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("remove model %q: %w", id, err)
		}
	}
	if err := writeValidator(p+partExt, ""); err != nil {
		return fmt.Errorf("remove model %q: %w", id, err)
	}
	if !found {
		return fmt.Errorf("remove model %q: not in %s", id, dir)
	}
	return nil
}

// Resolve returns the GGUF file ref names: ref itself when it is an existing
// file, else the model with id ref in dir.
func Resolve(dir, ref string) (string, error) {
	if st, err := os.Stat(ref); err == nil && st.Mode().IsRegular() {
		return ref, nil
	}
	p, err := modelPath(dir, ref)
	if err != nil {
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

// modelPath returns the file of model id in dir. An id is a plain file name
// (a trailing .gguf, in any case, is ignored): no path separators, not
// hidden, not empty.
func modelPath(dir, id string) (string, error) {
	if hasExt(id) {
		id = id[:len(id)-len(ext)]
	}
	if err := checkID(id); err != nil {
		return "", err
	}
	return filepath.Join(dir, id+ext), nil
}

// hasExt reports whether name ends with .gguf, in any case.
func hasExt(name string) bool {
	return len(name) >= len(ext) && strings.EqualFold(name[len(name)-len(ext):], ext)
}

// checkID reports whether id can name a model file.
func checkID(id string) error {
	if id == "" || strings.HasPrefix(id, ".") || strings.ContainsAny(id, "/\\\x00") {
		return fmt.Errorf("%q is not a model id (a file name without .gguf)", id)
	}
	return nil
}
