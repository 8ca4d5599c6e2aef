package serving_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/anthropic"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llamacpp"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/ollama"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/responses"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// The test keys: two users, one with a priority class of its own, and an
// admin.
const (
	aliceSecret = "secret-alice01"
	bobSecret   = "secret-bob0001"
	rootSecret  = "secret-root001"
)

var testKeys = []string{
	aliceSecret + " role=user name=alice priority=5",
	bobSecret + " role=user name=bob",
	rootSecret + " role=admin name=root",
}

// realAPI serves a real engine of TinyStories656K, configured by cfg, as
// the one model "tiny", with opt.
func realAPI(t testing.TB, cfg engine.Config, opt serving.Options) (*serving.Core, *engine.Engine) {
	t.Helper()
	return realModelAPI(t, testmodel.TinyStories656K, cfg, opt)
}

// realModelAPI is realAPI with the test model name (testmodel.Stories260K,
// whose vocabulary writes JSON, where TinyStories656K's has no '{').
func realModelAPI(t testing.TB, name string, cfg engine.Config, opt serving.Options) (*serving.Core, *engine.Engine) {
	t.Helper()
	cfg.ModelPath = testmodel.Path(t, name)
	cfg.Threads = 1
	eng, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serveModel(t, eng, eng, cfg.ModelPath, model.Options{}, opt), eng
}

// serveModel serves served (eng, or a stand-in over it), the model at
// path, with mopt as the one pinned model "tiny" of a Core with opt;
// the registry and eng close when t ends, and eng at once when this
// fails.
func serveModel(t testing.TB, eng *engine.Engine, served model.Engine, path string, mopt model.Options, opt serving.Options) *serving.Core {
	t.Helper()
	m, err := model.New(served, mopt)
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	spec := registry.Spec{ID: "tiny", Engine: engine.Config{ModelPath: path}, Pinned: true}
	reg, err := registry.New(registry.Config{KeepAlive: -1}, []registry.Spec{spec},
		func(context.Context, registry.Spec) (*model.Model, error) { return m, nil })
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		reg.Close()
		eng.Close()
	})
	return serving.New(reg, opt)
}

