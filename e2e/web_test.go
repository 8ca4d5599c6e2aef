package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/server"
	"github.com/corral-llm/corral/web"
)

// TestRootServesPageToBrowsersOnly: GET / is the web page when the
// request accepts text/html, and the plain liveness answer otherwise
// (curl, Ollama's heartbeat); the page's assets are served under /ui/.
func TestRootServesPageToBrowsersOnly(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1})
	get := func(method, path, accept string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, ts.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := ts.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	const browser = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
	resp, body := get(http.MethodGet, "/", browser)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(body, `<script src="/ui/app.js"`) || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("GET / as a browser: %d %q CSP %q\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"), body)
	}
	for _, accept := range []string{"", "*/*", "application/json", "text/html;q=0"} {
		resp, body := get(http.MethodGet, "/", accept)
		if resp.StatusCode != 200 || body != "corral is running\n" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Errorf("GET / with Accept %q: %d %q %q", accept, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	if resp, body := get(http.MethodHead, "/", ""); resp.StatusCode != 200 || body != "" {
		t.Errorf("HEAD /: %d %q", resp.StatusCode, body)
	}
	for path, ctype := range map[string]string{"/ui/app.js": "text/javascript", "/ui/style.css": "text/css"} {
		resp, body := get(http.MethodGet, path, "")
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) || len(body) < 100 {
			t.Errorf("GET %s: %d %q, %d bytes", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
		}
	}
	for _, path := range []string{"/ui/nothing.js", "/ui/", "/ui/index.html"} {
		if resp, _ := get(http.MethodGet, path, ""); resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
}

// liveEvents reads the snapshots of a /v1/live stream.
type liveEvents struct {
	sseEvents
	resp *http.Response
}

// openLive opens GET /v1/live.
func openLive(t *testing.T, ts *e2etest.Server, ctx context.Context) liveEvents {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/v1/live", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ts.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET /v1/live: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return liveEvents{newSSEEvents(t, resp.Body), resp}
}

// next returns the next snapshot.
func (l liveEvents) next() web.Snapshot {
	l.t.Helper()
	ev := l.sseEvents.next()
	var s web.Snapshot
	if ev.IsComment || json.Unmarshal(ev.Data, &s) != nil {
		l.t.Fatalf("live event %+v", ev)
	}
	return s
}

// until returns the first snapshot for which cond holds, passing each
// snapshot read to seen (nil: none).
func (l liveEvents) until(what string, cond func(web.Snapshot) bool, seen func(web.Snapshot)) web.Snapshot {
	l.t.Helper()
	for {
		s := l.next()
		if seen != nil {
			seen(s)
		}
		if cond(s) {
			return s
		}
		l.t.Logf("waiting for %s: %+v", what, s.Models)
	}
}

// slotState is the state of the only slot of the only model in s.
func slotState(s web.Snapshot) string {
	if len(s.Models) != 1 || len(s.Models[0].Slots) != 1 {
		return ""
	}
	return s.Models[0].Slots[0].State
}

// TestLiveStream: GET /v1/live sends a snapshot at once, one when a slot
// changes state (a paced request pausing in it, then cancelled), periodic
// ones with the rate of their interval, the mean TTFT among them; and it
// ends with a "draining" snapshot when the server drains, after which the
// endpoint answers 503.
func TestLiveStream(t *testing.T) {
	ts := e2etest.Start(t, testmodel.TinyStories656K, e2etest.Options{Engine: engine.Config{Parallel: 1}})
	live := openLive(t, ts, context.Background())
	first := live.next()
	if first.Status != "ok" || len(first.Models) != 1 || first.Models[0].ID != "tiny" || first.Models[0].State != "loaded" ||
		slotState(first) != "idle" || first.Rate != nil || first.Models[0].KVTotal == 0 {
		t.Fatalf("first snapshot %+v", first)
	}

	// A paced answer pauses after its first chunk, holding the slot.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := ts.OpenStream(t, ctx, "/v1/chat/completions", map[string]any{
		"messages": []map[string]string{{"role": "user", "content": "Tell me a story."}},
		// ignore_eos: the answer cannot end before its first pause.
		"stream": true, "max_tokens": 200, "ignore_eos": true, "temperature": 0,
		"chunking": map[string]any{"pause_timeout": 600},
	})
	defer stream.Body.Close()
	var firstTokens uint64
	var ttft *float64
	count := func(s web.Snapshot) {
		if s.Rate != nil {
			firstTokens += s.Rate.FirstTokens
			if s.Rate.TTFTMs != nil {
				ttft = s.Rate.TTFTMs
			}
		}
	}
	paused := live.until("a paused slot", func(s web.Snapshot) bool { return slotState(s) == "paused" }, count)
	if sl := paused.Models[0].Slots[0]; sl.RequestID == 0 || sl.Decoded == 0 || sl.CachedTokens == 0 {
		t.Fatalf("paused slot %+v", sl)
	}
	cancel() // the client goes: the request ends, the slot goes idle
	live.until("the slot idle again", func(s web.Snapshot) bool { return slotState(s) == "idle" }, count)
	live.until("a rate counting the first token", func(s web.Snapshot) bool { return firstTokens > 0 }, count)
	if firstTokens != 1 || ttft == nil || *ttft <= 0 {
		t.Fatalf("rates counted %d first tokens, mean TTFT %v; want 1 and a time", firstTokens, ttft)
	}

	ts.Drain()
	last := live.until("the draining snapshot", func(s web.Snapshot) bool { return s.Status == "draining" }, nil)
	if len(last.Models) != 1 {
		t.Fatalf("draining snapshot %+v", last)
	}
	if ev, err := live.r.Next(); err != io.EOF {
		t.Fatalf("after the draining snapshot: %+v, %v; want the end of the stream", ev, err)
	}
	resp, b := ts.Do(t, context.Background(), http.MethodGet, "/v1/live", nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("GET /v1/live while draining: %d %s", resp.StatusCode, b)
	}
}

