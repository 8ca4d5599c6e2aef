package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeHub plays the Hugging Face hub: the file listing API, the resolve
// endpoint (which redirects to a CDN path, with X-Linked-Etag and
// X-Linked-Size, as the hub does for LFS files) and the CDN, which serves
// ranges with http.ServeContent. Its knobs break the CDN in the ways a pull
// must survive.
type fakeHub struct {
	srv *httptest.Server
	cdn string // base URL of the CDN: srv's own by default

	mu        sync.Mutex
	files     map[string][]byte // "org/repo/path" → content
	published map[string]string // "org/repo/path" → SHA-256 to publish instead of the real one
	requests  []hubRequest      // every request, in order
	// dropAt > 0 cuts the connection of the next drops CDN responses after
	// dropAt bytes of body.
	dropAt, drops int
	// downAfterDrop makes the CDN answer 503 once it has cut a connection.
	downAfterDrop bool
	down          bool   // the CDN answers 503
	ignoreRange   bool   // the CDN answers every request with the whole file
	noLinkedETag  bool   // the resolve endpoint sends no X-Linked-Etag
	cdnETag       bool   // the CDN sends an ETag of the content (not its SHA-256)
	cdnLinkedETag string // when set, the X-Linked-Etag the CDN sends
	pageSize      int    // > 0: listings come in pages of this many entries
}

// hubRequest is a request the fake hub saw.
type hubRequest struct {
	cdn                 bool
	method, path, rng   string
	ifRange             string
	auth                string
	status              int
	listing, resolution bool
}

// newFakeHub starts a fake hub on https (its srv.Client trusts it, and
// every other httptest TLS server: they share a certificate).
func newFakeHub(t *testing.T) *fakeHub {
	t.Helper()
	h := &fakeHub{files: map[string][]byte{}, published: map[string]string{}}
	h.srv = httptest.NewTLSServer(h)
	h.cdn = h.srv.URL
	t.Cleanup(h.srv.Close)
	return h
}

// newPlainFakeHub starts a fake hub on plain http.
func newPlainFakeHub(t *testing.T) *fakeHub {
	t.Helper()
	h := &fakeHub{files: map[string][]byte{}, published: map[string]string{}}
	h.srv = httptest.NewServer(h)
	h.cdn = h.srv.URL
	t.Cleanup(h.srv.Close)
	return h
}

// add stores a file of n random bytes at "org/repo/path" and returns it.
func (h *fakeHub) add(name string, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(n), uint64(len(name))))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.files[name] = b
	return b
}

// set changes the hub's knobs under its lock: a handler may still be
// finishing the last response a pull read.
func (h *fakeHub) set(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f()
}

// sha returns what the hub publishes as the SHA-256 of file name.
func (h *fakeHub) sha(name string) string {
	if s, ok := h.published[name]; ok {
		return s
	}
	sum := sha256.Sum256(h.files[name])
	return hex.EncodeToString(sum[:])
}

