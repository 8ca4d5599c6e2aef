package supervisor

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-llm/corral/supervisor/process"
	"github.com/corral-llm/corral/wire"
)

// The tests in this file are the supervisor's side of API keys: job ids
// that cannot be guessed, jobs that belong to their caller, the byte
// budget of stored jobs, a worker's key lent only to authenticated
// callers, admin-only worker operations and secrets kept out of logs. The
// callers are simulated by asCaller (callers_test.go) in place of the
// gate; the workers are fake upstreams (fakeupstream_test.go).

// isJobID reports whether v is a job id: 26 digits of base32 (rand.Text).
func isJobID(v any) bool {
	s, ok := v.(string)
	if !ok || len(s) != 26 {
		return false
	}
	for _, c := range s {
		if !('A' <= c && c <= 'Z' || '2' <= c && c <= '7') {
			return false
		}
	}
	return true
}

// echoUpstream is a fake upstream that streams the content of a chat
// request's last message back as the answer, so that a job's result is as
// long as its prompt. A prompt that starts with "hold" is answered once
// release is closed; the prompt "echo-auth" gets a 500 whose body shows
// the Authorization header it came with, as a careless server's error
// might. It records the Authorization header of every chat request, and
// whether it asked for the usage (stream_options.include_usage), which it
// then reports as usage, if set, in a last chunk.
type echoUpstream struct {
	release chan struct{}
	usage   *wire.Usage // set before the first request

	mu           sync.Mutex
	auth         []string
	includeUsage []bool
}

func newEchoUpstream() *echoUpstream { return &echoUpstream{release: make(chan struct{})} }

func (e *echoUpstream) chat(w http.ResponseWriter, r *http.Request) {
	req, err := readChat(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	prompt := req.prompt()
	e.mu.Lock()
	e.auth = append(e.auth, r.Header.Get("Authorization"))
	e.includeUsage = append(e.includeUsage, req.StreamOptions.IncludeUsage)
	e.mu.Unlock()
	if strings.HasPrefix(prompt, "hold") {
		select {
		case <-e.release:
		case <-r.Context().Done():
			return
		}
	}
	if prompt == "echo-auth" {
		http.Error(w, "rejected Authorization: "+r.Header.Get("Authorization"), http.StatusInternalServerError)
		return
	}
	s := newSSEStub(w)
	if s.token(prompt) != nil {
		return
	}
	if e.usage != nil && req.StreamOptions.IncludeUsage {
		b, _ := json.Marshal(wire.ChatCompletionChunk{Choices: []wire.ChatChunkChoice{}, Usage: e.usage})
		if s.event(string(b)) != nil {
			return
		}
	}
	_ = s.done()
}

// askedUsage reports whether every chat request so far asked for the
// usage.
func (e *echoUpstream) askedUsage() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, asked := range e.includeUsage {
		if !asked {
			return false
		}
	}
	return len(e.includeUsage) > 0
}

// seenAuth returns the Authorization headers of the chat requests so far.
func (e *echoUpstream) seenAuth() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.auth...)
}

// fakeConfig is fakeUpstreamConfig with a short stop timeout: the
// children here are sleep (or exec it), which as the first process of a
// PID namespace ignores SIGTERM and waits for the SIGKILL.
func fakeConfig(t *testing.T, name string, slots int, child []string, chat http.HandlerFunc) WorkerConfig {
	t.Helper()
	cfg := fakeUpstreamConfig(t, name, slots, child, chat)
	cfg.StopTimeout = 100 * time.Millisecond
	return cfg
}

// fakeSupervisor starts a supervisor over cfgs, serves it behind asCaller
// and waits until every worker is READY.
func fakeSupervisor(t *testing.T, opts Options, cfgs ...WorkerConfig) (*Supervisor, *httptest.Server) {
	t.Helper()
	sup, srv := startSupervisorWith(t, opts, cfgs...)
	for _, w := range sup.Workers() {
		waitState(t, w, WorkerReady, readyTimeout)
	}
	return sup, srv
}

