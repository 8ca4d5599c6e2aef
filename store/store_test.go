package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
)

// writeModel writes a synthetic model of shape to dir/id.gguf, modified at
// mtime.
func writeModel(t *testing.T, dir, id, shape string, mtime time.Time) gguf.Shape {
	t.Helper()
	sh, err := gguf.ParseShape(shape)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, id+".gguf")
	if err := gguf.WriteSynthetic(p, sh, 1); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	return sh
}

func TestList(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second)
	q8 := writeModel(t, dir, "tiny-q8", "tiny", now.Add(-time.Hour))
	f32 := writeModel(t, dir, "tiny-f32", "tiny,type=f32,ctx=512", now)
	for name, content := range map[string]string{
		"broken.gguf":       "not a model",
		"partial.gguf.part": "GGUF",
		"notes.txt":         "hello",
		".hidden.gguf":      "x",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := now.Add(-48 * time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "broken.gguf"), old, old); err != nil {
		t.Fatal(err)
	}

	models, got := listIDs(t, dir)
	if got != "tiny-f32 tiny-q8 broken" {
		t.Fatalf("models %q, want the newest first: tiny-f32 tiny-q8 broken", got)
	}
	for i, want := range []struct {
		shape gguf.Shape
		quant string
	}{{f32, "F32"}, {q8, "Q8_0"}} {
		m := models[i]
		st, err := os.Stat(m.Path)
		if err != nil {
			t.Fatal(err)
		}
		if m.Err != nil || m.Architecture != "llama" || m.Quant != want.quant || m.Context != want.shape.Ctx ||
			m.Parameters != want.shape.Params() || m.Size != st.Size() || !m.Modified.Equal(st.ModTime()) ||
			m.Path != filepath.Join(dir, m.ID+".gguf") {
			t.Errorf("%s: %+v; want llama, %s, ctx %d, %d parameters, %d bytes", m.ID, m, want.quant, want.shape.Ctx, want.shape.Params(), st.Size())
		}
	}
	if b := models[2]; !errors.Is(b.Err, gguf.ErrNotGGUF) || b.Size != int64(len("not a model")) {
		t.Errorf("broken: %+v, want ErrNotGGUF and its size", b)
	}

	if models, err := List(filepath.Join(dir, "missing")); err != nil || len(models) != 0 {
		t.Errorf("List of a missing directory: %v, %v; want none, no error", models, err)
	}
}

// TestListSkipsProjectors: multimodal projectors beside the models are
// not models: not those named as projectors (whatever they hold), nor a
// "clip" file named like a model.
func TestListSkipsProjectors(t *testing.T) {
	dir := t.TempDir()
	writeModel(t, dir, "tiny", "tiny", time.Now())
	for _, name := range []string{"tiny.mmproj.gguf", "mmproj-tiny-f16.gguf", "vision-encoder.gguf"} {
		if err := gguf.WriteSyntheticProjector(filepath.Join(dir, name), "gemma3", 64, 1); err != nil {
			t.Fatal(err)
		}
	}
	// Named as a projector, though its header cannot be read.
	if err := os.WriteFile(filepath.Join(dir, "MMPROJ-Other.gguf"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, got := listIDs(t, dir); got != "tiny" {
		t.Errorf("models %q, want tiny alone", got)
	}
}

// The shared test models: one without general.file_type, whose
// quantization is guessed from its tensors.
func TestInspectSharedModels(t *testing.T) {
	for _, tt := range []struct {
		name, quant string
		ctx         int
	}{
		{testmodel.Stories260K, "F32", 2048},
		{testmodel.TinyStories656K, "Q8_0", 512},
	} {
		m, md, err := Inspect(testmodel.Path(t, tt.name))
		if err != nil {
			t.Fatal(err)
		}
		if m.ID != strings.TrimSuffix(tt.name, ".gguf") || m.Quant != tt.quant || m.Context != tt.ctx || md.Architecture != "llama" || m.Parameters <= 0 {
			t.Errorf("%s: %+v", tt.name, m)
		}
	}
	if _, _, err := Inspect(filepath.Join(t.TempDir(), "none.gguf")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Inspect of a missing file: %v, want ErrNotExist", err)
	}
}

func TestRemove(t *testing.T) {
	dir := t.TempDir()
	writeModel(t, dir, "a", "tiny", time.Now())
	for _, name := range []string{"a.gguf.part", "b.gguf.part", "b.gguf.part.meta"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := Remove(dir, "a"); err != nil {
		t.Fatal(err)
	}
	if err := Remove(dir, "b.GGUF"); err != nil { // a partial download alone
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("left %v", entries)
	}
	if err := Remove(dir, "a"); err == nil || !strings.Contains(err.Error(), `"a": not in `+dir) {
		t.Errorf("removing a missing model: %v", err)
	}
	for _, id := range []string{"", "../a", "x/y", ".hidden"} {
		if err := Remove(dir, id); err == nil || !strings.Contains(err.Error(), "not a model id") {
			t.Errorf("Remove(%q): %v, want a bad-id error", id, err)
		}
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	writeModel(t, dir, "a", "tiny", time.Now())
	other := filepath.Join(t.TempDir(), "elsewhere.gguf")
	if err := os.WriteFile(other, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]string{
		"a":      filepath.Join(dir, "a.gguf"),
		"a.gguf": filepath.Join(dir, "a.gguf"),
		"a.GGUF": filepath.Join(dir, "a.gguf"),
		other:    other,
	} {
		if got, err := Resolve(dir, ref); err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", ref, got, err, want)
		}
	}
	for ref, want := range map[string]string{
		"b":                 "not a file and not in " + dir + " (corral pull it first)",
		"x/y.gguf":          "no such file",
		"../a":              "no such file",
		filepath.Dir(other): "no such file", // a directory
	} {
		if _, err := Resolve(dir, ref); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve(%q): %v, want an error containing %q", ref, err, want)
		}
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("CORRAL_MODELS", "/somewhere")
	if got := DefaultDir(); got != "/somewhere" {
		t.Errorf("with $CORRAL_MODELS: %q", got)
	}
	t.Setenv("CORRAL_MODELS", "")
	if c, err := os.UserCacheDir(); err == nil {
		if got, want := DefaultDir(), filepath.Join(c, "corral", "models"); got != want {
			t.Errorf("DefaultDir() = %q, want %q", got, want)
		}
	}
}

// listIDs lists dir's models, and their ids joined by spaces.
func listIDs(t *testing.T, dir string) ([]Model, string) {
	t.Helper()
	models, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range models {
		ids = append(ids, m.ID)
	}
	return models, strings.Join(ids, " ")
}
