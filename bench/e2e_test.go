package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/wire"
)

// server is a `corral serve` child process on a free port.
type server struct {
	url    string
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has been waited for
	log    bytes.Buffer  // its stderr; read only after exited
	once   sync.Once
}

// startServer runs `corral serve` on the tiny test model and waits until
// /health answers 200. The process is killed when the test ends.
func startServer(t *testing.T) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &server{url: "http://127.0.0.1:" + strconv.Itoa(port), exited: make(chan struct{})}
	s.cmd = exec.Command(corralBin, "serve", "-m", testmodel.Path(t, testmodel.TinyStories656K),
		"--port", strconv.Itoa(port), "-np", "4", "-c", "2048", "-t", "1")
	s.cmd.Stderr = &s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(s.kill)

	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(2 * time.Minute)
	for {
		resp, err := hc.Get(s.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-tick.C:
		case <-s.exited:
			t.Fatalf("corral serve exited before it was healthy:\n%s", s.log.String())
		case <-deadline:
			s.kill()
			t.Fatalf("corral serve not healthy after 2 minutes:\n%s", s.log.String())
		}
	}
}

// kill stops the server at once and waits for it; safe to call twice.
func (s *server) kill() {
	s.once.Do(func() { s.cmd.Process.Kill() })
	<-s.exited
}

