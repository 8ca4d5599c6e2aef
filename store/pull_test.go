package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const repo = "org/Model-GGUF"

// pullOpts are the options of a test pull from h, whose progress goes to
// log.
func pullOpts(h *fakeHub, log *bytes.Buffer) PullOptions {
	return PullOptions{
		Client:   h.srv.Client(),
		HubURL:   h.srv.URL,
		Token:    "-",
		Progress: log,
		Backoff:  func(int) time.Duration { return 0 },
	}
}

// checkFile fails t unless path holds want and no part is left beside it.
func checkFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes, not the %d served", path, len(got), len(want))
	}
	for _, left := range []string{path + partExt, path + partExt + metaExt} {
		if _, err := os.Stat(left); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left behind (stat: %v)", left, err)
		}
	}
}

func TestPullQuant(t *testing.T) {
	h := newFakeHub(t)
	h.add(repo+"/README.md", 10)
	q4 := h.add(repo+"/Model-Q4_K_M.gguf", 3000)
	q8 := h.add(repo+"/Model-Q8_0.gguf", 5000)
	h.add(repo+"/Model-Q8_0_L.gguf", 5100)
	h.add(repo+"/mmproj-Model-Q8_0.gguf", 700)
	dir := t.TempDir()

	var log bytes.Buffer
	got, err := Pull(context.Background(), repo+":q8_0", dir, pullOpts(h, &log))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "Model-Q8_0.gguf"); got != want {
		t.Fatalf("path %s, want %s", got, want)
	}
	checkFile(t, got, q8)
	if !strings.Contains(log.String(), "sha256 "+h.sha(repo+"/Model-Q8_0.gguf")+" verified") {
		t.Errorf("progress does not say the hash was verified:\n%s", log.String())
	}
	gets := h.seen(cdnGets)
	if len(gets) != 1 || gets[0].rng != "" || gets[0].path != "/cdn/"+repo+"/Model-Q8_0.gguf" {
		t.Errorf("CDN requests %+v, want one GET of the whole Q8_0 file", gets)
	}

	// Without a quant: Q4_K_M. With hf.co/ before the repo, and a name.
	opt := pullOpts(h, &log)
	opt.Name = "mine"
	got, err = Pull(context.Background(), "hf.co/"+repo, dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "mine.gguf"); got != want {
		t.Fatalf("path %s, want %s", got, want)
	}
	checkFile(t, got, q4)
}

func TestPullQuantErrors(t *testing.T) {
	h := newFakeHub(t)
	h.add(repo+"/Model-Q4_0.gguf", 100)
	h.add(repo+"/Model-Q4_K_S.gguf", 100)
	h.add(repo+"/Model-Q4_K_M.gguf", 100)
	h.add("org/Dup-GGUF/a/Dup-Q8_0.gguf", 100)
	h.add("org/Dup-GGUF/b/Dup-Q8_0.gguf", 100)
	h.add("org/Split-GGUF/Split-Q8_0-00001-of-00002.gguf", 100)
	h.add("org/Split-GGUF/Split-Q8_0-00002-of-00002.gguf", 100)
	for _, tt := range []struct{ ref, want string }{
		{repo + ":Q9_9", "pull org/Model-GGUF:Q9_9: org/Model-GGUF has no GGUF file for quant Q9_9; available: Q4_0, Q4_K_M, Q4_K_S"},
		{repo + ":Q4_K", "org/Model-GGUF has no GGUF file for quant Q4_K; available: Q4_0, Q4_K_M, Q4_K_S"},
		{"org/Dup-GGUF:Q8_0", "quant Q8_0 matches several files of org/Dup-GGUF (a/Dup-Q8_0.gguf, b/Dup-Q8_0.gguf); pull one as hf://org/Dup-GGUF/PATH"},
		{"org/Split-GGUF:Q8_0", "split into 2 files"},
		{"hf://org/Split-GGUF/Split-Q8_0-00001-of-00002.gguf", "one of 2 parts of a split model"},
		{"hf://" + repo + "/Other.gguf", "has no GGUF file Other.gguf; it has: Model-Q4_0.gguf, Model-Q4_K_M.gguf, Model-Q4_K_S.gguf"},
		{"org/Missing", "404 Not Found: Repository not found"},
		{"org/repo/file.gguf", "write hf://org/repo/file.gguf"},
		{"justaname", "not a model reference"},
		{"../x", "is not a hub repository"},
	} {
		dir := t.TempDir()
		_, err := Pull(context.Background(), tt.ref, dir, pullOpts(h, new(bytes.Buffer)))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Pull(%s): error %v, want one containing %q", tt.ref, err, tt.want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			t.Errorf("Pull(%s) left %v in the directory", tt.ref, entries)
		}
	}
	if gets := h.seen(cdnGets); len(gets) > 0 {
		t.Errorf("failed pulls downloaded: %+v", gets)
	}
}