// submitAs posts job as the caller key and returns the job id; anything
// but 200 fails the test.
func submitAs(t *testing.T, srv *httptest.Server, key string, job map[string]any) string {
	t.Helper()
	var sub struct {
		OK        bool   `json:"ok"`
		RequestID string `json:"request_id"`
		Error     string `json:"error"`
	}
	if code, _ := callJSON(t, key, "POST", srv.URL+"/v1/jobs", job, &sub); code != http.StatusOK || !sub.OK {
		t.Fatalf("POST /v1/jobs as %q: %d %+v", key, code, sub)
	}
	return sub.RequestID
}

// waitJobDone polls GET /v1/jobs/{id} as key until the job has ended.
func waitJobDone(t *testing.T, srv *httptest.Server, key, id string) {
	t.Helper()
	waitFor(t, jobTimeout, "job "+id+" to end", func() bool {
		var st JobStatus
		if code, _ := callJSON(t, key, "GET", srv.URL+"/v1/jobs/"+id, nil, &st); code != http.StatusOK {
			t.Fatalf("GET /v1/jobs/%s as %q: %d", id, key, code)
		}
		return st.State.Terminal()
	})
}

// TestJobIDsAreRandom submits jobs and checks their ids: 26 digits of
// base32 each, all different, each answering its status and result. (They
// were 1, 2, 3…: anyone could read, and so delete, everyone's results.)
func TestJobIDsAreRandom(t *testing.T) {
	e := newEchoUpstream()
	_, srv := fakeSupervisor(t, Options{}, fakeConfig(t, "w", 1, sleepingChild, e.chat))
	seen := map[string]bool{}
	for range 3 {
		id := submitAs(t, srv, "", map[string]any{"user_prompt": "hi"})
		if !isJobID(id) || seen[id] {
			t.Fatalf("job id %q: want 26 base32 digits, unlike the earlier ones %v", id, seen)
		}
		seen[id] = true
		waitJobDone(t, srv, "", id)
		var res JobResult
		if code, _ := callJSON(t, "", "GET", srv.URL+"/v1/jobs/"+id+"/result", nil, &res); code != http.StatusOK ||
			res.RequestID != id || res.Text != "hi" || res.WorkerRequestID != int64(len(seen)) {
			t.Fatalf("result of %s: %d %+v", id, code, res)
		}
	}
}

// TestJobsBelongToTheirCaller submits a job as alice: bob gets 404
// NOT_FOUND for its status, its result and its cancellation, as for an id
// never issued, and neither cancels nor consumes it; alice and the admin
// see it, and alice reads its result.
func TestJobsBelongToTheirCaller(t *testing.T) {
	e := newEchoUpstream()
	_, srv := fakeSupervisor(t, Options{}, fakeConfig(t, "w", 1, sleepingChild, e.chat))
	id := submitAs(t, srv, "alice", map[string]any{"user_prompt": "hold on"})
	jobURL := srv.URL + "/v1/jobs/" + id
	notFound := func(what, method, url string) {
		t.Helper()
		var raw map[string]any
		if code, _ := callJSON(t, "bob", method, url, nil, &raw); code != http.StatusNotFound || raw["ok"] != false || raw["error"] != "NOT_FOUND" {
			t.Fatalf("bob's %s of alice's job: %d %v", what, code, raw)
		}
	}
	notFound("status", "GET", jobURL)
	notFound("result", "GET", jobURL+"/result")
	notFound("cancel", "DELETE", jobURL)
	notFound("status of an id never issued", "GET", srv.URL+"/v1/jobs/AAAAAAAAAAAAAAAAAAAAAAAAAA")
	var st JobStatus
	if code, _ := callJSON(t, "alice", "GET", jobURL, nil, &st); code != http.StatusOK || st.State != RequestRunning || st.RequestID != id {
		t.Fatalf("alice's status of her job after bob's cancel: %d %+v", code, st)
	}
	close(e.release)
	waitJobDone(t, srv, "alice", id)
	notFound("result of the finished job", "GET", jobURL+"/result")
	if code, _ := callJSON(t, "root", "GET", jobURL, nil, &st); code != http.StatusOK || st.State != RequestCompleted {
		t.Fatalf("the admin's status of alice's job: %d %+v", code, st)
	}
	var res JobResult
	if code, _ := callJSON(t, "alice", "GET", jobURL+"/result", nil, &res); code != http.StatusOK || res.Text != "hold on" {
		t.Fatalf("alice's result: %d %+v", code, res)
	}
	// An admin reads (and so releases) anyone's result.
	id = submitAs(t, srv, "bob", map[string]any{"user_prompt": "hi"})
	waitJobDone(t, srv, "bob", id)
	if code, _ := callJSON(t, "root", "GET", srv.URL+"/v1/jobs/"+id+"/result", nil, &res); code != http.StatusOK || res.Text != "hi" {
		t.Fatalf("the admin's read of bob's result: %d %+v", code, res)
	}
}

