package supervisor

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/wire"
)

// The tests in this file are the supervisor's side of per-key limits and
// of its own bounds on what callers make it hold: a job keeps its key's
// place among its requests in flight until it ends and charges the tokens
// it used (the key's concurrency and tpm); a key holds at most its share
// of the job storage; a body is read only once a worker could take the
// request, and only up to the body limit. Where keys and their limits
// matter the supervisor is served behind its real gate (Gated), as corral
// supervise serves it; the workers are fake upstreams.

// Secrets of the gated tests' keys.
const (
	limSecret  = "sk-limited-00000001"
	freeSecret = "sk-free-000000000002"
)

// gatedSupervisor starts a supervisor over cfgs and serves it behind its
// gate (Gated) with the API keys of specs, as corral supervise does, and
// waits until every worker is READY. Both are stopped at the end of the
// test.
func gatedSupervisor(t *testing.T, opts Options, specs []string, cfgs ...WorkerConfig) (*Supervisor, *httptest.Server) {
	t.Helper()
	keys, err := gate.LoadKeys(specs, "")
	if err != nil {
		t.Fatal(err)
	}
	policy, err := gate.NewPolicy(keys, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts.Keys = keys.Len() > 0
	sup, err := New(cfgs, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveSupervisor(t, sup, sup.Gated(gate.Config{Logger: slog.New(slog.DiscardHandler), Policy: policy}))
	for _, w := range sup.Workers() {
		waitState(t, w, WorkerReady, readyTimeout)
	}
	return sup, srv
}

// patientConfig is fakeConfig for jobs held by the upstream ("hold…")
// while the test goes on: its child uses no CPU and the held stream sends
// nothing, which the default test timeouts would soon call a stall.
func patientConfig(t *testing.T, name string, slots int, chat http.HandlerFunc) WorkerConfig {
	t.Helper()
	cfg := fakeConfig(t, name, slots, sleepingChild, chat)
	cfg.Timeouts.PrefillLiveness, cfg.Timeouts.IdleStream = 10*time.Minute, 10*time.Minute
	return cfg
}

// callKey does an HTTP request with "Authorization: Bearer secret" (see
// sendJSON).
func callKey(t *testing.T, secret, method, url string, body, out any) (int, http.Header) {
	t.Helper()
	return sendJSON(t, "Authorization", "Bearer "+secret, method, url, body, out)
}

// submitKey posts job with secret and returns the job id; anything but
// 200 fails the test.
func submitKey(t *testing.T, srv *httptest.Server, secret string, job map[string]any) string {
	t.Helper()
	var sub struct {
		OK        bool   `json:"ok"`
		RequestID string `json:"request_id"`
	}
	if code, _ := callKey(t, secret, "POST", srv.URL+"/v1/jobs", job, &sub); code != http.StatusOK || !sub.OK {
		t.Fatalf("POST /v1/jobs %v: %d %+v", job, code, sub)
	}
	return sub.RequestID
}

// resultKey waits for the job id to end and reads its result with secret.
func resultKey(t *testing.T, srv *httptest.Server, secret, id string) JobResult {
	t.Helper()
	waitFor(t, jobTimeout, "job "+id+" to end", func() bool {
		var st JobStatus
		if code, _ := callKey(t, secret, "GET", srv.URL+"/v1/jobs/"+id, nil, &st); code != http.StatusOK {
			t.Fatalf("GET /v1/jobs/%s: %d", id, code)
		}
		return st.State.Terminal()
	})
	var res JobResult
	if code, _ := callKey(t, secret, "GET", srv.URL+"/v1/jobs/"+id+"/result", nil, &res); code != http.StatusOK {
		t.Fatalf("GET /v1/jobs/%s/result: %d", id, code)
	}
	return res
}

// refusedByKeyLimit posts a job with secret and checks that the gate
// refuses it for the key's limits (429 RATE_LIMIT_EXCEEDED); it returns
// the Retry-After in seconds.
func refusedByKeyLimit(t *testing.T, srv *httptest.Server, secret, what string) int {
	t.Helper()
	var raw map[string]any
	code, h := callKey(t, secret, "POST", srv.URL+"/v1/jobs", map[string]any{"user_prompt": "hi"}, &raw)
	retry, err := strconv.Atoi(h.Get("Retry-After"))
	if code != http.StatusTooManyRequests || raw["ok"] != false || raw["error"] != "RATE_LIMIT_EXCEEDED" || err != nil {
		t.Fatalf("a job %s: %d %v, Retry-After %q", what, code, raw, h.Get("Retry-After"))
	}
	return retry
}

// chatBody is a chat completion request for model.
func chatBody(model, content string) map[string]any {
	return map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": content}}}
}

// TestJobsHoldTheirKeysPlace runs the jobs of a key with concurrency=1 on
// a worker with free slots. A job is asynchronous, but it holds its key's
// one place in flight until it ends: a second job and a chat completion of
// the key get 429 until then, while the key follows its job (status,
// listings) and other keys submit theirs. Canceling the job, or its
// completion, gives the place back. (The place used to be given back as
// soon as the submission was answered: a key with concurrency=1 filled
// every slot.)
func TestJobsHoldTheirKeysPlace(t *testing.T) {
	up := newEchoUpstream()
	sup, srv := gatedSupervisor(t, Options{}, []string{limSecret + " name=lim concurrency=1", freeSecret + " name=free"},
		patientConfig(t, "w", 4, up.chat))
	w := sup.Worker("w")
	first := submitKey(t, srv, limSecret, map[string]any{"user_prompt": "hold 1"})
	if retry := refusedByKeyLimit(t, srv, limSecret, "beside the key's job in flight"); retry != 1 {
		t.Errorf("Retry-After %d, want 1 (a place, not tokens)", retry)
	}
	var oaiErr struct {
		Error struct{ Code, Type string }
	}
	if code, _ := callKey(t, limSecret, "POST", srv.URL+"/v1/chat/completions", chatBody("w", "hi"), &oaiErr); code != http.StatusTooManyRequests ||
		oaiErr.Error.Code != "rate_limit_exceeded" {
		t.Fatalf("a chat completion beside the key's job in flight: %d %+v", code, oaiErr)
	}
	// The key follows its job meanwhile.
	var st JobStatus
	if code, _ := callKey(t, limSecret, "GET", srv.URL+"/v1/jobs/"+first, nil, &st); code != http.StatusOK || st.State != RequestRunning {
		t.Fatalf("the key's status of its job: %d %+v", code, st)
	}
	if code, _ := callKey(t, limSecret, "GET", srv.URL+"/v1/workers", nil, nil); code != http.StatusOK {
		t.Fatalf("the key's worker listing: %d", code)
	}
	if st := w.WorkerStatus(); st.SlotsUsed != 1 {
		t.Fatalf("refused for want of slots? %+v", st)
	}
	// Another key is not held up.
	if res := resultKey(t, srv, freeSecret, submitKey(t, srv, freeSecret, map[string]any{"user_prompt": "hi"})); res.Text != "hi" {
		t.Fatalf("the other key's job: %+v", res)
	}
	// Canceling the job gives its place back, once.
	var ok struct{ OK bool }
	if code, _ := callKey(t, limSecret, "DELETE", srv.URL+"/v1/jobs/"+first, nil, &ok); code != http.StatusOK || !ok.OK {
		t.Fatalf("cancel: %d %+v", code, ok)
	}
	second := submitKey(t, srv, limSecret, map[string]any{"user_prompt": "hold 2"})
	refusedByKeyLimit(t, srv, limSecret, "beside the job submitted after the cancellation")
	// So does its completion.
	close(up.release)
	if res := resultKey(t, srv, limSecret, second); res.State != RequestCompleted || res.Text != "hold 2" {
		t.Fatalf("the second job: %+v", res)
	}
	if res := resultKey(t, srv, limSecret, submitKey(t, srv, limSecret, map[string]any{"user_prompt": "hi"})); res.Text != "hi" {
		t.Fatalf("a job after the second one ended: %+v", res)
	}
	if res := resultKey(t, srv, limSecret, first); res.State != RequestCanceled {
		t.Fatalf("the canceled job: %+v", res)
	}
}

// TestJobsChargeTheirKeysTokens runs a job of a key with tpm=50 on a
// worker whose server reports 1,000 tokens of usage: the job asked for
// the usage and is charged it, so the key's next job gets 429 with a
// Retry-After of minutes (not the second of a place in flight), while the
// key still reads its result and lists the workers. A server that reports
// no usage is charged an estimate: a token per 4 bytes of the request and
// one per streamed chunk. (Jobs used to be charged nothing.)
func TestJobsChargeTheirKeysTokens(t *testing.T) {
	reporting, silent := newEchoUpstream(), newEchoUpstream()
	reporting.usage = &wire.Usage{PromptTokens: 600, CompletionTokens: 400, TotalTokens: 1000}
	close(reporting.release)
	close(silent.release)
	_, srv := gatedSupervisor(t, Options{}, []string{limSecret + " name=lim tpm=50", freeSecret + " name=est tpm=10"},
		fakeConfig(t, "reporting", 4, sleepingChild, reporting.chat), fakeConfig(t, "silent", 4, sleepingChild, silent.chat))

	id := submitKey(t, srv, limSecret, map[string]any{"worker": "reporting", "user_prompt": "hi"})
	if res := resultKey(t, srv, limSecret, id); res.State != RequestCompleted || res.Text != "hi" {
		t.Fatalf("the job: %+v", res)
	}
	if !reporting.askedUsage() {
		t.Error("the job did not ask its server for the usage (stream_options.include_usage)")
	}
	// 950 tokens short at 50 a minute: about 19 minutes.
	if retry := refusedByKeyLimit(t, srv, limSecret, "after one that used 1,000 tokens"); retry < 60 {
		t.Errorf("Retry-After %d, want minutes", retry)
	}
	if code, _ := callKey(t, limSecret, "GET", srv.URL+"/v1/workers", nil, nil); code != http.StatusOK {
		t.Fatalf("the worker listing of a key out of tokens: %d", code)
	}

	// The estimate: the request alone (BIOS and prompt) is more than 10
	// tokens at 4 bytes each.
	id = submitKey(t, srv, freeSecret, map[string]any{"worker": "silent", "user_prompt": "hi"})
	if res := resultKey(t, srv, freeSecret, id); res.State != RequestCompleted {
		t.Fatalf("the job on the server without usage: %+v", res)
	}
	if retry := refusedByKeyLimit(t, srv, freeSecret, "after one charged an estimate"); retry < 60 {
		t.Errorf("Retry-After %d, want minutes", retry)
	}
}

// TestTurnTokens: the usage the server reported, else the estimate.
func TestTurnTokens(t *testing.T) {
	for _, c := range []struct {
		usage         *wire.Usage
		bytes, chunks int
		want          int
	}{
		{&wire.Usage{PromptTokens: 600, CompletionTokens: 400}, 100, 3, 1000},
		{nil, 100, 3, 28},
		{nil, 101, 0, 26},
		{&wire.Usage{}, 8, 1, 3}, // a usage of nothing is no report
	} {
		if got := turnTokens(c.usage, c.bytes, c.chunks); got != c.want {
			t.Errorf("turnTokens(%+v, %d, %d) = %d, want %d", c.usage, c.bytes, c.chunks, got, c.want)
		}
	}
}

// TestJobBytesPerKey runs jobs of 250 bytes under max_job_bytes 1200,
// whose default share per key is a quarter (300): a key holding one job
// gets 429 KEY_JOB_STORAGE_FULL for a second, with Retry-After, while
// another key still submits; without a key (one caller) only the whole
// budget counts. Reading a result gives its key's bytes back; a job larger
// than the share by itself is 413 JOB_TOO_LARGE. (One key used to be able
// to fill the whole budget, for everyone, until its results expired.)
func TestJobBytesPerKey(t *testing.T) {
	e := newEchoUpstream()
	sup, srv := fakeSupervisor(t, Options{MaxJobBytes: 1200}, patientConfig(t, "w", 8, e.chat))
	held := "hold" + strings.Repeat("a", 246)
	refused := func(key, what string) {
		t.Helper()
		var raw map[string]any
		code, h := callJSON(t, key, "POST", srv.URL+"/v1/jobs", map[string]any{"user_prompt": held}, &raw)
		if code != http.StatusTooManyRequests || raw["ok"] != false || raw["error"] != "KEY_JOB_STORAGE_FULL" ||
			!strings.Contains(fmt.Sprint(raw["detail"]), "max_job_bytes_per_key") || h.Get("Retry-After") != "10" {
			t.Fatalf("%s: %d %v (Retry-After %q)", what, code, raw, h.Get("Retry-After"))
		}
	}
	alice := submitAs(t, srv, "alice", map[string]any{"user_prompt": held})
	refused("alice", "alice's second job")
	bob := submitAs(t, srv, "bob", map[string]any{"user_prompt": held})
	refused("bob", "bob's second job")
	// No key: the one caller of a supervisor without keys.
	submitAs(t, srv, "", map[string]any{"user_prompt": held})
	submitAs(t, srv, "", map[string]any{"user_prompt": held})
	var raw map[string]any
	if code, _ := callJSON(t, "", "POST", srv.URL+"/v1/jobs", map[string]any{"user_prompt": held}, &raw); code != http.StatusServiceUnavailable ||
		raw["error"] != "JOB_STORAGE_FULL" {
		t.Fatalf("a job past max_job_bytes: %d %v", code, raw)
	}
	if code, _ := callJSON(t, "alice", "POST", srv.URL+"/v1/jobs", map[string]any{"user_prompt": strings.Repeat("a", 301)}, &raw); code != http.StatusRequestEntityTooLarge ||
		raw["error"] != "JOB_TOO_LARGE" {
		t.Fatalf("a job larger than a key's share: %d %v", code, raw)
	}
	checkMetrics(t, scrape(t, sup.Handler()), map[string]float64{
		`corral_supervisor_job_bytes`:                           1000,
		`corral_supervisor_job_bytes_per_key_max`:               300,
		`corral_supervisor_jobs_refused_key_storage_full_total`: 2,
		`corral_supervisor_jobs_refused_storage_full_total`:     1,
	})
	close(e.release)
	waitJobDone(t, srv, "alice", alice)
	waitJobDone(t, srv, "bob", bob)
	refused("alice", "alice's job beside her unread result")
	var res JobResult
	if code, _ := callJSON(t, "alice", "GET", srv.URL+"/v1/jobs/"+alice+"/result", nil, &res); code != http.StatusOK || res.Text != held {
		t.Fatalf("alice's result: %d %+v", code, res)
	}
	waitJobDone(t, srv, "alice", submitAs(t, srv, "alice", map[string]any{"user_prompt": held}))

	for _, c := range []struct {
		opts Options
		ok   bool
	}{
		{Options{MaxJobBytes: 1000, MaxJobBytesPerKey: 1000}, true},
		{Options{MaxJobBytes: 1000, MaxJobBytesPerKey: 1001}, false},
		{Options{MaxJobBytesPerKey: -1}, false},
		{Options{MaxBody: -1}, false},
	} {
		if _, err := New(nil, c.opts); (err == nil) != c.ok {
			t.Errorf("New with %+v: %v", c.opts, err)
		}
	}
	cfg, err := ParseConfig([]byte("max_job_bytes: 1000\nmax_job_bytes_per_key: 600\nworkers: [{name: w, command: [x], port: 1}]\n"), "")
	if err != nil || cfg.MaxJobBytesPerKey != 600 {
		t.Fatalf("max_job_bytes_per_key in YAML: %+v, %v", cfg, err)
	}
}

// filler reads as n bytes of 'a', without holding them.
type filler struct{ n int64 }

func (f *filler) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), f.n)]
	for i := range p {
		p[i] = 'a'
	}
	f.n -= int64(len(p))
	return len(p), nil
}