// seen returns the requests so far that pass keep.
func (h *fakeHub) seen(keep func(hubRequest) bool) []hubRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hubRequest
	for _, r := range h.requests {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

func cdnGets(r hubRequest) bool { return r.cdn && r.method == http.MethodGet }

func (h *fakeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	req := hubRequest{method: r.Method, path: r.URL.Path, rng: r.Header.Get("Range"), ifRange: r.Header.Get("If-Range"), auth: r.Header.Get("Authorization")}
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	switch p := r.URL.Path; {
	case strings.HasPrefix(p, "/api/models/"):
		req.listing = true
		h.list(rec, r, strings.TrimSuffix(strings.TrimPrefix(p, "/api/models/"), "/tree/main"))
	case strings.HasPrefix(p, "/cdn/"):
		req.cdn = true
		h.serveCDN(rec, r, strings.TrimPrefix(p, "/cdn/"))
	case strings.Contains(p, "/resolve/main/"):
		req.resolution = true
		repo, file, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/resolve/main/")
		name := repo + "/" + file
		if _, ok := h.files[name]; !ok {
			http.NotFound(rec, r)
			break
		}
		if !h.noLinkedETag {
			w.Header().Set("X-Linked-Etag", `"`+h.sha(name)+`"`)
		}
		w.Header().Set("X-Linked-Size", fmt.Sprint(len(h.files[name])))
		http.Redirect(rec, r, h.cdn+"/cdn/"+name+"?signature=abc", http.StatusFound)
	default:
		http.NotFound(rec, r)
	}
	req.status = rec.status
	h.requests = append(h.requests, req)
}

// list answers the file listing of repo ("org/repo"), a page of it when
// pageSize is set, with a Link header to the next as the hub sends.
func (h *fakeHub) list(w http.ResponseWriter, r *http.Request, repo string) {
	type lfs struct {
		OID  string `json:"oid"`
		Size int    `json:"size"`
	}
	type entry struct {
		Type string `json:"type"`
		Path string `json:"path"`
		Size int    `json:"size"`
		LFS  *lfs   `json:"lfs,omitempty"`
	}
	var entries []entry
	dirs := map[string]bool{}
	for name, b := range h.files {
		file, ok := strings.CutPrefix(name, repo+"/")
		if !ok {
			continue
		}
		if d := path.Dir(file); d != "." && !dirs[d] {
			dirs[d] = true
			entries = append(entries, entry{Type: "directory", Path: d})
		}
		e := entry{Type: "file", Path: file, Size: len(b)}
		if strings.HasSuffix(file, ".gguf") {
			e.LFS = &lfs{OID: h.sha(name), Size: len(b)}
		}
		entries = append(entries, e)
	}
	if len(entries) == 0 {
		w.Header().Set("X-Error-Message", "Repository not found")
		http.Error(w, `{"error":"Repository not found"}`, http.StatusNotFound)
		return
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	if h.pageSize > 0 {
		from, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		to := min(from+h.pageSize, len(entries))
		if to < len(entries) {
			w.Header().Set("Link", fmt.Sprintf(`<%s?recursive=true&cursor=%d>; rel="next"`, r.URL.Path, to))
		}
		entries = entries[from:to]
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(entries)
}

// serveCDN serves file name, or breaks as the knobs say.
func (h *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request, name string) {
	b, ok := h.files[name]
	switch {
	case !ok:
		http.NotFound(w, r)
		return
	case h.down:
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	case h.ignoreRange:
		r.Header.Del("Range")
	}
	if h.cdnLinkedETag != "" {
		w.Header().Set("X-Linked-Etag", h.cdnLinkedETag)
	}
	if h.cdnETag {
		sum := sha256.Sum256(b)
		w.Header().Set("Etag", `"`+hex.EncodeToString(sum[:8])+`"`)
	}
	if h.dropAt > 0 && h.drops > 0 && r.Method == http.MethodGet {
		h.drops--
		if h.downAfterDrop {
			h.down = true
		}
		w = &cuttingWriter{ResponseWriter: w, left: h.dropAt}
	}
	http.ServeContent(w, r, path.Base(name), time.Time{}, bytes.NewReader(b))
}

// statusRecorder remembers the status of a response.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// errCut ends ServeContent's copy after a cut.
var errCut = errors.New("connection cut")

// cuttingWriter writes left bytes of a response body, then flushes them
// and closes the connection, as a connection dropped mid-file.
type cuttingWriter struct {
	http.ResponseWriter
	left int
}

func (c *cuttingWriter) Write(b []byte) (int, error) {
	if len(b) <= c.left {
		c.left -= len(b)
		return c.ResponseWriter.Write(b)
	}
	n, _ := c.ResponseWriter.Write(b[:c.left])
	c.left = 0
	rc := http.NewResponseController(c.ResponseWriter)
	rc.Flush()
	conn, _, err := rc.Hijack()
	if err == nil {
		conn.Close()
	}
	return n, errCut
}

func (c *cuttingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