// corral runs the corral binary and returns its stdout.
func corral(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(corralBin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("corral %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("report %s: %v", path, err)
	}
	return doc
}

// checkCleanRun checks a JSON run: every request completed, no errors,
// token counts from usage, exactly outputLen tokens each (ignore_eos).
func checkCleanRun(t *testing.T, run map[string]any, requests, outputLen int) {
	t.Helper()
	if got := run["completed"]; got != float64(requests) {
		t.Errorf("completed %v, want %d", got, requests)
	}
	if got := run["failed"]; got != 0.0 {
		t.Errorf("failed %v, want 0; errors %v", got, run["errors"])
	}
	if got := run["token_source"]; got != TokensFromUsage {
		t.Errorf("token source %v, want usage", got)
	}
	if got := run["total_output_tokens"]; got != float64(requests*outputLen) {
		t.Errorf("total output tokens %v, want %d", got, requests*outputLen)
	}
	for _, name := range []string{"ttft_ms", "e2el_ms", "submit_ms", "tpot_ms"} {
		if n := run[name].(map[string]any)["n"]; n != float64(requests) {
			t.Errorf("%s.n = %v, want %d", name, n, requests)
		}
	}
	// A gap per pair of chunks a request received: at most outputLen−1 a
	// request; how many depends on how often a busy reader got several
	// tokens in one chunk, so there may be none.
	if n := run["itl_ms"].(map[string]any)["n"].(float64); n < 0 || n > float64(requests*(outputLen-1)) {
		t.Errorf("itl_ms.n = %v, want at most %d gaps", n, requests*(outputLen-1))
	}
	if tp := run["output_throughput"].(float64); tp <= 0 {
		t.Errorf("output throughput %v, want positive", tp)
	}
}

func TestClosedLoopCLI(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	jsonPath, svgPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.svg")
	out := corral(t, "bench", "--url", s.url, "--concurrency", "3", "--num-requests", "9",
		"--input-len", "24", "--output-len", "12", "--ignore-eos", "--goodput", "ttft:60000",
		"--progress=false", "--json", jsonPath, "--plot", svgPath)
	for _, want := range []string{"Successful requests:                     9", "Failed requests:                         0"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	doc := readJSON(t, jsonPath)
	checkReportFields(t, doc)
	config := doc["config"].(map[string]any)
	if config["prompt_tokenizer"] != "server" || config["model"] != "tinystories-656k-q8_0" {
		t.Errorf("config %v: want the server's tokenizer and model", config)
	}
	run := doc["runs"].([]any)[0].(map[string]any)
	checkCleanRun(t, run, 9, 12)
	if g := run["goodput"]; g != run["request_throughput"] {
		t.Errorf("goodput %v with a one-minute TTFT SLO, want the request throughput %v", g, run["request_throughput"])
	}
	if svg, err := os.ReadFile(svgPath); err != nil || !bytes.Contains(svg, []byte("TTFT CDF")) {
		t.Errorf("plot: %v, %.100s", err, svg)
	}
}

func TestOpenLoop(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	c := NewClient(s.url, APICompletions, 4)
	defer c.Close()
	c.MaxTokens, c.IgnoreEOS = 10, true
	prompts, err := RandomPrompts(ctx, c, RandomSpec{N: 12, InputLen: 20, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	load := Config{RequestRate: 40, Burstiness: 0.5, NumRequests: 12, Seed: 5}
	out, err := Run(ctx, c, prompts, load, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range out.Records {
		if r.Err != "" {
			t.Errorf("request %d: %s: %s", i, r.Err, r.ErrMsg)
		}
		// The workload fitted each prompt with the server's tokenizer; the
		// server may add BOS.
		if want := prompts[i].Tokens; r.PromptTokens < want || r.PromptTokens > want+1 {
			t.Errorf("request %d: server counted %d prompt tokens, workload %d", i, r.PromptTokens, want)
		}
	}
	path := filepath.Join(t.TempDir(), "r.json")
	report := &Report{Settings: Settings{URL: s.url, API: APICompletions, Load: load}, Runs: []RunReport{NewRunReport(load, out, SLO{})}}
	if err := report.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	doc := readJSON(t, path)
	checkReportFields(t, doc)
	checkCleanRun(t, doc["runs"].([]any)[0].(map[string]any), 12, 10)
}

func TestErrorsCountedWhenServerStops(t *testing.T) {
	s := startServer(t)
	c := NewClient(s.url, APIChat, 4)
	defer c.Close()
	c.MaxTokens, c.IgnoreEOS = 48, true
	prompts, err := RandomPrompts(context.Background(), Words{}, RandomSpec{N: 30, InputLen: 16})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	done := 0
	observe := func(Record) {
		mu.Lock()
		defer mu.Unlock()
		if done++; done == 3 {
			s.kill() // with requests in flight and more to come
		}
	}
	out, err := Run(context.Background(), c, prompts, Config{Concurrency: 4, NumRequests: 30}, observe)
	if err != nil {
		t.Fatal(err)
	}
	sum := Summarize(out.Records, out.Duration, SLO{})
	if sum.Completed < 3 || sum.Failed == 0 || sum.Completed+sum.Failed != 30 {
		t.Errorf("completed %d, failed %d of 30; want at least 3 completed and some failed", sum.Completed, sum.Failed)
	}
	if sum.Errors[ErrKindConnect] == 0 {
		t.Errorf("errors %v: want connection failures after the server stopped", sum.Errors)
	}
	if n := sum.Errors[ErrKindConnect] + sum.Errors[ErrKindDisconnect]; n != sum.Failed {
		t.Errorf("errors %v: want only connect and disconnect", sum.Errors)
	}
}

func TestTimeoutCounted(t *testing.T) {
	s := startServer(t)
	c := NewClient(s.url, APIChat, 1)
	defer c.Close()
	prompts := []Prompt{{Messages: []wire.Message{{Role: "user", Content: "Once upon a time"}}}}
	// A deadline that has passed before the request is sent.
	out, err := Run(context.Background(), c, prompts, Config{Concurrency: 2, NumRequests: 4, Timeout: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum := Summarize(out.Records, out.Duration, SLO{}); sum.Errors[ErrKindTimeout] != 4 {
		t.Errorf("errors %v, want 4 timeouts", sum.Errors)
	}
}

func TestInProcessCLI(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	out := corral(t, "bench", "--in-process", "-m", testmodel.Path(t, testmodel.TinyStories656K),
		"-np", "4", "-c", "2048", "-t", "1", "--concurrency", "8", "--num-requests", "8",
		"--input-len", "16", "--output-len", "8", "--ignore-eos", "--progress=false", "--json", path)
	for _, want := range []string{"=== streaming benchmark (in-process engine) ===", "Submit wall:",
		"Submit latency p50/p95/p99:", "TTFT p50/p95/p99:", "Latency p50/p95/p99:", "Throughput (completion, total):"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	doc := readJSON(t, path)
	checkReportFields(t, doc)
	if config := doc["config"].(map[string]any); config["in_process"] != true || config["prompt_tokenizer"] != "engine" {
		t.Errorf("config %v: want in_process and the engine's tokenizer", config)
	}
	checkCleanRun(t, doc["runs"].([]any)[0].(map[string]any), 8, 8)
}

// TestVoiceCLI: both voice modes against corral serve: every answer
// arrives, paced answers evaluate nothing twice, no slot stays busy, and
// the prompt tokens evaluated come from /metrics.
func TestVoiceCLI(t *testing.T) {
	s := startServer(t)
	for _, mode := range []string{"paced", "resend"} {
		path := filepath.Join(t.TempDir(), mode+".json")
		corral(t, "bench", "--url", s.url, "--voice", mode, "--voice-sessions", "6", "--voice-turns", "2",
			"--voice-cps", "5000", "--voice-barge-in", "0.5", "--output-len", "40", "--json", path)
		doc := readJSON(t, path)
		if doc["answers"] != 12.0 || doc["failed"] != 0.0 || doc["slots_leaked"] != 0.0 {
			t.Errorf("%s: %v", mode, doc)
		}
		if ev, _ := doc["prompt_evaluated_per_answer"].(float64); ev <= 0 {
			t.Errorf("%s: prompt tokens evaluated per answer %v, want them from /metrics", mode, doc["prompt_evaluated_per_answer"])
		}
		if re := doc["reevaluated_per_answer"]; mode == "paced" && re != 0.0 {
			t.Errorf("paced: %v tokens re-evaluated per answer, want 0", re)
		}
		if f, _ := doc["first_chunk_p50_ms"].(float64); f <= 0 {
			t.Errorf("%s: time to first chunk %v", mode, doc["first_chunk_p50_ms"])
		}
	}
}
