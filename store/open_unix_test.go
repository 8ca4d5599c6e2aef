//go:build unix

package store

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// openRegular opens a regular file of one link, and nothing else: not
// through a symlink (existing target or not), not a FIFO (without hanging
// on it), not a hard link. This is what stands when a link is planted
// after Pull's checks.
func TestOpenRegular(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(dir, "outside")
	precious := []byte("precious")
	if err := os.WriteFile(outside, precious, 0o644); err != nil {
		t.Fatal(err)
	}
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("part"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := openRegular(regular, os.O_RDWR)
	if err != nil {
		t.Fatalf("a regular file: %v", err)
	}
	f.Close()
	if _, err := openRegular(filepath.Join(dir, "missing"), os.O_RDONLY); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: error %v, want fs.ErrNotExist", err)
	}
	for _, tt := range []struct {
		name, want string
		make       func(path string) error
	}{
		{"symlink", "is a symlink", func(p string) error { return os.Symlink(outside, p) }},
		{"dangling", "is a symlink", func(p string) error { return os.Symlink(filepath.Join(dir, "made"), p) }},
		{"fifo", "is not a regular file", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"hardlink", "has other hard links", func(p string) error { return os.Link(outside, p) }},
	} {
		path := filepath.Join(dir, tt.name)
		if err := tt.make(path); err != nil {
			t.Fatal(err)
		}
		for _, flag := range []int{os.O_RDONLY, os.O_RDWR | os.O_CREATE} {
			f, err := openRegular(path, flag)
			if err == nil {
				f.Close()
			}
			if !errors.Is(err, errNotRegular) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s, flag %#x: error %v, want errNotRegular saying %q", tt.name, flag, err, tt.want)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "made")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("opening a dangling symlink made its target (lstat: %v)", err)
	}

	// The meta file: not written or read through a symlink.
	part := filepath.Join(dir, "m.gguf"+partExt)
	if err := os.Symlink(outside, part+metaExt); err != nil {
		t.Fatal(err)
	}
	if err := writeValidator(part, `"etag"`); !errors.Is(err, errNotRegular) {
		t.Errorf("writeValidator through a symlink: error %v, want errNotRegular", err)
	}
	if _, err := readValidator(part); !errors.Is(err, errNotRegular) {
		t.Errorf("readValidator through a symlink: error %v, want errNotRegular", err)
	}
	if got, err := os.ReadFile(outside); err != nil || !bytes.Equal(got, precious) {
		t.Errorf("the symlinks' target changed: %q, %v", got, err)
	}
}
