package web

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/wire"
)

func TestWantsHTML(t *testing.T) {
	for accept, want := range map[string]bool{
		"": false, "*/*": false, "application/json": false, "text/plain": false,
		"text/html": true, "TEXT/HTML; charset=utf-8": true,
		"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8": true,
		"application/json, text/html;q=0.5":                               true,
		"text/html;q=0":                                                   false, "text/html; q=0.0": false, "text/html;q=0.001": true,
	} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		if got := WantsHTML(r); got != want {
			t.Errorf("WantsHTML(Accept: %q) = %v, want %v", accept, got, want)
		}
	}
}

// TestPageIsOffline: nothing in the page's files refers to another origin
// (the only absolute URL is the SVG namespace, an identifier never
// fetched), and the page loads its assets from AssetPrefix.
func TestPageIsOffline(t *testing.T) {
	err := fs.WalkDir(static, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(static, path)
		if err != nil {
			return err
		}
		text := strings.ReplaceAll(string(b), `"http://www.w3.org/2000/svg"`, "")
		for _, bad := range []string{"http://", "https://", "//cdn", "@import"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s refers to %q", path, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	page, _ := static.ReadFile("static/index.html")
	for _, ref := range []string{`src="` + AssetPrefix + `app.js"`, `href="` + AssetPrefix + `style.css"`} {
		if !strings.Contains(string(page), ref) {
			t.Errorf("index.html lacks %s", ref)
		}
	}
}

// TestLiveNeedsAdmin: the live stream shows what only an admin may see
// (cached tokens, queues, load errors that name files): a caller with a
// user key gets 403 admin_required in OpenAI's envelope; an admin, and
// any caller of a server without keys (the zero Caller), get the stream.
func TestLiveNeedsAdmin(t *testing.T) {
	live := Live(LiveConfig{Models: func() Models { return nil }})
	for _, tc := range []struct {
		name   string
		caller gate.Caller
		status int
	}{
		{"user key", gate.Caller{Key: &gate.Key{ID: "u", Role: gate.RoleUser}}, http.StatusForbidden},
		{"admin key", gate.Caller{Key: &gate.Key{ID: "a", Role: gate.RoleAdmin}}, http.StatusOK},
		{"no keys", gate.Caller{}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				live.ServeHTTP(w, r.WithContext(gate.WithCaller(r.Context(), tc.caller)))
			}))
			defer srv.Close()
			resp, err := srv.Client().Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if tc.status == http.StatusForbidden {
				var env struct {
					Error struct{ Message, Type, Code string }
				}
				if err := json.NewDecoder(resp.Body).Decode(&env); err != nil || env.Error.Code != "admin_required" ||
					env.Error.Type != wire.TypeInvalidRequest || !strings.Contains(env.Error.Message, "admin") {
					t.Fatalf("403 body %+v, %v", env, err)
				}
				return
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Fatalf("Content-Type %q", ct)
			}
			ev, err := wire.NewReader(resp.Body).Next()
			var snap Snapshot
			if err != nil || json.Unmarshal(ev.Data, &snap) != nil || snap.Status != "loading" {
				t.Fatalf("first event %+v, %v", ev, err)
			}
		})
	}
}
