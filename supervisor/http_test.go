package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/supervisor/agent"
	"github.com/corral-llm/corral/wire"
)

// doJSON does an HTTP request and decodes the JSON answer into out (if not
// nil), returning the status code.
func doJSON(t *testing.T, method, url string, body any, out any) int {
	t.Helper()
	code, _ := callJSON(t, "", method, url, body, out)
	return code
}

// callJSON is doJSON as the caller of testKeys[key] (none for ""), with
// the answer's headers.
func callJSON(t *testing.T, key, method, url string, body any, out any) (int, http.Header) {
	t.Helper()
	if key == "" {
		return sendJSON(t, "", "", method, url, body, out)
	}
	return sendJSON(t, testKeyHeader, key, method, url, body, out)
}

// sendJSON does an HTTP request with the JSON of body (none if nil) and
// the header name: value (none for ""), and decodes the JSON answer into
// out (if not nil); it returns the status code and the answer's headers.
func sendJSON(t *testing.T, name, value, method, url string, body, out any) (int, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if name != "" {
		req.Header.Set(name, value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, url, data, err)
		}
	}
	return resp.StatusCode, resp.Header
}

func TestE2EHTTPFace(t *testing.T) {
	b := newBlockingRunner()
	bin := corralBinary(t)
	model := testmodel.Path(t, testmodel.Stories260K)
	cfg := WorkerConfig{
		Name: "w1", Model: "tiny", Port: freePort(t), Slots: 1, Timeouts: fastTimeouts(),
		Command:    append(DefaultServeCommand(bin), "-m", model, "--chat-template", "chatml", "-t", "1", "-c", "2048"),
		ToolFormat: agent.ToolFormatJSON, NormalTools: []agent.ToolDef{lookupTool}, ToolRunner: b, MaxToolIterations: 1,
	}
	sup, err := New([]WorkerConfig{cfg}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sup.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sup.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	srv := httptest.NewServer(sup.Handler())
	defer srv.Close()
	defer http.DefaultClient.CloseIdleConnections()
	waitState(t, sup.Worker("w1"), WorkerReady, readyTimeout)

	// The field names are the seed's (the reference design's
	// WorkerStatus, RequestStatus, RequestResult, SubmitResult, NotFound,
	// WorkerDebugInfo), checked in the raw JSON.
	var workers struct{ Workers []map[string]any }
	if code := doJSON(t, "GET", srv.URL+"/v1/workers", nil, &workers); code != 200 || len(workers.Workers) != 1 {
		t.Fatalf("GET /v1/workers: %d %+v", code, workers)
	}
	ws := workers.Workers[0]
	hasFields(t, "worker status", ws, "state", "slots_total", "slots_used", "active_request_ids", "restart_count", "last_ready_at")
	if ws["state"] != "ready" || ws["slots_total"] != 1.0 || ws["slots_used"] != 0.0 || ws["restart_count"] != 0.0 {
		t.Fatalf("GET /v1/workers: %v", ws)
	}

	// A job by model, polled to completion, read once.
	var sub struct {
		OK        bool   `json:"ok"`
		RequestID string `json:"request_id"`
		Worker    string `json:"worker"`
		Error     string `json:"error"`
	}
	job := map[string]any{"job_name": "j", "model": "tiny", "user_prompt": "Once upon a time", "params": map[string]any{"max_tokens": 5}}
	var raw map[string]any
	if code := doJSON(t, "POST", srv.URL+"/v1/jobs", job, &raw); code != 200 || raw["ok"] != true || !isJobID(raw["request_id"]) || raw["worker"] != "w1" {
		t.Fatalf("POST /v1/jobs: %d %v", code, raw)
	}
	id := raw["request_id"]
	jobURL := srv.URL + "/v1/jobs/" + id.(string)
	waitFor(t, jobTimeout, "the job to finish", func() bool {
		raw = nil
		if code := doJSON(t, "GET", jobURL, nil, &raw); code != 200 {
			t.Fatalf("GET status: %d %v", code, raw)
		}
		st, _ := raw["state"].(string)
		return RequestState(st).Terminal()
	})
	hasFields(t, "job status", raw, "request_id", "job_name", "state", "created_at", "dispatched_at", "completed_at",
		"last_progress_at", "output_chars", "tokens_received", "tokens_per_second", "tool_iters_remaining", "finish_reason")
	if raw["request_id"] != id || raw["job_name"] != "j" || raw["state"] != "completed" || raw["tokens_received"] == 0.0 {
		t.Fatalf("GET status: %v", raw)
	}
	raw = nil
	if code := doJSON(t, "GET", jobURL+"/result", nil, &raw); code != 200 {
		t.Fatalf("GET result: %d %v", code, raw)
	}
	hasFields(t, "job result", raw, "request_id", "job_name", "state", "finish_reason", "text")
	if raw["request_id"] != id || raw["job_name"] != "j" || raw["state"] != "completed" || raw["text"] == "" ||
		(raw["finish_reason"] != "stop" && raw["finish_reason"] != "max_tokens") || raw["worker"] != "w1" || raw["worker_request_id"] != 1.0 {
		t.Fatalf("GET result: %v", raw)
	}
	var res JobResult
	var nf struct {
		OK    bool
		Error string
	}
	notFound := func(what, method, url string) {
		t.Helper()
		var raw map[string]any
		if code := doJSON(t, method, url, nil, &raw); code != 404 || raw["ok"] != false || raw["error"] != "NOT_FOUND" {
			t.Fatalf("%s: %d %v", what, code, raw)
		}
	}
	notFound("second GET result", "GET", jobURL+"/result")
	notFound("GET status after release", "GET", jobURL)
	notFound("DELETE after release", "DELETE", jobURL)
	notFound("GET status of a never issued id", "GET", srv.URL+"/v1/jobs/999")
	notFound("GET status of a non-number", "GET", srv.URL+"/v1/jobs/abc")

	// Hold the only slot in a tool call: jobs and chat completions are
	// turned away at once.
	held := map[string]any{"worker": "w1", "user_prompt": "Look up cat.", "params": toolParams}
	if code := doJSON(t, "POST", srv.URL+"/v1/jobs", held, &sub); code != 200 || !sub.OK {
		t.Fatalf("POST held job: %d %+v", code, sub)
	}
	<-b.entered
	heldURL := fmt.Sprintf("%s/v1/jobs/%s", srv.URL, sub.RequestID)
	raw = nil
	if code := doJSON(t, "POST", srv.URL+"/v1/jobs", job, &raw); code != 429 || raw["ok"] != false || raw["error"] != "NO_SLOT_AVAILABLE" {
		t.Fatalf("POST with no slot: %d %v", code, raw)
	}
	raw = nil
	if code := doJSON(t, "GET", heldURL, nil, &raw); code != 200 || raw["state"] != "tool_running" || raw["tool_iters_remaining"] != 0.0 {
		t.Fatalf("held job status: %d %v", code, raw)
	}
	// No worker could take a job now, so a body is not even read: a job
	// for a worker that does not exist is turned away as busy too.
	raw = nil
	if code := doJSON(t, "POST", srv.URL+"/v1/jobs", map[string]any{"worker": "nope", "user_prompt": "x"}, &raw); code != 429 || raw["error"] != "NO_SLOT_AVAILABLE" {
		t.Fatalf("POST to an unknown worker with no slot: %d %v", code, raw)
	}
	var oaiErr struct {
		Error struct{ Code, Type string }
	}
	chatBody := map[string]any{"model": "tiny", "messages": []map[string]string{{"role": "user", "content": "Hi"}}, "max_tokens": 4}
	if code := doJSON(t, "POST", srv.URL+"/v1/chat/completions", chatBody, &oaiErr); code != 429 || oaiErr.Error.Code != "no_slot_available" {
		t.Fatalf("chat with no slot: %d %+v", code, oaiErr)
	}
	if code := doJSON(t, "GET", heldURL+"/result", nil, &nf); code != 409 || nf.Error != "NOT_FINISHED" {
		t.Fatalf("result in flight: %d %+v", code, nf)
	}
	var canceled struct{ OK bool }
	if code := doJSON(t, "DELETE", heldURL, nil, &canceled); code != 200 || !canceled.OK {
		t.Fatalf("DELETE: %d %+v", code, canceled)
	}
	if code := doJSON(t, "GET", heldURL+"/result", nil, &res); code != 200 || res.State != RequestCanceled {
		t.Fatalf("canceled result: %d %+v", code, res)
	}
	for what, target := range map[string]map[string]any{
		"UNKNOWN_WORKER": {"worker": "nope", "user_prompt": "x"},
		"UNKNOWN_MODEL":  {"model": "nope", "user_prompt": "x"},
	} {
		raw = nil
		if code := doJSON(t, "POST", srv.URL+"/v1/jobs", target, &raw); code != 404 || raw["ok"] != false || raw["error"] != what {
			t.Fatalf("POST to %v: %d %v", target, code, raw)
		}
	}

	// Chat completions are routed, streaming or not.
	var completion struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if code := doJSON(t, "POST", srv.URL+"/v1/chat/completions", chatBody, &completion); code != 200 || len(completion.Choices) != 1 {
		t.Fatalf("routed chat: %d %+v", code, completion)
	}
	chatBody["stream"] = true
	bb, _ := json.Marshal(chatBody)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(bb))
	if err != nil {
		t.Fatal(err)
	}
	sr := wire.NewReader(resp.Body)
	var events int
	var done bool
	for {
		ev, err := sr.Next()
		if err != nil {
			break
		}
		events++
		done = done || ev.Done
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || events < 2 || !done {
		t.Fatalf("routed stream: status %d type %q, %d events, done %v", resp.StatusCode, resp.Header.Get("Content-Type"), events, done)
	}
	chatBody["model"] = "nope"
	if code := doJSON(t, "POST", srv.URL+"/v1/chat/completions", chatBody, &oaiErr); code != 404 || oaiErr.Error.Code != "model_not_found" {
		t.Fatalf("unknown model: %d %+v", code, oaiErr)
	}
	if st := sup.Worker("w1").WorkerStatus(); st.SlotsUsed != 0 {
		t.Fatalf("proxied requests left slots used: %+v", st)
	}

	raw = nil
	if code := doJSON(t, "GET", srv.URL+"/v1/workers/w1/debug", nil, &raw); code != 200 {
		t.Fatalf("debug: %d %v", code, raw)
	}
	hasFields(t, "debug info", raw, "recent_logs", "recent_restart_reasons")
	if logs, _ := raw["recent_logs"].([]any); len(logs) == 0 {
		t.Fatalf("debug: %v", raw)
	}
	if code := doJSON(t, "GET", srv.URL+"/v1/workers/nope/debug", nil, &nf); code != 404 {
		t.Fatalf("debug of unknown worker: %d", code)
	}
	if code := doJSON(t, "POST", srv.URL+"/v1/jobs", map[string]any{"user_prompt": "x", "typo_field": 1}, &nf); code != 400 {
		t.Fatalf("job with an unknown field: %d", code)
	}

	// Two jobs were accepted: one completed, one canceled, both released;
	// the refused one counts nowhere.
	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	fams := scrape(t, sup.Handler())
	checkMetrics(t, fams, map[string]float64{
		`corral_supervisor_workers{state="ready"}`:                             1,
		`corral_supervisor_workers{state="failed"}`:                            0,
		`corral_supervisor_slots{worker="w1"}`:                                 1,
		`corral_supervisor_slots_used{worker="w1"}`:                            0,
		`corral_supervisor_jobs_submitted_total{worker="w1"}`:                  2,
		`corral_supervisor_jobs_finished_total{worker="w1",state="completed"}`: 1,
		`corral_supervisor_jobs_finished_total{worker="w1",state="canceled"}`:  1,
		`corral_supervisor_jobs_finished_total{worker="w1",state="failed"}`:    0,
		`corral_supervisor_jobs_failed_total{worker="w1",reason="canceled"}`:   1,
		`corral_supervisor_jobs{worker="w1",state="running"}`:                  0,
		`corral_supervisor_jobs{worker="w1",state="completed"}`:                0,
	})
	if f := fams["corral_supervisor_worker_restarts_total"]; len(f.GetMetric()) != 0 {
		t.Errorf("restarts without a restart: %v", f.GetMetric())
	}
}

// hasFields fails the test unless the JSON object m has every key.
func hasFields(t *testing.T, what string, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s lacks %q: %v", what, k, m)
		}
	}
}