// A listing in pages: the file is on the last.
func TestPullListingPages(t *testing.T) {
	h := newFakeHub(t)
	for i := range 5 {
		h.add(fmt.Sprintf("%s/Model-%d-Q4_0.gguf", repo, i), 10)
	}
	body := h.add(repo+"/Model-Q8_0.gguf", 100)
	h.set(func() { h.pageSize = 2 })
	got, err := Pull(context.Background(), repo+":Q8_0", t.TempDir(), pullOpts(h, new(bytes.Buffer)))
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, got, body)
	if pages := h.seen(func(r hubRequest) bool { return r.listing }); len(pages) != 3 {
		t.Errorf("%d listing requests, want 3 pages", len(pages))
	}
}

// A server that cannot be reached: retried, then an error that does not
// quote the URL's query (signed URLs are long).
func TestPullUnreachable(t *testing.T) {
	gone := httptest.NewTLSServer(http.NotFoundHandler())
	gone.Close()
	var log bytes.Buffer
	tries := 0
	opt := PullOptions{HubURL: gone.URL, Progress: &log, Backoff: func(int) time.Duration { tries++; return 0 }}
	_, err := Pull(context.Background(), gone.URL+"/m.gguf?signature=secret", t.TempDir(), opt)
	// The query appears once: in the reference the error starts with.
	if err == nil || !strings.Contains(err.Error(), "gave up after 5 tries") || strings.Count(err.Error(), "secret") != 1 {
		t.Errorf("error %v, want one that gave up after 5 tries, quoting the query only in the reference", err)
	}
	if tries != maxTries-1 {
		t.Errorf("%d retries, want %d", tries, maxTries-1)
	}
}

func TestPullChecksumMismatch(t *testing.T) {
	h := newFakeHub(t)
	body := h.add(repo+"/Model-Q8_0.gguf", 4000)
	wrong := strings.Repeat("ab", 32)
	h.set(func() { h.published[repo+"/Model-Q8_0.gguf"] = wrong })
	dir := t.TempDir()
	_, err := Pull(context.Background(), repo+":Q8_0", dir, pullOpts(h, new(bytes.Buffer)))
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("error %v, want ErrChecksum", err)
	}
	if msg := err.Error(); !strings.Contains(msg, wrong) || !strings.Contains(msg, sha256Hex(body)) {
		t.Errorf("error %q does not name both the published and the real hash", msg)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("left %v in the directory", entries)
	}
}