// TestJobStorageBudget runs jobs of 600 bytes under max_job_bytes 1000:
// the body of a job in flight and then its unread result hold the budget,
// so a second job gets 503 JOB_STORAGE_FULL with Retry-After (the worker
// has free slots); reading the result, or its expiry, gives the bytes
// back. A job larger than the budget is 413 JOB_TOO_LARGE.
func TestJobStorageBudget(t *testing.T) {
	e := newEchoUpstream()
	sup, srv := fakeSupervisor(t, Options{MaxJobBytes: 1000}, fakeConfig(t, "w", 4, sleepingChild, e.chat))
	w := sup.Worker("w")
	prompt := strings.Repeat("a", 600)
	held := "hold" + prompt[4:]
	bytesHeld := func(want float64, refused float64) {
		t.Helper()
		checkMetrics(t, scrape(t, sup.Handler()), map[string]float64{
			`corral_supervisor_job_bytes`:                       want,
			`corral_supervisor_job_bytes_max`:                   1000,
			`corral_supervisor_jobs_refused_storage_full_total`: refused,
		})
	}
	refused := func(what string) {
		t.Helper()
		var raw map[string]any
		code, h := callJSON(t, "", "POST", srv.URL+"/v1/jobs", map[string]any{"user_prompt": prompt}, &raw)
		if code != http.StatusServiceUnavailable || raw["ok"] != false || raw["error"] != "JOB_STORAGE_FULL" ||
			!strings.Contains(raw["detail"].(string), "max_job_bytes") || h.Get("Retry-After") != "10" {
			t.Fatalf("job %s: %d %v (Retry-After %q)", what, code, raw, h.Get("Retry-After"))
		}
	}
	id := submitAs(t, srv, "", map[string]any{"user_prompt": held})
	bytesHeld(600, 0)
	refused("beside one in flight")
	close(e.release)
	waitJobDone(t, srv, "", id)
	bytesHeld(600, 1) // the body went back, the result came
	refused("beside an unread result")
	if st := w.WorkerStatus(); st.SlotsUsed != 0 || st.SlotsTotal != 4 {
		t.Fatalf("refused for want of slots? %+v", st)
	}
	var res JobResult
	if code, _ := callJSON(t, "", "GET", srv.URL+"/v1/jobs/"+id+"/result", nil, &res); code != http.StatusOK || res.Text != held {
		t.Fatalf("result: %d %d bytes", code, len(res.Text))
	}
	bytesHeld(0, 2)
	id = submitAs(t, srv, "", map[string]any{"user_prompt": prompt})
	waitJobDone(t, srv, "", id)
	bytesHeld(600, 2)
	// The result expires unread: its bytes come back too.
	w.mu.Lock()
	w.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	w.mu.Unlock()
	w.sweepResults()
	bytesHeld(0, 2)
	var raw map[string]any
	if code, _ := callJSON(t, "", "POST", srv.URL+"/v1/jobs", map[string]any{"user_prompt": strings.Repeat("a", 1001)}, &raw); code != http.StatusRequestEntityTooLarge || raw["error"] != "JOB_TOO_LARGE" {
		t.Fatalf("a job larger than max_job_bytes: %d %v", code, raw)
	}
	bytesHeld(0, 2)
	cfg, err := ParseConfig([]byte("max_job_bytes: 1000\nworkers: [{name: w, command: [x], port: 1}]\n"), "")
	if err != nil || cfg.MaxJobBytes != 1000 {
		t.Fatalf("max_job_bytes in YAML: %+v, %v", cfg, err)
	}
	if _, err := ParseConfig([]byte("max_job_bytes: -1\nworkers: [{name: w, command: [x], port: 1}]\n"), ""); err == nil {
		t.Fatal("negative max_job_bytes accepted")
	}
}