// keyServer serves a's routes on loopback HTTP behind a stand-in for the
// server's gate: a request bearing one of testKeys is that key's caller,
// any other is refused with 401, and without keys every request is the
// zero caller (an admin).
func keyServer(t testing.TB, a *serving.Core, keys []string) *httptest.Server {
	t.Helper()
	byID := map[string]*gate.Key{}
	for _, spec := range keys {
		k, err := gate.ParseKey(spec)
		if err != nil {
			t.Fatal(err)
		}
		byID[strings.Fields(spec)[0]] = k
	}
	mux := http.NewServeMux()
	for pattern, h := range map[string]http.HandlerFunc{
		"POST /v1/chat/completions":               servetest.Bind(a, openai.ChatCompletions),
		"POST /v1/chat/completions/{id}/continue": servetest.Bind(a, openai.ContinueChat),
		"POST /v1/completions":                    servetest.Bind(a, openai.Completions),
		"POST /completion":                        servetest.Bind(a, llamacpp.Completion),
		"GET /slots":                              servetest.Bind(a, llamacpp.Slots),
		"GET /metrics":                            func(w http.ResponseWriter, r *http.Request) { a.Metrics(w, r, openai.WriteError) },
		"GET /props":                              servetest.Bind(a, llamacpp.Props),
		"GET /v1/models":                          servetest.Bind(a, openai.Models),
		"POST /api/show":                          servetest.Bind(a, ollama.Show),
		"POST /api/chat":                          servetest.Bind(a, ollama.Chat),
		"POST /v1/messages":                       servetest.Bind(a, anthropic.Messages),
		"POST /v1/messages/count_tokens":          servetest.Bind(a, anthropic.CountTokens),
	} {
		mux.Handle(pattern, h)
	}
	for _, r := range responses.Routes(responses.NewStore(responses.StoreOptions{})) {
		for _, path := range r.Paths {
			mux.Handle(r.Method+" "+path, servetest.Bind(a, r.Handler))
		}
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(byID) > 0 {
			k := byID[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
			if k == nil {
				openai.WriteError(w, &serving.Error{Status: http.StatusUnauthorized, Message: "no key"})
				return
			}
			r = r.WithContext(gate.WithCaller(r.Context(), gate.Caller{Key: k}))
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// keyed sends a request with the key's secret ("" for none) and returns
// the status and body. body nil sends a GET; header are name, value
// pairs.
func keyed(t *testing.T, ts *httptest.Server, secret, path string, body any, header ...string) (int, []byte) {
	t.Helper()
	status, b, err := send(ts, secret, path, body, header...)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return status, b
}

// send is keyed for any goroutine: it returns its failure.
func send(ts *httptest.Server, secret, path string, body any, header ...string) (int, []byte, error) {
	method, rd := http.MethodGet, io.Reader(nil)
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		method, rd = http.MethodPost, bytes.NewReader(b)
	}
	// A request that should end and waits instead fails the test.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, ts.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// errorOf decodes an error envelope.
func errorOf(t *testing.T, b []byte) wire.ErrorObject {
	t.Helper()
	var env struct {
		Error *wire.ErrorObject `json:"error"`
	}
	if err := json.Unmarshal(b, &env); err != nil || env.Error == nil {
		t.Fatalf("body %q is not an error envelope: %v", b, err)
	}
	return *env.Error
}

// TestPriorityByKey: a user key's request may not ask for a better class
// than its key's (403 naming priority, body or header alike), may ask
// for a worse one, and without asking gets its key's class; an admin may
// ask for any class within ±MaxPriority, and nobody beyond it.
func TestPriorityByKey(t *testing.T) {
	a, eng := realAPI(t, engine.Config{Parallel: 1, PauseGrace: time.Hour}, serving.Options{})
	ts := keyServer(t, a, testKeys)
	prompt := func(prio *int) map[string]any {
		b := map[string]any{"prompt": "Once upon a time", "max_tokens": 1}
		if prio != nil {
			b["priority"] = *prio
		}
		return b
	}
	p := func(n int) *int { return &n }
	for _, tt := range []struct {
		who    string
		secret string
		prio   *int
		header string
		status int
	}{
		{"alice, better than her class", aliceSecret, p(4), "", 403},
		{"alice, header better than her class", aliceSecret, nil, "-1", 403},
		{"alice, her class", aliceSecret, p(5), "", 200},
		{"alice, a worse class", aliceSecret, p(7), "", 200},
		{"bob, better than the default", bobSecret, p(-1), "", 403},
		{"bob, the default", bobSecret, p(0), "", 200},
		{"bob, beyond the bound", bobSecret, p(serving.MaxPriority + 1), "", 400},
		{"root, a better class", rootSecret, p(-serving.MaxPriority), "", 200},
		{"root, beyond the bound", rootSecret, p(-serving.MaxPriority - 1), "", 400},
		{"root, header beyond the bound", rootSecret, nil, "-1001", 400},
	} {
		var hdr []string
		if tt.header != "" {
			hdr = []string{serving.PriorityHeader, tt.header}
		}
		status, body := keyed(t, ts, tt.secret, "/v1/completions", prompt(tt.prio), hdr...)
		if status != tt.status {
			t.Errorf("%s: status %d, want %d: %s", tt.who, status, tt.status, body)
			continue
		}
		if status != 200 {
			e := errorOf(t, body)
			if deref(e.Param) != "priority" || (status == 403) != (deref(e.Code) == "priority_not_allowed") {
				t.Errorf("%s: error %+v, want param priority (code priority_not_allowed for a 403)", tt.who, e)
			}
		}
	}

	// Without asking, alice's request is of her key's class: it queues
	// as class 5 behind a paused answer holding the only slot.
	held := engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 200, Chunking: &engine.Chunking{},
		PauseTimeout: time.Hour, Priority: -serving.MaxPriority}
	blocker, err := eng.Submit(context.Background(), held)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := blocker.Recv(context.Background()); err != nil || !c.Held {
		t.Fatalf("the blocker's first chunk: %+v, %v", c, err)
	}
	done := make(chan string, 1)
	go func() {
		status, b, err := send(ts, aliceSecret, "/v1/completions", prompt(nil))
		done <- fmt.Sprintf("%d %s %v", status, b, err)
	}()
	var q []engine.ClassQueue
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.After(time.Minute); len(q) == 0; {
		select {
		case <-tick.C:
			q = eng.Stats().Queue
		case res := <-done:
			t.Fatalf("alice's request without a priority ended instead of queueing: %s", res)
		case <-deadline:
			t.Fatal("alice's request never queued")
		}
	}
	if !slices.Equal(q, []engine.ClassQueue{{Priority: 5, Queued: 1}}) {
		t.Errorf("alice's request without a priority queues as %+v, want class 5 (her key's)", q)
	}
	blocker.Cancel()
	if res := <-done; !strings.HasPrefix(res, "200 ") {
		t.Errorf("alice's request after the blocker: %s", res)
	}
}

// pacedBody is a streamed paced chat request that ends within its first
// chunk (3 tokens), with pause_timeout seconds when not 0.
func pacedBody(pause float64) map[string]any {
	chunking := map[string]any{}
	if pause != 0 {
		chunking["pause_timeout"] = pause
	}
	return map[string]any{"messages": []map[string]string{{"role": "user", "content": "Hi"}}, "max_tokens": 3,
		"stream": true, "chunking": chunking}
}

// TestPriorityInEveryDialect: every dialect that generates takes the
// request's priority into the core's admission: a user key asking for a
// better class than its key's is refused (403 naming priority), a worse
// one is served.
func TestPriorityInEveryDialect(t *testing.T) {
	a, _ := realAPI(t, engine.Config{Parallel: 1}, serving.Options{})
	ts := keyServer(t, a, testKeys)
	msgs := []map[string]string{{"role": "user", "content": "Hi"}}
	for _, tt := range []struct {
		path string
		body map[string]any
	}{
		{"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 1}},
		{"/v1/completions", map[string]any{"prompt": "Once", "max_tokens": 1}},
		{"/v1/messages", map[string]any{"model": "tiny", "messages": msgs, "max_tokens": 1}},
		{"/v1/responses", map[string]any{"model": "tiny", "input": "Hi", "max_output_tokens": 1}},
		{"/api/chat", map[string]any{"model": "tiny", "messages": msgs, "stream": false, "options": map[string]any{"num_predict": 1}}},
		{"/completion", map[string]any{"prompt": "Once", "n_predict": 1}},
	} {
		for _, prio := range []int{-1, 2} {
			body := maps.Clone(tt.body)
			body["priority"] = prio
			status, b := keyed(t, ts, bobSecret, tt.path, body)
			switch want := map[int]int{-1: 403, 2: 200}[prio]; {
			case status != want:
				t.Errorf("%s, priority %d: status %d, want %d: %s", tt.path, prio, status, want, b)
			case status == 403 && !strings.Contains(string(b), "priority"):
				t.Errorf("%s, priority %d: the refusal does not name priority: %s", tt.path, prio, b)
			}
		}
	}
}

// TestPauseCap: a user key may ask for a pause_timeout up to --max-pause,
// not beyond (400 naming the flag); an admin may.
func TestPauseCap(t *testing.T) {
	a, _ := realAPI(t, engine.Config{Parallel: 1}, serving.Options{MaxPause: 10 * time.Second})
	ts := keyServer(t, a, testKeys)
	for _, tt := range []struct {
		who    string
		secret string
		pause  float64
		status int
	}{
		{"bob, at the cap", bobSecret, 10, 200},
		{"bob, beyond the cap", bobSecret, 11, 400},
		{"alice, an hour", aliceSecret, 3600, 400},
		{"root, an hour", rootSecret, 3600, 200},
		{"root, beyond an hour", rootSecret, 3601, 400},
		{"bob, the default", bobSecret, 0, 200},
	} {
		status, body := keyed(t, ts, tt.secret, "/v1/chat/completions", pacedBody(tt.pause))
		if status != tt.status {
			t.Errorf("%s: status %d, want %d: %s", tt.who, status, tt.status, body)
			continue
		}
		if status == 200 && !bytes.Contains(body, []byte("[DONE]")) {
			t.Errorf("%s: stream %s did not end", tt.who, body)
		}
		if status == 400 && tt.pause < 3601 {
			if e := errorOf(t, body); deref(e.Param) != "chunking" || !strings.Contains(e.Message, "--max-pause") {
				t.Errorf("%s: error %+v, want param chunking and a message naming --max-pause", tt.who, e)
			}
		}
	}
}

// TestPauseDefaultWithinCap: a paced request that sets no pause_timeout
// waits engine.DefaultPauseTimeout, or --max-pause when that is shorter.
func TestPauseDefaultWithinCap(t *testing.T) {
	for _, tt := range []struct {
		maxPause, want time.Duration
	}{{0, engine.DefaultPauseTimeout}, {5 * time.Second, 5 * time.Second}} {
		fake := servetest.NewEngine()
		reg, err := registry.New(registry.Config{KeepAlive: -1}, []registry.Spec{{ID: "tiny"}},
			func(context.Context, registry.Spec) (*model.Model, error) { return model.New(fake, model.Options{}) })
		if err != nil {
			t.Fatal(err)
		}
		a := serving.New(reg, serving.Options{MaxPause: tt.maxPause})
		b, _ := json.Marshal(pacedBody(0))
		openai.ChatCompletions(a, httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(b)))
		reg.Close()
		if len(fake.Submitted) != 1 || fake.Submitted[0].PauseTimeout != tt.want {
			t.Errorf("--max-pause %v: submitted %+v, want a pause timeout of %v", tt.maxPause, fake.Submitted, tt.want)
		}
	}
}

// cachedOf returns the cached prompt tokens a completion reports: usage
// of /v1/completions or tokens_cached of /completion.
func cachedOf(t *testing.T, path string, status int, body []byte) (cached, prompt int) {
	t.Helper()
	if status != 200 {
		t.Fatalf("%s: status %d: %s", path, status, body)
	}
	if path == "/completion" {
		var r struct {
			TokensCached    int `json:"tokens_cached"`
			TokensEvaluated int `json:"tokens_evaluated"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		return r.TokensCached, r.TokensEvaluated
	}
	var r wire.TextCompletion
	if err := json.Unmarshal(body, &r); err != nil || r.Usage == nil {
		t.Fatalf("%s: %s: %v", path, body, err)
	}
	return r.Usage.PromptTokensDetails.CachedTokens, r.Usage.PromptTokens
}

// TestCacheSalt: requests with different cache_salt values reuse nothing
// of each other's prompt, whatever the endpoint (a second tenant sees 0
// cached tokens), while the same salt reuses it exactly; a salt must be
// a non-empty string of at most MaxCacheSalt bytes.
func TestCacheSalt(t *testing.T) {
	const prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside."
	for _, path := range []string{"/v1/completions", "/completion"} {
		t.Run(strings.TrimPrefix(path, "/"), func(t *testing.T) {
			a, _ := realAPI(t, engine.Config{Parallel: 3}, serving.Options{})
			ts := keyServer(t, a, nil)
			req := func(salt string) (int, int) {
				body := map[string]any{"prompt": prompt, "max_tokens": 2}
				if salt != "" {
					body["cache_salt"] = salt
				}
				status, b := keyed(t, ts, "", path, body)
				return cachedOf(t, path, status, b)
			}
			if c, _ := req("tenant-one"); c != 0 {
				t.Fatalf("first request: %d cached tokens", c)
			}
			if c, _ := req("tenant-two"); c != 0 {
				t.Errorf("another salt: %d cached tokens, want 0", c)
			}
			if c, _ := req(""); c != 0 {
				t.Errorf("no salt: %d cached tokens, want 0", c)
			}
			if c, n := req("tenant-one"); c != n-1 {
				t.Errorf("the first salt again: %d of %d prompt tokens cached, want all but the last", c, n)
			}
		})
	}
	a, _ := realAPI(t, engine.Config{Parallel: 1}, serving.Options{})
	ts := keyServer(t, a, nil)
	msgs := []map[string]string{{"role": "user", "content": "Hi"}}
	for _, salt := range []any{"", strings.Repeat("s", serving.MaxCacheSalt+1), 5} {
		status, b := keyed(t, ts, "", "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 1, "cache_salt": salt})
		if e := errorOf(t, b); status != 400 || deref(e.Param) != "cache_salt" {
			t.Errorf("cache_salt %.20v: status %d, error %+v; want 400 naming cache_salt", salt, status, e)
		}
	}
	status, b := keyed(t, ts, "", "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 1, "cache_salt": strings.Repeat("s", serving.MaxCacheSalt)})
	if status != 200 {
		t.Errorf("a salt of %d bytes: status %d: %s", serving.MaxCacheSalt, status, b)
	}
}

// TestCacheIsolationByKey: with CacheIsolationKey, two keys sending the
// same prompt share nothing (the second sees 0 cached tokens, on the
// HTTP API and through PacedChat, voice's way in), each finds its own
// prompt cached exactly, and a key's cache_salt splits its cache again;
// with CacheIsolationNone they share.
func TestCacheIsolationByKey(t *testing.T) {
	msgs := []map[string]string{{"role": "user", "content": "Tell me a story about a little girl named Lily and her dog."}}
	chat := func(salt string) map[string]any {
		b := map[string]any{"messages": msgs, "max_tokens": 2}
		if salt != "" {
			b["cache_salt"] = salt
		}
		return b
	}
	cached := func(t *testing.T, ts *httptest.Server, secret, salt string) (int, int) {
		t.Helper()
		status, b := keyed(t, ts, secret, "/v1/chat/completions", chat(salt))
		if status != 200 {
			t.Fatalf("status %d: %s", status, b)
		}
		var r wire.ChatCompletion
		if err := json.Unmarshal(b, &r); err != nil || r.Usage == nil {
			t.Fatalf("%s: %v", b, err)
		}
		return r.Usage.PromptTokensDetails.CachedTokens, r.Usage.PromptTokens
	}
	voice := func(t *testing.T, a *serving.Core, secret string) int {
		t.Helper()
		k, err := gate.ParseKey(testKeys[slices.IndexFunc(testKeys, func(s string) bool { return strings.HasPrefix(s, secret) })])
		if err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(map[string]any{"messages": msgs, "max_tokens": 2})
		ctx := gate.WithCaller(context.Background(), gate.Caller{Key: k})
		s, release, e := openai.Pacer{Core: a}.PacedChat(ctx, body, nil, nil)
		if e != nil {
			t.Fatal(e)
		}
		defer release()
		for {
			if _, err := s.Recv(ctx); err != nil {
				break
			}
		}
		return serving.PacedMetricsOf(s.Result()).CachedTokens
	}

	t.Run("key", func(t *testing.T) {
		a, _ := realAPI(t, engine.Config{Parallel: 3}, serving.Options{CacheIsolation: serving.CacheIsolationKey})
		ts := keyServer(t, a, testKeys)
		if c, _ := cached(t, ts, aliceSecret, ""); c != 0 {
			t.Fatalf("alice's first request: %d cached", c)
		}
		if c, _ := cached(t, ts, bobSecret, ""); c != 0 {
			t.Errorf("bob after alice: %d cached tokens, want 0", c)
		}
		if c := voice(t, a, rootSecret); c != 0 {
			t.Errorf("root's voice turn after alice and bob: %d cached tokens, want 0", c)
		}
		if c, n := cached(t, ts, aliceSecret, ""); c != n-1 {
			t.Errorf("alice again: %d of %d cached, want all but the last", c, n)
		}
		if c, n := cached(t, ts, bobSecret, ""); c != n-1 {
			t.Errorf("bob again: %d of %d cached, want all but the last", c, n)
		}
		if c := voice(t, a, aliceSecret); c == 0 {
			t.Errorf("alice's voice turn: nothing cached, want her prompt")
		}
		if c, _ := cached(t, ts, aliceSecret, "another"); c != 0 {
			t.Errorf("alice with a cache_salt: %d cached tokens, want 0", c)
		}
	})
	t.Run("none", func(t *testing.T) {
		a, _ := realAPI(t, engine.Config{Parallel: 3}, serving.Options{})
		ts := keyServer(t, a, testKeys)
		cached(t, ts, aliceSecret, "")
		if c, n := cached(t, ts, bobSecret, ""); c != n-1 {
			t.Errorf("bob after alice, no isolation: %d of %d cached, want all but the last", c, n)
		}
	})
}

// TestAdminOnlyInfo: /slots and /metrics answer only an admin (/metrics
// anyone with MetricsPublic); /props and /api/show give a user key no
// file path, an admin the model's path; and a failed load's cause (which
// names the file) goes only to an admin, on /v1/models and in the error
// of a request for the model.
func TestAdminOnlyInfo(t *testing.T) {
	for _, public := range []bool{false, true} {
		a, eng := realAPI(t, engine.Config{Parallel: 1}, serving.Options{MetricsPublic: public})
		ts := keyServer(t, a, testKeys)
		path := eng.Info().Path
		for _, tt := range []struct {
			path   string
			secret string
			status int
		}{
			{"/slots", bobSecret, 403},
			{"/slots", rootSecret, 200},
			{"/metrics", bobSecret, map[bool]int{false: 403, true: 200}[public]},
			{"/metrics", rootSecret, 200},
		} {
			status, b := keyed(t, ts, tt.secret, tt.path, nil)
			if status != tt.status {
				t.Errorf("GET %s as %s (metrics public %v): status %d, want %d: %.200s", tt.path, tt.secret, public, status, tt.status, b)
			}
			if status == 403 {
				if e := errorOf(t, b); deref(e.Code) != "admin_required" {
					t.Errorf("GET %s: error %+v, want code admin_required", tt.path, e)
				}
			}
		}
		for _, secret := range []string{bobSecret, rootSecret} {
			admin := secret == rootSecret
			_, props := keyed(t, ts, secret, "/props", nil)
			_, show := keyed(t, ts, secret, "/api/show", map[string]string{"model": "tiny"})
			for what, b := range map[string][]byte{"/props": props, "/api/show": show} {
				if has := bytes.Contains(b, []byte(path)); has != admin {
					t.Errorf("%s as %s: shows the model path %v, want %v: %.300s", what, secret, has, admin, b)
				}
				if !admin && bytes.Contains(b, []byte(filepath.Dir(path))) {
					t.Errorf("%s as %s: shows the model's folder: %.300s", what, secret, b)
				}
			}
		}
	}

	// A model whose file is no GGUF fails to load; its cause names the file.
	bad := filepath.Join(t.TempDir(), "broken.gguf")
	if err := os.WriteFile(bad, []byte("not a model"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(registry.Config{KeepAlive: -1}, []registry.Spec{{ID: "broken", Engine: engine.Config{ModelPath: bad}}}, model.Loader(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	ts := keyServer(t, serving.New(reg, serving.Options{}), testKeys)
	for _, secret := range []string{bobSecret, rootSecret} {
		admin := secret == rootSecret
		status, b := keyed(t, ts, secret, "/v1/completions", map[string]any{"model": "broken", "prompt": "x"})
		if e := errorOf(t, b); status != 500 || deref(e.Code) != "model_load_failed" || strings.Contains(e.Message, bad) != admin {
			t.Errorf("a request for the broken model as %s: %d %+v; want 500 model_load_failed, the path shown %v", secret, status, e, admin)
		}
		_, models := keyed(t, ts, secret, "/v1/models", nil)
		if !bytes.Contains(models, []byte(`"error"`)) || bytes.Contains(models, []byte(bad)) != admin {
			t.Errorf("/v1/models as %s: %s; want the load error, the path shown %v", secret, models, admin)
		}
	}
}

// TestNoKeysAllowsEverything: on a server without keys every caller is
// an admin, as before keys: any priority within the bound, a long pause,
// /slots, /metrics and the model's path.
func TestNoKeysAllowsEverything(t *testing.T) {
	a, eng := realAPI(t, engine.Config{Parallel: 1}, serving.Options{MaxPause: time.Second})
	ts := keyServer(t, a, nil)
	for _, c := range []struct {
		path string
		body any
	}{
		{"/v1/completions", map[string]any{"prompt": "Once", "max_tokens": 1, "priority": -serving.MaxPriority}},
		{"/v1/chat/completions", pacedBody(3600)},
		{"/slots", nil},
		{"/metrics", nil},
	} {
		if status, b := keyed(t, ts, "", c.path, c.body); status != 200 {
			t.Errorf("%s without keys: status %d: %.200s", c.path, status, b)
		}
	}
	if _, b := keyed(t, ts, "", "/props", nil); !bytes.Contains(b, []byte(eng.Info().Path)) {
		t.Errorf("/props without keys: %s, want the model path", b)
	}
}
