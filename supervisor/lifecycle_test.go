package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/supervisor/agent"
)

// The tests in this file are a worker's server and its lifecycle: the
// kind of server and the readiness probe it gets, an operator's API key
// (api_key_env), the startup deadline, manual restarts, the expiry of
// unread results and remote workers.

// startSupervisor builds, starts and serves a supervisor over cfgs; it is
// stopped at the end of the test.
func startSupervisor(t *testing.T, cfgs ...WorkerConfig) (*Supervisor, *httptest.Server) {
	t.Helper()
	return startSupervisorWith(t, Options{}, cfgs...)
}

// startSupervisorWith is startSupervisor with opts. Its server runs the
// handler behind asCaller, the tests' stand-in for the gate.
func startSupervisorWith(t *testing.T, opts Options, cfgs ...WorkerConfig) (*Supervisor, *httptest.Server) {
	t.Helper()
	sup, err := New(cfgs, opts)
	if err != nil {
		t.Fatal(err)
	}
	return sup, serveSupervisor(t, sup, asCaller(sup.Handler()))
}

// serveSupervisor starts sup and serves h; both are stopped at the end of
// the test.
func serveSupervisor(t *testing.T, sup *Supervisor, h http.Handler) *httptest.Server {
	t.Helper()
	if err := sup.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		http.DefaultClient.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sup.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return srv
}

// tinyServeArgs are corral serve's arguments for the stories260K model
// after the default serve command.
func tinyServeArgs(t *testing.T) []string {
	return []string{"-m", testmodel.Path(t, testmodel.Stories260K), "--chat-template", "chatml", "-t", "1", "-c", "2048"}
}

func TestDetectKind(t *testing.T) {
	for _, c := range []struct {
		argv []string
		kind WorkerKind
		path string
	}{
		{DefaultServeCommand("/opt/bin/corral"), KindCorral, "/health"},
		{[]string{"/usr/local/bin/llama-server", "-m", "x.gguf"}, KindLlamaServer, "/health"},
		{[]string{"llama-server"}, KindLlamaServer, "/health"},
		{[]string{"vllm", "serve", "Qwen"}, KindVLLM, "/v1/models"},
		{[]string{"python3", "-m", "vllm.entrypoints.openai.api_server"}, KindVLLM, "/v1/models"},
		{[]string{"corral", "bench"}, KindOther, "/v1/models"},
		{[]string{"sh", "-c", "llama-server"}, KindOther, "/v1/models"},
		{nil, KindOther, "/v1/models"},
	} {
		if k := DetectKind(c.argv); k != c.kind || k.ReadinessPath() != c.path {
			t.Errorf("DetectKind(%q) = %s (%s), want %s (%s)", c.argv, k, k.ReadinessPath(), c.kind, c.path)
		}
	}
	// The worker applies it, and an explicit kind or path wins.
	w, err := NewWorker(WorkerConfig{Name: "a", Command: []string{"llama-server"}, Port: 9000})
	if err != nil || w.cfg.Kind != KindLlamaServer || w.cfg.Readiness.Path != "/health" {
		t.Fatalf("detected: %+v, %v", w.cfg, err)
	}
	w, err = NewWorker(WorkerConfig{Name: "a", Command: []string{"wrapper.sh"}, Kind: KindCorral, Port: 9000})
	if err != nil || w.cfg.Readiness.Path != "/health" {
		t.Fatalf("kind override: %+v, %v", w.cfg, err)
	}
	w, err = NewWorker(WorkerConfig{Name: "a", Command: []string{"llama-server"}, Port: 9000, Readiness: ReadinessProbe{Path: "/ready"}})
	if err != nil || w.cfg.Readiness.Path != "/ready" {
		t.Fatalf("path override: %+v, %v", w.cfg, err)
	}
	if _, err := NewWorker(WorkerConfig{Name: "a", Command: []string{"x"}, Kind: "ollama", Port: 9000}); err == nil {
		t.Fatal("unknown kind accepted")
	}
}