// TestE2ESupervisorKilled runs `corral supervise` as a child and ends it
// with SIGTERM (graceful) or SIGKILL: its worker must not outlive it.
func TestE2ESupervisorKilled(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) { superviseAndSignal(t, sig) })
	}
}

func superviseAndSignal(t *testing.T, sig syscall.Signal) {
	bin := corralBinary(t)
	model := testmodel.Path(t, testmodel.Stories260K)
	port := freePort(t)
	conf := fmt.Sprintf(`
port: %d
workers:
  - name: tiny
    port: %d
    args: [-m, %q, --chat-template, chatml, -t, "1", -c, "2048"]
    timeouts: {probe_interval: 50ms}
`, port, freePort(t), model)
	path := filepath.Join(t.TempDir(), "supervise.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "supervise", "--config", path)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
		http.DefaultClient.CloseIdleConnections()
		if t.Failed() {
			t.Logf("supervise output:\n%s", logs.String())
		}
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	var pid int
	waitFor(t, readyTimeout, "the supervised worker to be ready", func() bool {
		resp, err := http.Get(base + "/v1/workers")
		if err != nil {
			return false // not listening yet
		}
		defer resp.Body.Close()
		var ws struct{ Workers []WorkerStatus }
		if json.NewDecoder(resp.Body).Decode(&ws) != nil || len(ws.Workers) != 1 {
			return false
		}
		pid = ws.Workers[0].PID
		return ws.Workers[0].State == WorkerReady
	})
	if !alive(pid) {
		t.Fatalf("worker pid %d not alive while READY", pid)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	waited = true
	if sig == syscall.SIGTERM {
		// A graceful stop returns only after the worker was reaped.
		if err != nil {
			t.Fatalf("supervise after SIGTERM: %v", err)
		}
		if alive(pid) || len(liveGroupMembers(pid)) > 0 {
			t.Fatalf("worker %d outlived a graceful stop", pid)
		}
		return
	}
	// After SIGKILL, the kernel delivers the parent-death signal.
	waitFor(t, 30*time.Second, fmt.Sprintf("worker %d to die with its supervisor", pid), func() bool {
		return !alive(pid) && len(liveGroupMembers(pid)) == 0
	})
}
