package store

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// Plain http is refused (the URL, the hub's URL, a redirect to it) unless
// the pull is insecure.
func TestPullHTTPSOnly(t *testing.T) {
	plain := newPlainFakeHub(t)
	body := plain.add(repo+"/Model-Q8_0.gguf", 1000)
	url := plain.srv.URL + "/" + repo + "/resolve/main/Model-Q8_0.gguf"
	dir := t.TempDir()
	opt := PullOptions{Backoff: func(int) time.Duration { return 0 }}
	if _, err := Pull(context.Background(), url, dir, opt); err == nil || !strings.Contains(err.Error(), "not https (--insecure allows plain http)") {
		t.Errorf("http URL: error %v, want one refusing plain http", err)
	}
	opt.HubURL = plain.srv.URL
	if _, err := Pull(context.Background(), repo+":Q8_0", dir, opt); err == nil || !strings.Contains(err.Error(), "hub URL "+plain.srv.URL+": not https (--insecure allows plain http)") {
		t.Errorf("http hub: error %v, want one refusing the hub URL", err)
	}
	if reqs := plain.seen(func(hubRequest) bool { return true }); len(reqs) > 0 {
		t.Errorf("refused pulls made requests %+v", reqs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("refused pulls left %v in the directory", entries)
	}
	opt.Insecure = true
	got, err := Pull(context.Background(), url, dir, opt)
	if err != nil {
		t.Fatalf("insecure http URL: %v", err)
	}
	checkFile(t, got, body)

	// An https hub whose CDN is plain http.
	h := newFakeHub(t)
	h.add(repo+"/Model-Q8_0.gguf", 1000)
	h.set(func() { h.cdn = plain.srv.URL })
	plain.set(func() { plain.requests = nil })
	dir = t.TempDir()
	_, err = Pull(context.Background(), repo+":Q8_0", dir, pullOpts(h, new(bytes.Buffer)))
	if want := "Get " + plain.srv.URL + "/cdn/" + repo + "/Model-Q8_0.gguf: redirect refused: not https (--insecure allows plain http)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("redirect to http: error %v, want one containing %q", err, want)
	}
	if reqs := plain.seen(func(hubRequest) bool { return true }); len(reqs) > 0 {
		t.Errorf("redirect to http: the CDN got %+v", reqs)
	}
	if n := len(h.seen(func(r hubRequest) bool { return r.resolution })); n != 1 {
		t.Errorf("redirect to http: %d resolutions, want 1 (no retry)", n)
	}
	opt = pullOpts(h, new(bytes.Buffer))
	opt.Insecure = true
	got, err = Pull(context.Background(), repo+":Q8_0", dir, opt)
	if err != nil {
		t.Fatalf("insecure redirect to http: %v", err)
	}
	checkFile(t, got, body)
}