// TestE2EFalseReady runs the fake llama-server (see fakellama_test.go): its
// /v1/models answers 200 with JSON while /health says it still loads. The
// worker must stay RUNNING, refusing jobs, until /health says loaded.
func TestE2EFalseReady(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "loaded")
	w, err := NewWorker(WorkerConfig{
		Name: "llama", Command: []string{fakeLlamaBinary(t), "--host", "{host}", "--port", "{port}"},
		Port: freePort(t), Timeouts: fastTimeouts(), Env: map[string]string{fakeLlamaReadyEnv: ready},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	stopWorker(t, w)
	// The models endpoint already passes the reference design's probe...
	waitFor(t, readyTimeout, "the fake's /v1/models to answer", func() bool {
		return probeReady(context.Background(), http.DefaultClient, w.baseURL, ReadinessProbe{Path: "/v1/models"}) == nil
	})
	// ...but the worker probes /health, which said "loading" three times.
	waitFor(t, readyTimeout, "three /health probes", func() bool {
		return strings.Count(strings.Join(w.DebugInfo().RecentLogs, "\n"), "GET /health 503 loading") >= 3
	})
	if st := w.WorkerStatus(); st.State != WorkerRunning || st.Kind != KindLlamaServer {
		t.Fatalf("worker while the model loads: %+v", st)
	}
	if _, err := w.Submit(Job{UserPrompt: "hi"}); !errors.Is(err, ErrWorkerNotReady) {
		t.Fatalf("Submit while loading: %v, want ErrWorkerNotReady", err)
	}
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitState(t, w, WorkerReady, readyTimeout)
	id, err := w.Submit(Job{UserPrompt: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if _, res := finish(t, w, id); res.State != RequestCompleted || res.Text != "Hello world" {
		t.Fatalf("first job after READY: %+v", res)
	}
}

// TestE2EAPIKey runs the fake llama-server with LLAMA_API_KEY set, as
// llama-server --api-key (or its LLAMA_API_KEY) would: a worker without
// api_key_env is READY (/health is public) but its jobs get 401; one with
// api_key_env sends the key on jobs and proxied chat completions of a
// caller with a supervisor key, and the key shows up in no status, debug
// output or log.
func TestE2EAPIKey(t *testing.T) {
	const secret = "sk-test-7b1f0c2e9a"
	t.Setenv("LLAMA_API_KEY", secret) // inherited by the children
	ready := filepath.Join(t.TempDir(), "loaded")
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	logw := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := func(name, env string) WorkerConfig {
		return WorkerConfig{
			Name: name, Model: name, Command: []string{fakeLlamaBinary(t), "--host", "{host}", "--port", "{port}"},
			Port: freePort(t), Timeouts: fastTimeouts(), APIKeyEnv: env, Logger: logger,
			Env: map[string]string{fakeLlamaReadyEnv: ready},
		}
	}
	if _, err := NewWorker(cfg("x", "SUPERVISOR_TEST_UNSET_KEY")); err == nil || !strings.Contains(err.Error(), "SUPERVISOR_TEST_UNSET_KEY") {
		t.Fatalf("unset api_key_env: %v", err)
	}
	sup, srv := startSupervisorWith(t, Options{Keys: true}, cfg("nokey", ""), cfg("keyed", "LLAMA_API_KEY"))
	for _, w := range sup.Workers() {
		waitState(t, w, WorkerReady, readyTimeout)
	}
	run := func(worker string) JobResult {
		t.Helper()
		id, _, err := sup.Submit(as("alice"), Target{Worker: worker}, Job{UserPrompt: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, jobTimeout, "the job to end", func() bool {
			st, err := sup.Status(as("alice"), id)
			return err == nil && st.State.Terminal()
		})
		res, err := sup.Result(as("alice"), id)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := run("nokey"); res.FailReason != FailUpstream || !strings.Contains(res.FailDetail, "401") {
		t.Fatalf("job without the key: %+v", res)
	}
	if res := run("keyed"); res.State != RequestCompleted || res.Text != "Hello world" {
		t.Fatalf("job with the key: %+v", res)
	}
	var out struct {
		Choices []struct{ Message struct{ Content string } }
	}
	body := map[string]any{"model": "keyed", "messages": []map[string]string{{"role": "user", "content": "hi"}}}
	if code, _ := callJSON(t, "alice", "POST", srv.URL+"/v1/chat/completions", body, &out); code != 200 || len(out.Choices) != 1 || out.Choices[0].Message.Content != "Hello world" {
		t.Fatalf("proxied chat with the key: %d %+v", code, out)
	}
	var seen strings.Builder
	for _, path := range []string{"/v1/workers", "/v1/workers/keyed/debug", "/v1/workers/nokey/debug"} {
		var raw json.RawMessage
		if code, _ := callJSON(t, "root", "GET", srv.URL+path, nil, &raw); code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, raw)
		}
		seen.Write(raw)
	}
	fmt.Fprintf(&seen, "%+v", sup.Worker("keyed").cfg)
	seen.WriteString(logw.String())
	if strings.Contains(seen.String(), secret) {
		t.Fatal("the API key leaked into status, debug output, the config or the log")
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStartupTimeout runs a child that never listens (sleep): it restarts
// with startup_timeout, and the second such restart exceeds the crash-loop
// limit of one, making the worker FAILED; no child is left behind.
func TestStartupTimeout(t *testing.T) {
	tp := fastTimeouts()
	tp.MaxRestartsPerWindow = 1
	sup, _ := startSupervisor(t, WorkerConfig{
		Name: "hang", Command: []string{"sleep", "1000"}, Port: freePort(t), Timeouts: tp,
		StartupTimeout: 200 * time.Millisecond, StopTimeout: 5 * time.Second,
	})
	w := sup.Worker("hang")
	first := w.WorkerStatus().PID
	st := waitState(t, w, WorkerFailed, readyTimeout)
	if st.RestartCount != 1 || !strings.Contains(st.LastError, "startup_timeout") {
		t.Fatalf("FAILED status: %+v", st)
	}
	dbg := w.DebugInfo()
	if len(dbg.RecentRestartReasons) != 2 {
		t.Fatalf("restart records: %+v", dbg.RecentRestartReasons)
	}
	for _, r := range dbg.RecentRestartReasons {
		if r.Reason != FailStartupTimeout {
			t.Fatalf("restart records: %+v", dbg.RecentRestartReasons)
		}
	}
	if alive(first) || len(liveGroupMembers(first)) > 0 {
		t.Fatalf("the hung child %d survived its restart", first)
	}
	checkMetrics(t, scrape(t, sup.Handler()), map[string]float64{
		`corral_supervisor_worker_restarts_total{worker="hang",reason="startup_timeout"}`: 1,
		`corral_supervisor_workers{state="failed"}`:                                       1,
	})
}

// TestE2EManualRestart: a child that exits until a flag file exists
// (before exec'ing corral serve) makes the worker FAILED; POST
// /v1/workers/{name}/restart leaves FAILED and the worker serves.
func TestE2EManualRestart(t *testing.T) {
	flagFile := filepath.Join(t.TempDir(), "go")
	tp := fastTimeouts()
	tp.MaxRestartsPerWindow = 1
	cmd := append([]string{"sh", "-c", `[ -e "$GO_FLAG" ] || { echo "no flag yet"; exit 3; }; exec "$@"`, "sh"},
		append(DefaultServeCommand(corralBinary(t)), tinyServeArgs(t)...)...)
	sup, srv := startSupervisor(t, WorkerConfig{
		Name: "w", Model: "tiny", Command: cmd, Kind: KindCorral, Port: freePort(t), Timeouts: tp,
		StopTimeout: 5 * time.Second, Env: map[string]string{"GO_FLAG": flagFile},
	})
	w := sup.Worker("w")
	if w.cfg.Readiness.Path != "/health" {
		t.Fatalf("kind corral probes %s", w.cfg.Readiness.Path)
	}
	waitState(t, w, WorkerFailed, readyTimeout)
	var sub struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if code := doJSON(t, "POST", srv.URL+"/v1/jobs", map[string]any{"user_prompt": "x"}, &sub); code != 503 || sub.Error != "WORKER_FAILED" {
		t.Fatalf("job while FAILED: %d %+v", code, sub)
	}
	if code := doJSON(t, "POST", srv.URL+"/v1/workers/nope/restart", nil, &sub); code != 404 || sub.Error != "UNKNOWN_WORKER" {
		t.Fatalf("restart of an unknown worker: %d %+v", code, sub)
	}
	if err := os.WriteFile(flagFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var ok struct {
		OK     bool   `json:"ok"`
		Worker string `json:"worker"`
	}
	if code := doJSON(t, "POST", srv.URL+"/v1/workers/w/restart", nil, &ok); code != 200 || !ok.OK || ok.Worker != "w" {
		t.Fatalf("POST restart: %d %+v", code, ok)
	}
	st := waitState(t, w, WorkerReady, readyTimeout)
	if st.RestartCount != 2 || st.PID == 0 {
		t.Fatalf("after the manual restart: %+v", st)
	}
	id, _, err := sup.Submit(context.Background(), Target{}, Job{UserPrompt: "Once upon a time", Params: map[string]any{"max_tokens": 4}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, jobTimeout, "the job", func() bool { s, err := sup.Status(context.Background(), id); return err == nil && s.State.Terminal() })
	if res, err := sup.Result(context.Background(), id); err != nil || res.State != RequestCompleted {
		t.Fatalf("job after the manual restart: %+v %v", res, err)
	}
	recs := w.DebugInfo().RecentRestartReasons
	if last := recs[len(recs)-1]; last.Reason != FailManual || !strings.Contains(last.Detail, "/v1/workers/w/restart") {
		t.Fatalf("restart records: %+v", recs)
	}
	checkMetrics(t, scrape(t, sup.Handler()), map[string]float64{
		`corral_supervisor_worker_restarts_total{worker="w",reason="server_died"}`: 1,
		`corral_supervisor_worker_restarts_total{worker="w",reason="manual"}`:      1,
	})
	// A manual restart of a READY worker repaves it too.
	if err := w.Restart(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, readyTimeout, "the repaved worker", func() bool {
		s := w.WorkerStatus()
		return s.State == WorkerReady && s.RestartCount == 3 && s.PID != st.PID
	})
	// A stopped worker has nothing to restart.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sup.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Restart(ctx, ""); !errors.Is(err, ErrWorkerStopped) {
		t.Fatalf("Restart of a stopped worker: %v", err)
	}
}

// TestE2EResultsExpire drives expiry with the worker's clock and the
// sweep: results beyond max_results expire oldest first as jobs finish,
// the rest when result_ttl passes; both counts show in /v1/workers and the
// supervisor forgets the jobs.
func TestE2EResultsExpire(t *testing.T) {
	sup, srv := startSupervisor(t, WorkerConfig{
		Name: "w", Model: "tiny", Command: append(DefaultServeCommand(corralBinary(t)), tinyServeArgs(t)...),
		Port: freePort(t), Timeouts: fastTimeouts(), MaxResults: 2, ResultTTL: time.Hour,
	})
	w := sup.Worker("w")
	waitState(t, w, WorkerReady, readyTimeout)
	var skew atomic.Int64
	w.mu.Lock()
	w.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	w.mu.Unlock()
	var ids []string
	for range 3 {
		id, _, err := sup.Submit(context.Background(), Target{}, Job{UserPrompt: "Once upon a time", Params: map[string]any{"max_tokens": 3}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		waitFor(t, jobTimeout, "the job", func() bool { s, err := sup.Status(context.Background(), id); return err == nil && s.State.Terminal() })
	}
	workers := func() map[string]any {
		var ws struct{ Workers []map[string]any }
		if code := doJSON(t, "GET", srv.URL+"/v1/workers", nil, &ws); code != 200 || len(ws.Workers) != 1 {
			t.Fatalf("GET /v1/workers: %d %+v", code, ws)
		}
		return ws.Workers[0]
	}
	if ws := workers(); ws["results_kept"] != 2.0 || ws["results_expired"] != 1.0 {
		t.Fatalf("after 3 jobs with max_results 2: %v", ws)
	}
	var nf struct{ Error string }
	if code := doJSON(t, "GET", fmt.Sprintf("%s/v1/jobs/%s", srv.URL, ids[0]), nil, &nf); code != 404 || nf.Error != "NOT_FOUND" {
		t.Fatalf("the oldest unread result: %d %+v", code, nf)
	}
	if _, err := sup.Status(context.Background(), ids[1]); err != nil {
		t.Fatalf("a kept result: %v", err)
	}
	w.sweepResults() // not an hour old yet
	if ws := workers(); ws["results_kept"] != 2.0 {
		t.Fatalf("swept early: %v", ws)
	}
	skew.Store(int64(time.Hour))
	w.sweepResults()
	if ws := workers(); ws["results_kept"] != 0.0 || ws["results_expired"] != 3.0 {
		t.Fatalf("after result_ttl: %v", ws)
	}
	if v, ok := sample(scrape(t, sup.metricsHandler()), "corral_supervisor_results_expired_total", "worker", "w"); !ok || v != 3 {
		t.Errorf("corral_supervisor_results_expired_total = %v (%v), want 3", v, ok)
	}
	for _, id := range ids {
		if _, err := sup.Result(context.Background(), id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Result(%s) after expiry: %v", id, err)
		}
	}
	sup.mu.Lock()
	left := len(sup.jobs) + len(sup.refs)
	sup.mu.Unlock()
	if left != 0 {
		t.Fatalf("the supervisor still holds %d job entries", left)
	}
}

// TestE2ERemoteWorker runs corral serve as its own process, outside the
// supervisor, as a remote worker next to a local one: chat completions
// and jobs go to whichever has a free slot, the remote one has no pid, and
// when the remote server goes away the worker leaves READY.
func TestE2ERemoteWorker(t *testing.T) {
	bin := corralBinary(t)
	port := freePort(t)
	remote := exec.Command(bin, append([]string{"serve", "--host", "127.0.0.1", "--port", fmt.Sprint(port), "-np", "1", "--alias", "tiny"}, tinyServeArgs(t)...)...)
	var remoteLog bytes.Buffer
	remote.Stdout, remote.Stderr = &remoteLog, &remoteLog
	if err := remote.Start(); err != nil {
		t.Fatal(err)
	}
	remoteDone := make(chan struct{})
	go func() { remote.Wait(); close(remoteDone) }()
	t.Cleanup(func() {
		remote.Process.Kill()
		<-remoteDone
		if t.Failed() {
			t.Logf("remote corral serve:\n%s", remoteLog.String())
		}
	})
	b := newBlockingRunner()
	tools := func(c *WorkerConfig) {
		c.NormalTools, c.ToolRunner, c.MaxToolIterations, c.ToolFormat = []agent.ToolDef{lookupTool}, b, 1, agent.ToolFormatJSON
	}
	local := WorkerConfig{Name: "local", Model: "tiny", Command: append(DefaultServeCommand(bin), tinyServeArgs(t)...),
		Port: freePort(t), Slots: 1, Timeouts: fastTimeouts()}
	rem := WorkerConfig{Name: "remote", Model: "tiny", URL: fmt.Sprintf("http://127.0.0.1:%d/", port), Kind: KindCorral,
		Slots: 1, Timeouts: fastTimeouts()}
	tools(&local)
	tools(&rem)
	sup, srv := startSupervisor(t, local, rem)
	for _, w := range sup.Workers() {
		waitState(t, w, WorkerReady, readyTimeout)
	}
	if st := sup.Worker("remote").WorkerStatus(); st.PID != 0 || st.URL == "" || st.Kind != KindCorral {
		t.Fatalf("remote status: %+v", st)
	}
	// chat proxies a chat completion and waits until its slot is free
	// again (the handler releases it after the client read the end), when
	// the slots in use are those of the held jobs again.
	chat := func(held int) string {
		t.Helper()
		bb, _ := json.Marshal(map[string]any{"model": "tiny", "messages": []map[string]string{{"role": "user", "content": "Hi"}}, "max_tokens": 4})
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(bb))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("chat: status %d", resp.StatusCode)
		}
		waitFor(t, jobTimeout, "the proxied request's slot", func() bool {
			used := 0
			for _, w := range sup.Workers() {
				used += w.WorkerStatus().SlotsUsed
			}
			return used == held
		})
		return resp.Header.Get("X-Corral-Worker")
	}
	hold := func(worker string) string {
		t.Helper()
		id, got, err := sup.Submit(context.Background(), Target{Model: "tiny"}, Job{UserPrompt: "Look up cat.", Params: toolParams})
		if err != nil || got != worker {
			t.Fatalf("held job went to %q (%v), want %q", got, err, worker)
		}
		<-b.entered
		return id
	}
	// Both idle: ties go in configuration order. With local busy, the
	// job API and the router both pick the remote worker, and back.
	if got := chat(0); got != "local" {
		t.Fatalf("chat with both idle went to %q", got)
	}
	held := hold("local")
	if got := chat(1); got != "remote" {
		t.Fatalf("chat with local busy went to %q", got)
	}
	heldRemote := hold("remote")
	if _, _, err := sup.Submit(context.Background(), Target{Model: "tiny"}, Job{UserPrompt: "x"}); !errors.Is(err, ErrNoSlotAvailable) {
		t.Fatalf("both busy: %v", err)
	}
	sup.Cancel(context.Background(), held)
	if got := chat(1); got != "local" {
		t.Fatalf("chat with remote busy went to %q", got)
	}
	close(b.release) // the remote job's tool returns; it finishes on the remote server
	waitFor(t, jobTimeout, "the remote job", func() bool {
		s, err := sup.Status(context.Background(), heldRemote)
		return err == nil && s.State.Terminal()
	})
	if res, err := sup.Result(context.Background(), heldRemote); err != nil || res.State != RequestCompleted || res.Worker != "remote" || res.Text == "" {
		t.Fatalf("remote job: %+v %v", res, err)
	}
	// The remote server goes away: its probe fails and the worker leaves
	// READY; corral never had its pid and killed nothing.
	remote.Process.Signal(os.Interrupt)
	<-remoteDone
	waitFor(t, readyTimeout, "the remote worker to leave READY", func() bool {
		return sup.Worker("remote").WorkerStatus().State != WorkerReady
	})
	if st := sup.Worker("local").WorkerStatus(); st.State != WorkerReady || st.RestartCount != 0 {
		t.Fatalf("local worker: %+v", st)
	}
	if recs := sup.Worker("remote").DebugInfo().RecentRestartReasons; len(recs) == 0 || recs[0].Reason != FailProbe {
		t.Fatalf("remote restart records: %+v", recs)
	}
}
