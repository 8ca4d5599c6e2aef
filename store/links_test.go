package store

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Links planted in the model directory, where a pull writes its part, the
// part's meta file or the model: the pull refuses them, and what they
// point to is left as it was.
func TestPullRefusesLinks(t *testing.T) {
	precious := []byte("precious data that is no model\n")
	for _, tt := range []struct {
		name string
		// plant makes the link in the model directory; final is the
		// model's path, outside a file outside the directory.
		plant func(final, outside string) error
		want  string
		// missing: outside does not exist, and must not be made.
		missing bool
	}{
		{"part symlink", func(final, outside string) error { return os.Symlink(outside, final+partExt) }, "Model-Q8_0.gguf.part is a symlink", false},
		{"dangling part symlink", func(final, outside string) error { return os.Symlink(outside, final+partExt) }, "Model-Q8_0.gguf.part is a symlink", true},
		{"part hard link", func(final, outside string) error { return os.Link(outside, final+partExt) }, "Model-Q8_0.gguf.part has other hard links", false},
		{"part directory", func(final, _ string) error { return os.Mkdir(final+partExt, 0o755) }, "Model-Q8_0.gguf.part is not a regular file", false},
		{"meta symlink", func(final, outside string) error { return os.Symlink(outside, final+partExt+metaExt) }, "Model-Q8_0.gguf.part.meta is a symlink", false},
		{"model symlink", func(final, outside string) error { return os.Symlink(outside, final) }, "Model-Q8_0.gguf is a symlink", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newFakeHub(t)
			h.add(repo+"/Model-Q8_0.gguf", 20_000)
			h.set(func() { h.cdnETag = true }) // a validator to keep in the meta file
			dir, elsewhere := t.TempDir(), t.TempDir()
			final := filepath.Join(dir, "Model-Q8_0.gguf")
			outside := filepath.Join(elsewhere, "file")
			if !tt.missing {
				if err := os.WriteFile(outside, precious, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := tt.plant(final, outside); err != nil {
				t.Fatal(err)
			}
			_, err := Pull(context.Background(), repo+":Q8_0", dir, pullOpts(h, new(bytes.Buffer)))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, errNotRegular) {
				t.Errorf("error %v, want errNotRegular saying %q", err, tt.want)
			}
			if tt.missing {
				if _, err := os.Lstat(outside); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("the pull made %s (lstat: %v)", outside, err)
				}
			} else if got, err := os.ReadFile(outside); err != nil || !bytes.Equal(got, precious) {
				t.Errorf("the file outside the directory changed: %q, %v", got, err)
			}
			if gets := h.seen(cdnGets); len(gets) > 0 {
				t.Errorf("downloaded: %+v", gets)
			}
		})
	}
}