// TestLiveNeedsAdminKey: with API keys, the live stream (every slot's
// cached tokens, the queues, load errors that name files) is for admin
// keys: without a key GET /v1/live gets 401, with a user key 403
// admin_required in OpenAI's envelope, with an admin key (as a Bearer
// token or x-api-key) the stream.
func TestLiveNeedsAdminKey(t *testing.T) {
	const admin, user = "sk-corral-admin-0123456789", "sk-corral-user-0123456789"
	ts := e2etest.Start(t, testmodel.TinyStories656K, e2etest.Options{Engine: engine.Config{Parallel: 1},
		Server: server.Config{Policy: e2etest.KeyPolicy(t, nil, nil, admin+" role=admin name=admin", user+" name=user")}})
	open := func(header, value string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, ts.URL+"/v1/live", nil)
		if err != nil {
			t.Fatal(err)
		}
		if header != "" {
			req.Header.Set(header, value)
		}
		resp, err := ts.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	refused := func(resp *http.Response, status int, code string) {
		t.Helper()
		if resp.StatusCode != status { // the body may be the endless stream
			t.Fatalf("status %d %q, want %d", resp.StatusCode, resp.Header.Get("Content-Type"), status)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if typ, c := e2etest.ErrorOf(t, resp.Header.Get("Content-Type"), b); typ != "invalid_request_error" || c != code {
			t.Fatalf("error %s %s, want invalid_request_error %s: %s", typ, c, code, b)
		}
	}
	refused(open("", ""), http.StatusUnauthorized, "invalid_api_key")
	refused(open("Authorization", "Bearer sk-corral-wrong-0123456789"), http.StatusUnauthorized, "invalid_api_key")
	refused(open("Authorization", "Bearer "+user), http.StatusForbidden, "admin_required")
	refused(open("x-api-key", user), http.StatusForbidden, "admin_required")
	for _, h := range [][2]string{{"Authorization", "Bearer " + admin}, {"x-api-key", admin}} {
		resp := open(h[0], h[1])
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("GET /v1/live with the admin key in %s: %d %q %s", h[0], resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		snap := liveEvents{newSSEEvents(t, resp.Body), resp}.next()
		if snap.Status != "ok" || len(snap.Models) != 1 || snap.Models[0].ID != "tiny" || slotState(snap) != "idle" {
			t.Fatalf("first snapshot with the admin key in %s: %+v", h[0], snap)
		}
		resp.Body.Close()
	}
}
