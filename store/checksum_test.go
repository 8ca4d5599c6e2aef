package store

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
)

// A checksum header from a server other than the hub's host is not
// trusted: neither a URL elsewhere (its redirect, or the file's response)
// nor the hub's CDN vouches for the file.
func TestPullChecksumOnlyFromHub(t *testing.T) {
	body := bytes.Repeat([]byte("hostile model "), 100)
	sum := sha256Hex(body)
	srv := newHostile(t, func(_ *hostile, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("Etag", `"`+sum+`"`)
		if r.URL.Path == "/m.gguf" {
			http.Redirect(w, r, "/files/m.gguf", http.StatusFound)
			return
		}
		w.Write(body)
	})
	var log bytes.Buffer
	got, err := Pull(context.Background(), srv.srv.URL+"/m.gguf", t.TempDir(), PullOptions{Client: srv.srv.Client(), Progress: &log})
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, got, body)
	if !strings.Contains(log.String(), "sha256 "+sum+" (not verified: no checksum published)") {
		t.Errorf("progress does not say the download is not verified:\n%s", log.String())
	}

	// The hub sends no X-Linked-Etag; its CDN sends a wrong one, which
	// would fail the download if it were taken.
	h := newFakeHub(t)
	cdn := newFakeHub(t)
	body = h.add(repo+"/Model-Q8_0.gguf", 1000)
	cdn.add(repo+"/Model-Q8_0.gguf", 1000)
	h.set(func() { h.cdn, h.noLinkedETag = cdn.srv.URL, true })
	cdn.set(func() { cdn.cdnLinkedETag = `"` + strings.Repeat("ab", 32) + `"` })
	log.Reset()
	url := h.srv.URL + "/" + repo + "/resolve/main/Model-Q8_0.gguf"
	got, err = Pull(context.Background(), url, t.TempDir(), pullOpts(h, &log))
	if err != nil {
		t.Fatalf("CDN's X-Linked-Etag: %v", err)
	}
	checkFile(t, got, body)
	if !strings.Contains(log.String(), "(not verified: no checksum published)") {
		t.Errorf("CDN's X-Linked-Etag: progress does not say the download is not verified:\n%s", log.String())
	}
}