// testWorkerKeyEnv holds the API key of the tests' keyed workers.
const testWorkerKeyEnv = "SUPERVISOR_TEST_WORKER_KEY"

// TestWorkerKeyIsNotLent: a worker with api_key_env needs a supervisor
// with keys, and its key goes only with the requests of callers that
// presented one. A caller without a key gets 401 for a job or chat
// completion only keyed workers could take, and is routed to a worker
// without a key where there is one: the keyed worker's server never sees
// its key on its behalf.
func TestWorkerKeyIsNotLent(t *testing.T) {
	const key = "wk-5e1f2a3b4c5d6e7f"
	t.Setenv(testWorkerKeyEnv, key)
	keyedUp, openUp, onlyUp := newEchoUpstream(), newEchoUpstream(), newEchoUpstream()
	keyed := fakeConfig(t, "keyed", 2, sleepingChild, keyedUp.chat)
	keyed.Model, keyed.APIKeyEnv = "m", testWorkerKeyEnv
	open := fakeConfig(t, "open", 2, sleepingChild, openUp.chat)
	open.Model = "m"
	only := fakeConfig(t, "only", 2, sleepingChild, onlyUp.chat)
	only.Model, only.APIKeyEnv = "k", testWorkerKeyEnv
	if _, err := New([]WorkerConfig{keyed}, Options{}); err == nil || !strings.Contains(err.Error(), "api_key_env") {
		t.Fatalf("a keyed worker in a supervisor without keys: %v", err)
	}
	_, srv := fakeSupervisor(t, Options{Keys: true}, keyed, open, only)

	// Without a key: 401 where only keyed workers could serve.
	var raw map[string]any
	code, h := callJSON(t, "", "POST", srv.URL+"/v1/jobs", map[string]any{"worker": "keyed", "user_prompt": "hi"}, &raw)
	if code != http.StatusUnauthorized || raw["error"] != "AUTHENTICATION_REQUIRED" || h.Get("WWW-Authenticate") != "Bearer" {
		t.Fatalf("anonymous job on the keyed worker: %d %v", code, raw)
	}
	var oaiErr struct {
		Error struct{ Code, Type string }
	}
	chat := func(model, content string) map[string]any {
		return map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": content}}}
	}
	if code, _ := callJSON(t, "", "POST", srv.URL+"/v1/chat/completions", chat("k", "hi"), &oaiErr); code != http.StatusUnauthorized ||
		oaiErr.Error.Code != "authentication_required" {
		t.Fatalf("anonymous chat with the keyed model: %d %+v", code, oaiErr)
	}
	// Without a key, model m goes to the worker without one, although
	// the keyed one comes first (ties go in configuration order).
	if code, h := callJSON(t, "", "POST", srv.URL+"/v1/chat/completions", chat("m", "hi"), nil); code != http.StatusOK || h.Get("X-Corral-Worker") != "open" {
		t.Fatalf("anonymous chat with model m: %d, worker %q", code, h.Get("X-Corral-Worker"))
	}
	id := submitAs(t, srv, "", map[string]any{"model": "m", "user_prompt": "hi"})
	waitJobDone(t, srv, "", id)
	var res JobResult
	if code, _ := callJSON(t, "", "GET", srv.URL+"/v1/jobs/"+id+"/result", nil, &res); code != http.StatusOK || res.Worker != "open" {
		t.Fatalf("anonymous job for model m: %d %+v", code, res)
	}
	if a := append(keyedUp.seenAuth(), onlyUp.seenAuth()...); len(a) != 0 {
		t.Fatalf("the keyed workers got requests for anonymous callers: %q", a)
	}
	if a := openUp.seenAuth(); len(a) != 2 || a[0] != "" || a[1] != "" {
		t.Fatalf("the worker without a key got %q", a)
	}

	// With a key: the worker's key goes upstream.
	id = submitAs(t, srv, "alice", map[string]any{"worker": "keyed", "user_prompt": "hi"})
	waitJobDone(t, srv, "alice", id)
	if code, _ := callJSON(t, "alice", "GET", srv.URL+"/v1/jobs/"+id+"/result", nil, &res); code != http.StatusOK || res.Text != "hi" {
		t.Fatalf("alice's job on the keyed worker: %d %+v", code, res)
	}
	if code, _ := callJSON(t, "alice", "POST", srv.URL+"/v1/chat/completions", chat("k", "hi"), nil); code != http.StatusOK {
		t.Fatalf("alice's chat with model k: %d", code)
	}
	want := "Bearer " + key
	if a := append(keyedUp.seenAuth(), onlyUp.seenAuth()...); len(a) != 2 || a[0] != want || a[1] != want {
		t.Fatalf("the keyed workers got %q for alice, want the worker key twice", a)
	}
}