// bigJSON is a JSON body of size bytes: head, a string of 'a's, tail.
func bigJSON(head, tail string, size int64) io.Reader {
	return io.MultiReader(strings.NewReader(head), &filler{size - int64(len(head)+len(tail))}, strings.NewReader(tail))
}

// TestOversizedPostsAreNotRead posts 8 bodies of 60 MB at once, chat
// completions and then jobs, while the one slot is taken: each gets 429
// at once, and the supervisor (this process) allocates less than 64 MiB
// for all of them. It used to read every body whole before it looked for
// a slot: about a gigabyte.
func TestOversizedPostsAreNotRead(t *testing.T) {
	e := newEchoUpstream()
	sup, srv := fakeSupervisor(t, Options{}, patientConfig(t, "w", 1, e.chat))
	held := submitAs(t, srv, "", map[string]any{"user_prompt": "hold"})
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	const posts, size = 8, 60 << 20
	for _, c := range []struct{ path, head, tail string }{
		{"/v1/chat/completions", `{"model":"w","messages":[{"role":"user","content":"`, `"}]}`},
		{"/v1/jobs", `{"user_prompt":"`, `"}`},
	} {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		codes := make([]int, posts)
		errs := make([]error, posts)
		var wg sync.WaitGroup
		for i := range posts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, err := http.NewRequest("POST", srv.URL+c.path, bigJSON(c.head, c.tail, size))
				if err != nil {
					errs[i] = err
					return
				}
				req.ContentLength = size
				resp, err := client.Do(req)
				if err != nil {
					errs[i] = err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes[i] = resp.StatusCode
			}()
		}
		wg.Wait()
		runtime.ReadMemStats(&after)
		for i := range posts {
			if errs[i] != nil || codes[i] != http.StatusTooManyRequests {
				t.Errorf("POST %s #%d of %d MB while the slot is taken: %d, %v", c.path, i, size>>20, codes[i], errs[i])
			}
		}
		grew := after.TotalAlloc - before.TotalAlloc
		t.Logf("POST %s: %d × %d MB: %.1f MiB allocated", c.path, posts, size>>20, float64(grew)/(1<<20))
		if grew >= 64<<20 {
			t.Errorf("POST %s: %d × %d MB refused for want of a slot allocated %d MiB", c.path, posts, size>>20, grew>>20)
		}
	}
	if st := sup.Worker("w").WorkerStatus(); st.SlotsUsed != 1 {
		t.Fatalf("slots after the refusals: %+v", st)
	}
	close(e.release)
	waitJobDone(t, srv, "", held)
}