// A connection cut mid-file is resumed by the retry, from where it was cut.
func TestPullResumesDroppedConnection(t *testing.T) {
	h := newFakeHub(t)
	body := h.add(repo+"/Model-Q8_0.gguf", 100_000)
	h.set(func() { h.dropAt, h.drops = 50_000, 1 })
	dir := t.TempDir()
	var log bytes.Buffer
	got, err := Pull(context.Background(), repo+":Q8_0", dir, pullOpts(h, &log))
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, log.String())
	}
	checkFile(t, got, body)
	gets := h.seen(cdnGets)
	if len(gets) != 2 || gets[0].rng != "" || gets[1].rng != "bytes=50000-" || gets[1].status != 206 {
		t.Errorf("CDN requests %+v, want a whole GET, then one from byte 50000 answered 206", gets)
	}
	if !strings.Contains(log.String(), "retrying") || !strings.Contains(log.String(), "resuming Model-Q8_0 at 50%") {
		t.Errorf("progress does not report the retry and the resume:\n%s", log.String())
	}
}

// A pull that gives up leaves the part; the next one resumes it.
func TestPullResumesAcrossCalls(t *testing.T) {
	h := newFakeHub(t)
	body := h.add(repo+"/Model-Q8_0.gguf", 100_000)
	// The CDN's ETags play no part: the published hash checks the part.
	h.set(func() { h.dropAt, h.drops, h.downAfterDrop, h.cdnETag = 30_000, 1, true, true })
	dir := t.TempDir()
	final := filepath.Join(dir, "Model-Q8_0.gguf")

	_, err := Pull(context.Background(), repo+":Q8_0", dir, pullOpts(h, new(bytes.Buffer)))
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "pull again to resume") {
		t.Fatalf("first pull: error %v, want the 503 and a hint to pull again", err)
	}
	if n := len(h.seen(cdnGets)); n != maxTries+1 {
		t.Errorf("first pull made %d CDN requests, want %d (one cut, then %d failing)", n, maxTries+1, maxTries)
	}
	if st, err := os.Stat(final + partExt); err != nil || st.Size() != 30_000 {
		t.Fatalf("part after the first pull: %v, %v; want 30000 bytes", st, err)
	}
	if _, err := os.Stat(final); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("final file after a failed pull: %v", err)
	}

	h.set(func() { h.down, h.requests = false, nil })
	if _, err := Pull(context.Background(), repo+":Q8_0", dir, pullOpts(h, new(bytes.Buffer))); err != nil {
		t.Fatal(err)
	}
	checkFile(t, final, body)
	if gets := h.seen(cdnGets); len(gets) != 1 || gets[0].rng != "bytes=30000-" || gets[0].ifRange != "" || gets[0].status != 206 {
		t.Errorf("second pull: CDN requests %+v, want one from byte 30000 without If-Range, answered 206", gets)
	}
}