// TestDebugAndRestartAreAdminOnly: a user key gets 403 FORBIDDEN for a
// worker's debug output (child logs: prompts, command lines) and for a
// restart, which does not happen; an admin key gets both.
func TestDebugAndRestartAreAdminOnly(t *testing.T) {
	e := newEchoUpstream()
	sup, srv := fakeSupervisor(t, Options{}, fakeConfig(t, "w", 1, sleepingChild, e.chat))
	w := sup.Worker("w")
	for _, c := range []struct{ method, path string }{{"GET", "/v1/workers/w/debug"}, {"POST", "/v1/workers/w/restart"}} {
		var raw map[string]any
		if code, _ := callJSON(t, "alice", c.method, srv.URL+c.path, nil, &raw); code != http.StatusForbidden ||
			raw["ok"] != false || raw["error"] != "FORBIDDEN" || raw["recent_logs"] != nil {
			t.Fatalf("%s %s with a user key: %d %v", c.method, c.path, code, raw)
		}
	}
	if st := w.WorkerStatus(); st.RestartCount != 0 {
		t.Fatalf("a user key restarted the worker: %+v", st)
	}
	var debug WorkerDebugInfo
	if code, _ := callJSON(t, "root", "GET", srv.URL+"/v1/workers/w/debug", nil, &debug); code != http.StatusOK || debug.RecentRestartReasons == nil {
		t.Fatalf("debug with an admin key: %d %+v", code, debug)
	}
	var ok struct{ OK bool }
	if code, _ := callJSON(t, "root", "POST", srv.URL+"/v1/workers/w/restart", nil, &ok); code != http.StatusOK || !ok.OK {
		t.Fatalf("restart with an admin key: %d %+v", code, ok)
	}
	waitFor(t, readyTimeout, "the restart", func() bool { st := w.WorkerStatus(); return st.RestartCount == 1 && st.State == WorkerReady })
	if recs := w.DebugInfo().RecentRestartReasons; len(recs) != 1 || !strings.Contains(recs[0].Detail, "from root at ") {
		t.Fatalf("restart records: %+v", recs)
	}
}