// TestBodyLimit: with a free slot, a body past Options.MaxBody gets 413,
// whether its Content-Length says so (then it is not read) or not (it is
// read up to the limit); one within it is served. The default is 8 MiB,
// corral serve's.
func TestBodyLimit(t *testing.T) {
	e := newEchoUpstream()
	close(e.release)
	sup, srv := fakeSupervisor(t, Options{MaxBody: 1024}, fakeConfig(t, "w", 1, sleepingChild, e.chat))
	if sup.maxBody != 1024 {
		t.Fatalf("max body %d", sup.maxBody)
	}
	for _, c := range []struct{ path, head, tail, code string }{
		{"/v1/chat/completions", `{"model":"w","messages":[{"role":"user","content":"`, `"}]}`, `"request_too_large"`},
		{"/v1/jobs", `{"user_prompt":"`, `"}`, `"REQUEST_TOO_LARGE"`},
	} {
		for _, declared := range []bool{true, false} {
			req, err := http.NewRequest("POST", srv.URL+c.path, bigJSON(c.head, c.tail, 2048))
			if err != nil {
				t.Fatal(err)
			}
			if declared {
				req.ContentLength = 2048
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !bytes.Contains(body, []byte(c.code)) {
				t.Errorf("POST %s of 2 KiB (Content-Length given: %v): %d %s", c.path, declared, resp.StatusCode, body)
			}
		}
	}
	if code, _ := callJSON(t, "", "POST", srv.URL+"/v1/chat/completions", chatBody("w", "hi"), nil); code != http.StatusOK {
		t.Fatalf("a small chat completion: %d", code)
	}
	waitJobDone(t, srv, "", submitAs(t, srv, "", map[string]any{"user_prompt": "hi"}))
	if st := sup.Worker("w").WorkerStatus(); st.SlotsUsed != 0 {
		t.Fatalf("slots after: %+v", st)
	}
	if s, err := New(nil, Options{}); err != nil || s.maxBody != DefaultMaxBody || DefaultMaxBody != 8<<20 {
		t.Fatalf("default max body: %v, %v", s, err)
	}
}