// A server that answers a Range request with the whole file: the part is
// discarded (here it is garbage, which the hash would catch otherwise).
func TestPullServerIgnoresRange(t *testing.T) {
	h := newFakeHub(t)
	body := h.add(repo+"/Model-Q8_0.gguf", 20_000)
	h.set(func() { h.ignoreRange = true })
	dir := t.TempDir()
	final := filepath.Join(dir, "Model-Q8_0.gguf")
	if err := os.WriteFile(final+partExt, bytes.Repeat([]byte{0xAA}, 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if _, err := Pull(context.Background(), repo+":Q8_0", dir, pullOpts(h, &log)); err != nil {
		t.Fatal(err)
	}
	checkFile(t, final, body)
	gets := h.seen(cdnGets)
	if len(gets) != 1 || gets[0].rng != "bytes=5000-" || gets[0].status != 200 {
		t.Errorf("CDN requests %+v, want one Range request answered 200", gets)
	}
	if !strings.Contains(log.String(), "starting over") {
		t.Errorf("progress does not say it started over:\n%s", log.String())
	}
}

// A part that is already the whole file: the server answers 416, and the
// part is verified and installed.
func TestPullCompletePart(t *testing.T) {
	h := newFakeHub(t)
	body := h.add(repo+"/Model-Q8_0.gguf", 20_000)
	dir := t.TempDir()
	final := filepath.Join(dir, "Model-Q8_0.gguf")
	if err := os.WriteFile(final+partExt, body, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Pull(context.Background(), repo+":Q8_0", dir, pullOpts(h, new(bytes.Buffer))); err != nil {
		t.Fatal(err)
	}
	checkFile(t, final, body)
	if gets := h.seen(cdnGets); len(gets) != 1 || gets[0].status != 416 {
		t.Errorf("CDN requests %+v, want one answered 416", gets)
	}

	// A part of the right length but the wrong bytes fails the hash: the
	// download starts over.
	h.set(func() { h.requests = nil })
	os.Remove(final)
	if err := os.WriteFile(final+partExt, make([]byte, len(body)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Pull(context.Background(), repo+":Q8_0", dir, pullOpts(h, new(bytes.Buffer))); err != nil {
		t.Fatalf("bad complete part: %v", err)
	}
	checkFile(t, final, body)
	if gets := h.seen(cdnGets); len(gets) != 2 || gets[0].status != 416 || gets[1].rng != "" || gets[1].status != 200 {
		t.Errorf("bad complete part: CDN requests %+v, want one answered 416, then a whole GET", gets)
	}
}

func TestPullUpToDate(t *testing.T) {
	h := newFakeHub(t)
	body := h.add(repo+"/Model-Q8_0.gguf", 20_000)
	dir := t.TempDir()
	final := filepath.Join(dir, "Model-Q8_0.gguf")
	url := h.srv.URL + "/" + repo + "/resolve/main/Model-Q8_0.gguf"
	for _, ref := range []string{repo + ":Q8_0", url} {
		if err := os.WriteFile(final, body, 0o644); err != nil {
			t.Fatal(err)
		}
		h.set(func() { h.requests = nil })
		var log bytes.Buffer
		if _, err := Pull(context.Background(), ref, dir, pullOpts(h, &log)); err != nil {
			t.Fatal(err)
		}
		if gets := h.seen(cdnGets); len(gets) > 0 {
			t.Errorf("%s: downloaded again: %+v", ref, gets)
		}
		if !strings.Contains(log.String(), "Model-Q8_0 is up to date") {
			t.Errorf("%s: progress does not say up to date:\n%s", ref, log.String())
		}
	}

	// Same size, other bytes: pulled again.
	if err := os.WriteFile(final, make([]byte, len(body)), 0o644); err != nil {
		t.Fatal(err)
	}
	h.set(func() { h.requests = nil })
	if _, err := Pull(context.Background(), repo+":Q8_0", dir, pullOpts(h, new(bytes.Buffer))); err != nil {
		t.Fatal(err)
	}
	checkFile(t, final, body)
	if gets := h.seen(cdnGets); len(gets) != 1 {
		t.Errorf("a changed local copy: CDN requests %+v, want one", gets)
	}
}

// A URL's checksum comes from the X-Linked-Etag of the redirect; without
// one the download is not verified, and says so.
func TestPullURL(t *testing.T) {
	h := newFakeHub(t)
	body := h.add(repo+"/sub/Model-Q8_0.gguf", 20_000)
	dir := t.TempDir()
	url := h.srv.URL + "/" + repo + "/resolve/main/sub/Model-Q8_0.gguf"

	var log bytes.Buffer
	got, err := Pull(context.Background(), url, dir, pullOpts(h, &log))
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, got, body)
	if !strings.Contains(log.String(), sha256Hex(body)+" verified") {
		t.Errorf("progress does not say verified:\n%s", log.String())
	}

	h.set(func() { h.published[repo+"/sub/Model-Q8_0.gguf"] = strings.Repeat("0", 64) })
	_, err = Pull(context.Background(), url, t.TempDir(), pullOpts(h, new(bytes.Buffer)))
	if !errors.Is(err, ErrChecksum) {
		t.Errorf("a wrong X-Linked-Etag: error %v, want ErrChecksum", err)
	}
	h.set(func() {
		delete(h.published, repo+"/sub/Model-Q8_0.gguf")
		h.noLinkedETag = true
	})
	log.Reset()
	got, err = Pull(context.Background(), url, t.TempDir(), pullOpts(h, &log))
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, got, body)
	if !strings.Contains(log.String(), "sha256 "+sha256Hex(body)+" (not verified: no checksum published)") {
		t.Errorf("progress does not say the download is not verified:\n%s", log.String())
	}

	// The page of the file on the hub is taken for the file.
	got, err = Pull(context.Background(), strings.Replace(url, "/resolve/", "/blob/", 1), t.TempDir(), pullOpts(h, new(bytes.Buffer)))
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, got, body)

	// hf:// names a file of a repository, in a folder here.
	got, err = Pull(context.Background(), "hf://"+repo+"/sub/Model-Q8_0.gguf", t.TempDir(), pullOpts(h, new(bytes.Buffer)))
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, got, body)
}

// The token goes to the hub, not to the CDN it redirects to (another
// port of the same host here, to which Go itself would forward it).
func TestPullToken(t *testing.T) {
	h := newFakeHub(t)
	cdn := newFakeHub(t)
	h.set(func() { h.cdn = cdn.srv.URL })
	body := h.add(repo+"/Model-Q8_0.gguf", 1000)
	cdn.add(repo+"/Model-Q8_0.gguf", 1000)
	opt := pullOpts(h, new(bytes.Buffer))
	opt.Token = "secret"
	got, err := Pull(context.Background(), repo+":Q8_0", t.TempDir(), opt)
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, got, body)
	hub := h.seen(func(hubRequest) bool { return true })
	if len(hub) != 2 || hub[0].auth != "Bearer secret" || hub[1].auth != "Bearer secret" {
		t.Errorf("hub requests %+v, want the listing and the resolution with the token", hub)
	}
	if gets := cdn.seen(cdnGets); len(gets) != 1 || gets[0].auth != "" {
		t.Errorf("CDN requests %+v, want one without a token", gets)
	}
}

