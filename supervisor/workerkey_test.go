package supervisor

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The tests in this file are the workers' generated API keys: a local
// worker's server listens on a port any process of the machine reaches,
// so a worker whose server takes a key from its environment gets one of
// its own, which the supervisor sends on every request to it.

// postWorker posts a chat completion straight to a worker's server, past
// the supervisor, with "Authorization: Bearer key" unless key is "", and
// returns the status code.
func postWorker(t *testing.T, w *Worker, key string) int {
	t.Helper()
	req, err := http.NewRequest("POST", w.baseURL+"/v1/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// procFile reads /proc/<pid>/<name>.
func procFile(t *testing.T, pid int, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestE2EWorkerKey runs corral serve as a worker of a supervisor without
// keys: the worker gets a generated key in its environment (not on its
// command line, which ps shows to everyone), its server refuses a request
// without it or with another key (401) while /health stays open for the
// readiness probe, and the supervisor's jobs and proxied chat completions
// go through with it, for callers without a key too. (The worker used to
// listen on loopback without a key: any local process could use it past
// the supervisor's keys and limits.)
func TestE2EWorkerKey(t *testing.T) {
	sup, srv := startSupervisor(t, WorkerConfig{
		Name: "w", Command: append(DefaultServeCommand(corralBinary(t)), tinyServeArgs(t)...),
		Port: freePort(t), Timeouts: fastTimeouts(),
	})
	w := sup.Worker("w")
	st := waitState(t, w, WorkerReady, readyTimeout)
	if w.apiKey == "" || w.lendsKey {
		t.Fatalf("corral worker: key %q, lent only to callers with keys %v", w.apiKey, w.lendsKey)
	}
	if cmdline := procFile(t, st.PID, "cmdline"); bytes.Contains(cmdline, []byte(w.apiKey)) {
		t.Fatalf("the key is on the worker's command line: %q", cmdline)
	}
	if environ := procFile(t, st.PID, "environ"); !bytes.Contains(environ, []byte(ServeKeyEnv+"="+w.apiKey+" ")) {
		t.Fatalf("the key is not in the worker's $%s", ServeKeyEnv)
	}
	if code := postWorker(t, w, ""); code != http.StatusUnauthorized {
		t.Fatalf("a request to the worker without its key: %d", code)
	}
	if code := postWorker(t, w, "corral-worker-not-the-key"); code != http.StatusUnauthorized {
		t.Fatalf("a request to the worker with another key: %d", code)
	}
	if code := postWorker(t, w, w.apiKey); code != http.StatusOK {
		t.Fatalf("a request to the worker with its key: %d", code)
	}
	resp, err := http.Get(w.baseURL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the worker's /health without a key: %d", resp.StatusCode)
	}
	id := submitAs(t, srv, "", map[string]any{"user_prompt": "hi", "params": map[string]any{"max_tokens": 4}})
	waitJobDone(t, srv, "", id)
	var res JobResult
	if code, _ := callJSON(t, "", "GET", srv.URL+"/v1/jobs/"+id+"/result", nil, &res); code != http.StatusOK || res.State != RequestCompleted {
		t.Fatalf("a job through the supervisor: %d %+v", code, res)
	}
	body := chatBody("w", "hi")
	body["max_tokens"] = 4
	if code, _ := callJSON(t, "", "POST", srv.URL+"/v1/chat/completions", body, nil); code != http.StatusOK {
		t.Fatalf("a chat completion through the supervisor: %d", code)
	}
}

// TestE2EWorkerKeyLlamaServer runs the fake llama-server (which takes its
// key from LLAMA_API_KEY, as llama-server does) with LLAMA_API_KEY unset:
// it gets a generated key there, refuses chat completions without it, and
// serves the supervisor's jobs. With generate_key: false it gets none and
// serves anyone, as before.
func TestE2EWorkerKeyLlamaServer(t *testing.T) {
	t.Setenv("LLAMA_API_KEY", "") // restored after the test
	os.Unsetenv("LLAMA_API_KEY")
	ready := filepath.Join(t.TempDir(), "loaded")
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	no := false
	cfg := func(name string, generate *bool) WorkerConfig {
		return WorkerConfig{
			Name: name, Command: []string{fakeLlamaBinary(t), "--host", "{host}", "--port", "{port}"},
			Port: freePort(t), Timeouts: fastTimeouts(), GenerateKey: generate,
			Env: map[string]string{fakeLlamaReadyEnv: ready},
		}
	}
	sup, srv := startSupervisor(t, cfg("keyed", nil), cfg("open", &no))
	keyed, open := sup.Worker("keyed"), sup.Worker("open")
	for _, w := range sup.Workers() {
		waitState(t, w, WorkerReady, readyTimeout)
	}
	if keyed.apiKey == "" || open.apiKey != "" {
		t.Fatalf("keys: generated %q, with generate_key false %q", keyed.apiKey, open.apiKey)
	}
	if code := postWorker(t, keyed, ""); code != http.StatusUnauthorized {
		t.Fatalf("a request to the keyed worker without its key: %d", code)
	}
	if code := postWorker(t, open, ""); code != http.StatusOK {
		t.Fatalf("a request to the worker with generate_key false: %d", code)
	}
	for _, name := range []string{"keyed", "open"} {
		id := submitAs(t, srv, "", map[string]any{"worker": name, "user_prompt": "hi"})
		waitJobDone(t, srv, "", id)
		var res JobResult
		if code, _ := callJSON(t, "", "GET", srv.URL+"/v1/jobs/"+id+"/result", nil, &res); code != http.StatusOK || res.Text != "Hello world" {
			t.Fatalf("a job on %s: %d %+v", name, code, res)
		}
	}
}

// TestGeneratedKeyEnv: which workers get a generated key, in which
// variable.
func TestGeneratedKeyEnv(t *testing.T) {
	no, yes := false, true
	for _, c := range []struct {
		cfg  WorkerConfig
		env  []string
		want string
	}{
		{WorkerConfig{Kind: KindCorral}, nil, ServeKeyEnv},
		{WorkerConfig{Kind: KindCorral, GenerateKey: &yes}, []string{"LLAMA_API_KEY=x"}, ServeKeyEnv},
		{WorkerConfig{Kind: KindLlamaServer}, []string{"LLAMA_API_KEY="}, "LLAMA_API_KEY"},
		{WorkerConfig{Kind: KindVLLM}, nil, "VLLM_API_KEY"},
		{WorkerConfig{Kind: KindOther}, nil, ""},                                            // no known variable
		{WorkerConfig{Kind: KindCorral, GenerateKey: &no}, nil, ""},                         // turned off
		{WorkerConfig{Kind: KindCorral, APIKeyEnv: "K"}, nil, ""},                           // the operator's key
		{WorkerConfig{Kind: KindLlamaServer}, []string{"LLAMA_API_KEY=operator"}, ""},       // the operator's key
		{WorkerConfig{Kind: KindVLLM, URL: "http://gpu:8000"}, nil, ""},                     // not ours to start
		{WorkerConfig{Kind: KindCorral}, []string{ServeKeyEnv + "=operator role=user"}, ""}, // the operator's key
	} {
		if got := generatedKeyEnv(c.cfg, c.env); got != c.want {
			t.Errorf("generatedKeyEnv(%+v, %q) = %q, want %q", c.cfg, c.env, got, c.want)
		}
	}
}
