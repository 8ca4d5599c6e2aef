package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Pulls from servers that send more than they announce, or than the size
// limit.

// endlessCap bounds what an endless body sends, for a client that never
// stops reading not to fill the disk: far more than any socket buffers
// hold, so a server that sent it all had a client that read it all.
const endlessCap = 64 << 20

// endless writes a body of 'x' without a Content-Length (chunked) until
// the client goes away, or endlessCap bytes, and returns how much it wrote.
func endless(w http.ResponseWriter) int64 {
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	var n int64
	for n < endlessCap {
		m, err := w.Write(chunk)
		n += int64(m)
		if err != nil {
			break
		}
	}
	return n
}

// hostile is a TLS server whose handler is f, recording how many bytes
// the endless bodies it sent held.
type hostile struct {
	srv  *httptest.Server
	sent atomic.Int64
}

func newHostile(t *testing.T, f func(h *hostile, w http.ResponseWriter, r *http.Request)) *hostile {
	t.Helper()
	h := &hostile{}
	h.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { f(h, w, r) }))
	t.Cleanup(h.srv.Close)
	return h
}

// endless sends an endless body, counting it.
func (h *hostile) endless(w http.ResponseWriter) { h.sent.Add(endless(w)) }

// checkNoPart fails t if a part, or its meta file, of the model at final is
// left.
func checkNoPart(t *testing.T, final string) {
	t.Helper()
	for _, left := range []string{final + partExt, final + partExt + metaExt} {
		if _, err := os.Lstat(left); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left behind (lstat: %v)", left, err)
		}
	}
}

// The hub lists the file's size; the CDN answers with a chunked body (no
// Content-Length, which net/http would cut the body at) that does not end.
// The download stops at the listed size, and the part is removed.
func TestPullCutAtListedSize(t *testing.T) {
	h := newFakeHub(t)
	h.add(repo+"/Model-Q8_0.gguf", 1000)
	cdn := newHostile(t, func(c *hostile, w http.ResponseWriter, r *http.Request) { c.endless(w) })
	h.set(func() { h.cdn = cdn.srv.URL })
	dir := t.TempDir()
	_, err := Pull(context.Background(), repo+":Q8_0", dir, pullOpts(h, new(bytes.Buffer)))
	if err == nil || !strings.Contains(err.Error(), "the server sent more than the announced 1000 bytes") {
		t.Fatalf("error %v, want one saying the server sent more than the announced 1000 bytes", err)
	}
	checkNoPart(t, filepath.Join(dir, "Model-Q8_0.gguf"))
	if sent := cdn.sent.Load(); sent >= endlessCap {
		t.Errorf("the CDN sent all of its %d bytes: the pull read on past the listed size", sent)
	}
}

// A server resuming a URL's part announces the file's size in its
// Content-Range, then sends more than the range it names, chunked and
// without end: the part stops at the announced size, and is removed.
func TestPullCutAtContentRangeTotal(t *testing.T) {
	srv := newHostile(t, func(h *hostile, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Etag", `"v"`)
		if r.Header.Get("Range") != "bytes=500-" {
			http.Error(w, "want a resume", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Range", "bytes 500-999/1000")
		w.WriteHeader(http.StatusPartialContent)
		h.endless(w)
	})
	dir := t.TempDir()
	final := filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(final+partExt, bytes.Repeat([]byte("x"), 500), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeValidator(final+partExt, `"v"`); err != nil {
		t.Fatal(err)
	}
	_, err := Pull(context.Background(), srv.srv.URL+"/m.gguf", dir, PullOptions{Client: srv.srv.Client(), Backoff: func(int) time.Duration { return 0 }})
	if err == nil || !strings.Contains(err.Error(), "the server sent more than the announced 1000 bytes") {
		t.Fatalf("error %v, want one saying the server sent more than the announced 1000 bytes", err)
	}
	checkNoPart(t, final)
	if sent := srv.sent.Load(); sent >= endlessCap {
		t.Errorf("the server sent all of its %d bytes: the pull read on past the announced size", sent)
	}
}

// A server that announces no size (a chunked body) and does not stop is
// cut at the size limit.
func TestPullCutAtMaxSize(t *testing.T) {
	srv := newHostile(t, func(h *hostile, w http.ResponseWriter, r *http.Request) { h.endless(w) })
	dir := t.TempDir()
	opt := PullOptions{Client: srv.srv.Client(), MaxSize: 100_000, Backoff: func(int) time.Duration { return 0 }}
	_, err := Pull(context.Background(), srv.srv.URL+"/m.gguf", dir, opt)
	if err == nil || !strings.Contains(err.Error(), "the server sent more than the size limit of 100000 bytes") {
		t.Fatalf("error %v, want one naming the size limit", err)
	}
	checkNoPart(t, filepath.Join(dir, "m.gguf"))
	if sent := srv.sent.Load(); sent >= endlessCap {
		t.Errorf("the server sent all of its %d bytes: the pull read on past the size limit", sent)
	}
}

// A file announced over the size limit (by Content-Length, or by the hub's
// listing) is refused before any byte of it is written.
func TestPullAnnouncedOverMaxSize(t *testing.T) {
	var mu sync.Mutex
	gets := 0
	srv := newHostile(t, func(h *hostile, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gets++
		mu.Unlock()
		w.Header().Set("Content-Length", fmt.Sprint(int64(1)<<40))
		w.WriteHeader(http.StatusOK) // and no body: the connection closes
	})
	dir := t.TempDir()
	_, err := Pull(context.Background(), srv.srv.URL+"/m.gguf", dir, PullOptions{Client: srv.srv.Client(), Backoff: func(int) time.Duration { return 0 }})
	if want := "the file is 1099511627776 bytes (1.00 TiB), more than the size limit of 256 GiB (--max-size)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one containing %q", err, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("left %v in the directory", entries)
	}
	mu.Lock()
	if gets != 1 {
		t.Errorf("%d requests, want 1 (no retry)", gets)
	}
	mu.Unlock()

	h := newFakeHub(t)
	h.add(repo+"/Model-Q8_0.gguf", 5000)
	opt := pullOpts(h, new(bytes.Buffer))
	opt.MaxSize = 4096
	_, err = Pull(context.Background(), repo+":Q8_0", dir, opt)
	if want := "the file is 5000 bytes (4.88 KiB), more than the size limit of 4.00 KiB"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("hub: error %v, want one containing %q", err, want)
	}
	if gets := h.seen(func(r hubRequest) bool { return !r.listing }); len(gets) > 0 {
		t.Errorf("hub: requests %+v after the listing, want none", gets)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("hub: left %v in the directory", entries)
	}
}