func TestPullInterrupted(t *testing.T) {
	h := newFakeHub(t)
	h.add(repo+"/Model-Q8_0.gguf", 1000)
	h.set(func() { h.down = true })
	ctx, cancel := context.WithCancel(context.Background())
	opt := pullOpts(h, new(bytes.Buffer))
	opt.Backoff = func(int) time.Duration { cancel(); return time.Hour }
	_, err := Pull(ctx, repo+":Q8_0", t.TempDir(), opt)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}

// A part of a URL's file, whose hash is not published, is resumed only
// with the same version of the file: the request carries the validator of
// the response that started the part in If-Range, and a server with
// another version answers with the whole file.
func TestPullURLResumesSameVersion(t *testing.T) {
	for _, changed := range []bool{false, true} {
		h := newFakeHub(t)
		name := repo + "/Model-Q8_0.gguf"
		want := h.add(name, 100_000)
		h.set(func() {
			h.noLinkedETag, h.cdnETag = true, true
			h.dropAt, h.drops, h.downAfterDrop = 30_000, 1, true
		})
		dir := t.TempDir()
		final := filepath.Join(dir, "Model-Q8_0.gguf")
		url := h.srv.URL + "/" + repo + "/resolve/main/Model-Q8_0.gguf"
		if _, err := Pull(context.Background(), url, dir, pullOpts(h, new(bytes.Buffer))); err == nil || !strings.Contains(err.Error(), "pull again to resume") {
			t.Fatalf("first pull: error %v, want one that gave up", err)
		}
		if st, err := os.Stat(final + partExt); err != nil || st.Size() != 30_000 {
			t.Fatalf("part after the first pull: %v, %v; want 30000 bytes", st, err)
		}

		if changed { // same size, other bytes
			want = bytes.Clone(want)
			for i := range want {
				want[i] ^= 0xFF
			}
		}
		h.set(func() { h.down, h.requests, h.files[name] = false, nil, want })
		var log bytes.Buffer
		got, err := Pull(context.Background(), url, dir, pullOpts(h, &log))
		if err != nil {
			t.Fatalf("changed %v: %v", changed, err)
		}
		checkFile(t, got, want)
		status := http.StatusPartialContent
		if changed {
			status = http.StatusOK
		}
		if gets := h.seen(cdnGets); len(gets) != 1 || gets[0].rng != "bytes=30000-" || gets[0].ifRange == "" || gets[0].status != status {
			t.Errorf("changed %v: CDN requests %+v, want one from byte 30000 with If-Range, answered %d", changed, gets, status)
		}
		if said := strings.Contains(log.String(), "the file changed on the server"); said != changed {
			t.Errorf("changed %v: progress:\n%s", changed, log.String())
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Errorf("changed %v: the directory holds %v", changed, entries)
		}
	}
}