// TestSecretsStayOutOfLogs runs a worker with api_key_env whose child
// prints its command line (with --api-key KEY and HF_TOKEN=…), an
// Authorization and an x-api-key header line with the key, its
// environment's token and the bare key, and whose upstream answers one job
// with an error that shows the Authorization header it got. After jobs, a
// proxied chat completion and a restart, neither the key nor the token is
// in the supervisor's log, the child's lines on its stderr, the debug
// output, the worker status or the job's status and result.
func TestSecretsStayOutOfLogs(t *testing.T) {
	const key, token = "wk-7c0ffee1d2e3f405", "hf_tok_5d4c3b2a1908"
	t.Setenv(testWorkerKeyEnv, key)
	e := newEchoUpstream()
	script := `echo "serving with $*"; echo "Authorization: Bearer $` + testWorkerKeyEnv + `"; ` +
		`echo "x-api-key: $` + testWorkerKeyEnv + `"; echo "hub token $HF_TOKEN"; echo "raw $` + testWorkerKeyEnv + `"; exec sleep 3600`
	cfg := fakeConfig(t, "w", 1, []string{"sh", "-c", script, "sh", "--api-key", key, "HF_TOKEN=" + token}, e.chat)
	cfg.APIKeyEnv, cfg.Env = testWorkerKeyEnv, map[string]string{"HF_TOKEN": token}
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sup, err := New([]WorkerConfig{cfg}, Options{Keys: true})
	if err != nil {
		t.Fatal(err)
	}
	w := sup.Worker("w")
	w.procOpts.SetStderr(logs)
	srv := serveSupervisor(t, sup, asCaller(sup.Handler()))
	waitState(t, w, WorkerReady, readyTimeout)

	var seen strings.Builder
	get := func(key, path string) string {
		t.Helper()
		var raw json.RawMessage
		if code, _ := callJSON(t, key, "GET", srv.URL+path, nil, &raw); code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, raw)
		}
		seen.Write(raw)
		return string(raw)
	}
	id := submitAs(t, srv, "alice", map[string]any{"user_prompt": "echo-auth"})
	waitJobDone(t, srv, "alice", id)
	get("alice", "/v1/jobs/"+id)
	if res := get("alice", "/v1/jobs/"+id+"/result"); !strings.Contains(res, "Authorization: Bearer [redacted]") {
		t.Fatalf("the upstream's error did not come through: %s", res)
	}
	id = submitAs(t, srv, "alice", map[string]any{"user_prompt": "hi"})
	waitJobDone(t, srv, "alice", id)
	get("alice", "/v1/jobs/"+id+"/result")
	body := map[string]any{"model": "w", "messages": []map[string]string{{"role": "user", "content": "hi"}}}
	if code, _ := callJSON(t, "alice", "POST", srv.URL+"/v1/chat/completions", body, nil); code != http.StatusOK {
		t.Fatalf("proxied chat: %d", code)
	}
	if code, _ := callJSON(t, "root", "POST", srv.URL+"/v1/workers/w/restart", nil, nil); code != http.StatusOK {
		t.Fatalf("restart: %d", code)
	}
	waitFor(t, readyTimeout, "the restart", func() bool { st := w.WorkerStatus(); return st.RestartCount == 1 && st.State == WorkerReady })
	// The second child's lines are in the ring once its last one is.
	waitFor(t, readyTimeout, "the child's lines", func() bool {
		return strings.Count(strings.Join(w.DebugInfo().RecentLogs, "\n"), "stdout: raw ") == 2
	})
	debug := get("root", "/v1/workers/w/debug")
	get("", "/v1/workers")
	for _, want := range []string{"serving with --api-key [redacted] HF_TOKEN=[redacted]", "Authorization: Bearer [redacted]",
		"x-api-key: [redacted]", "hub token [redacted]", "raw [redacted]"} {
		if !strings.Contains(debug, want) {
			t.Errorf("debug output lacks %q: %s", want, debug)
		}
	}
	seen.WriteString(logs.String())
	for _, want := range []string{"worker started", "[w] stdout: raw [redacted]", "[w] corral: started pid", "worker restart"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	for _, secret := range []string{key, token} {
		if strings.Contains(seen.String(), secret) {
			t.Errorf("%q leaked:\n%s", secret, seen.String())
		}
	}
}

// TestRedactHandler logs secrets through a worker's redacting handler in
// every shape an attribute takes: message, string, error, []string (a
// command line), group, and attributes added by With.
func TestRedactHandler(t *testing.T) {
	var buf strings.Builder
	r := process.NewRedactor("wk-0123456789")
	log := slog.New(redactHandler{slog.NewTextHandler(&buf, nil), r}).With("with", "key wk-0123456789")
	log.Info("message wk-0123456789",
		"string", "Authorization: Bearer abcdef",
		"error", errors.New("upstream said x-api-key: qwerty"),
		"command", []string{"llama-server", "--api-key", "plain-secret"},
		slog.Group("group", "env", "HF_TOKEN=hf_zzzz"))
	out := buf.String()
	for _, secret := range []string{"wk-0123456789", "abcdef", "qwerty", "plain-secret", "hf_zzzz"} {
		if strings.Contains(out, secret) {
			t.Errorf("%q leaked: %s", secret, out)
		}
	}
	if strings.Count(out, process.Redacted) != 6 {
		t.Errorf("want 6 redactions: %s", out)
	}
}