// A part of a URL's file without a validator kept beside it, whose hash is
// not published, cannot be told to be of the same file: it is discarded.
func TestPullURLPartWithoutValidator(t *testing.T) {
	h := newFakeHub(t)
	body := h.add(repo+"/Model-Q8_0.gguf", 20_000)
	h.set(func() { h.noLinkedETag = true })
	dir := t.TempDir()
	final := filepath.Join(dir, "Model-Q8_0.gguf")
	if err := os.WriteFile(final+partExt, bytes.Repeat([]byte{0xAA}, 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	got, err := Pull(context.Background(), h.srv.URL+"/"+repo+"/resolve/main/Model-Q8_0.gguf", dir, pullOpts(h, &log))
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, got, body)
	if gets := h.seen(cdnGets); len(gets) != 1 || gets[0].rng != "" {
		t.Errorf("CDN requests %+v, want one whole GET", gets)
	}
	if !strings.Contains(log.String(), "cannot tell whether the partial download is of the same file; starting over") {
		t.Errorf("progress does not say it started over:\n%s", log.String())
	}
}

// A stale part of a hub file fails the hash once resumed: the download
// starts over once, and fails only if the whole file fails the hash too.
func TestPullStalePartStartsOver(t *testing.T) {
	h := newFakeHub(t)
	name := repo + "/Model-Q4_K_M.gguf"
	body := h.add(name, 3000)
	dir := t.TempDir()
	final := filepath.Join(dir, "Model-Q4_K_M.gguf")
	stale := bytes.Repeat([]byte{0xAA}, 1000)
	if err := os.WriteFile(final+partExt, stale, 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	got, err := Pull(context.Background(), repo, dir, pullOpts(h, &log))
	if err != nil {
		t.Fatalf("pull with a stale part: %v", err)
	}
	checkFile(t, got, body)
	gets := h.seen(cdnGets)
	if len(gets) != 2 || gets[0].rng != "bytes=1000-" || gets[0].status != 206 || gets[1].rng != "" || gets[1].status != 200 {
		t.Errorf("CDN requests %+v, want one from byte 1000, then a whole GET", gets)
	}
	if !strings.Contains(log.String(), "the resumed download does not have the published sha256; starting over") {
		t.Errorf("progress does not say it started over:\n%s", log.String())
	}

	// The hub publishes a wrong hash: one retry from the start, then
	// ErrChecksum, with nothing left.
	h.set(func() { h.requests, h.published[name] = nil, strings.Repeat("ab", 32) })
	os.Remove(final)
	if err := os.WriteFile(final+partExt, stale, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Pull(context.Background(), repo, dir, pullOpts(h, new(bytes.Buffer))); !errors.Is(err, ErrChecksum) {
		t.Fatalf("wrong published hash: error %v, want ErrChecksum", err)
	}
	if gets := h.seen(cdnGets); len(gets) != 2 || gets[1].rng != "" {
		t.Errorf("wrong published hash: CDN requests %+v, want a resume, then one whole GET", gets)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("wrong published hash: left %v in the directory", entries)
	}
}

// A pull that fails before the server sends the file leaves no part.
func TestPullFailureLeavesNoPart(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/gated.gguf":
			http.Error(w, "no", http.StatusUnauthorized)
		case "/down.gguf":
			http.Error(w, "down", http.StatusServiceUnavailable)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	for file, want := range map[string]string{
		"typo.gguf":  "404 Not Found",
		"gated.gguf": "401 Unauthorized",
		"down.gguf":  "gave up after 5 tries",
	} {
		dir := t.TempDir()
		_, err := Pull(context.Background(), srv.URL+"/"+file, dir, PullOptions{Client: srv.Client(), Backoff: func(int) time.Duration { return 0 }})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", file, err, want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			t.Errorf("%s: left %v in the directory", file, entries)
		}
	}
}

// A 416 to a resume, without Content-Range, from a server whose file size
// is unknown, does not say the part is complete: it is discarded.
func TestPull416WithoutSize(t *testing.T) {
	body := bytes.Repeat([]byte("C"), 100)
	var (
		mu   sync.Mutex
		reqs []string // Range and If-Range of each request
	)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reqs = append(reqs, r.Header.Get("Range")+"|"+r.Header.Get("If-Range"))
		mu.Unlock()
		if r.Header.Get("Range") != "" {
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		w.Header().Set("Etag", `"v"`)
		w.Write(body)
	}))
	defer srv.Close()
	dir := t.TempDir()
	part := filepath.Join(dir, "m.gguf") + partExt
	if err := os.WriteFile(part, bytes.Repeat([]byte("Z"), 250), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeValidator(part, `"v"`); err != nil {
		t.Fatal(err)
	}
	got, err := Pull(context.Background(), srv.URL+"/m.gguf", dir, PullOptions{Client: srv.Client(), Backoff: func(int) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, got, body)
	mu.Lock()
	defer mu.Unlock()
	if len(reqs) != 2 || reqs[0] != `bytes=250-|"v"` || reqs[1] != "|" {
		t.Errorf("requests (Range|If-Range) %q, want a resume from byte 250, then a whole GET", reqs)
	}
}

// hookWriter calls hook with each write before keeping it.
type hookWriter struct {
	bytes.Buffer
	hook func(string)
}

func (w *hookWriter) Write(b []byte) (int, error) {
	w.hook(string(b))
	return w.Buffer.Write(b)
}

// A pull that fails while the status line is on a terminal ends the line,
// for the error to go on one of its own.
func TestPullErrorEndsStatusLine(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.Write(make([]byte, 100))
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // the rest never comes
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &hookWriter{hook: func(s string) {
		if strings.HasPrefix(s, "\r") { // the status line is drawn: interrupt
			cancel()
		}
	}}
	_, err := Pull(ctx, srv.URL+"/m.gguf", t.TempDir(), PullOptions{Client: srv.Client(), Progress: out, Terminal: true})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if s := out.String(); !strings.Contains(s, "\rpulling m:  10%") || !strings.HasSuffix(s, "\n") {
		t.Errorf("output %q, want the status line ended", s)
	}
}

// A name given with .gguf in any case names the same model.
func TestPullNameExtension(t *testing.T) {
	h := newFakeHub(t)
	body := h.add(repo+"/Model-Q4_K_M.gguf", 1000)
	dir := t.TempDir()
	opt := pullOpts(h, new(bytes.Buffer))
	opt.Name = "Mine.GGUF"
	got, err := Pull(context.Background(), repo, dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "Mine.gguf"); got != want {
		t.Fatalf("path %s, want %s", got, want)
	}
	checkFile(t, got, body)
}

func sha256Hex(b []byte) string {
	return fmt.Sprintf("%x", sha256.Sum256(b))
}
