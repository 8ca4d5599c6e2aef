package supervisor

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/supervisor/agent"
	"github.com/corral-llm/corral/wire"
)

func TestParseExampleConfig(t *testing.T) {
	data, err := os.ReadFile("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(data, "/opt/corral")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "127.0.0.1" || cfg.Port != 8090 || len(cfg.Workers) != 4 || cfg.MaxJobBytes != DefaultMaxJobBytes ||
		cfg.MaxJobBytesPerKey != DefaultMaxJobBytes/DefaultKeyShare {
		t.Fatalf("host %q port %d workers %d max_job_bytes %d per key %d", cfg.Host, cfg.Port, len(cfg.Workers), cfg.MaxJobBytes, cfg.MaxJobBytesPerKey)
	}
	w := cfg.Workers[0]
	wantCmd := append(DefaultServeCommand("/opt/corral"), "-m", "/models/stories260K.gguf", "-c", "4096", "-t", "2", "--chat-template", "chatml")
	if !slices.Equal(w.Command, wantCmd) {
		t.Errorf("command = %q, want %q", w.Command, wantCmd)
	}
	if w.Slots != 2 || w.ToolFormat != agent.ToolFormatJSON || w.MaxToolIterations != 4 || w.Env["GOMAXPROCS"] != "2" {
		t.Errorf("worker 1 = %+v", w)
	}
	if len(w.NormalTools) != 1 || w.NormalTools[0].Function.Name != "word_count" || w.ToolRunner == nil {
		t.Errorf("normal tools = %+v runner %v", w.NormalTools, w.ToolRunner)
	}
	if len(w.ExitTools) != 1 || w.ExitTools[0].Function.Parameters["required"] == nil {
		t.Errorf("exit tools = %+v", w.ExitTools)
	}
	if w.Timeouts != DefaultTimeouts() {
		t.Errorf("worker 1 spells out the defaults, got %+v", w.Timeouts)
	}
	// Worker 2 overrides two timeouts; the others keep their defaults.
	want := DefaultTimeouts()
	want.PrefillLiveness, want.ProbeInterval = 30*time.Minute, 2*time.Second
	if got := cfg.Workers[1].Timeouts; got != want {
		t.Errorf("worker 2 timeouts = %+v, want %+v", got, want)
	}
	if got := cfg.Workers[1].RepeatedLine; got != (agent.RepeatedLineGuard{MinChars: 16, Repeats: 8}) {
		t.Errorf("worker 2 repeated-line default = %+v", got)
	}
	if got := cfg.Workers[2].Command[0]; got != "vllm" {
		t.Errorf("worker 3 command %q", got)
	}
	if w.Kind != KindCorral || w.Readiness.Path != "/health" || w.StartupTimeout != 10*time.Minute ||
		w.ResultTTL != time.Hour || w.MaxResults != 4096 {
		t.Errorf("worker 1 kind, probe, startup, results = %+v", w)
	}
	if r := cfg.Workers[3]; r.URL != "http://10.0.0.7:8101" || len(r.Command) != 0 || r.Kind != KindCorral || r.Slots != 4 {
		t.Errorf("remote worker = %+v", r)
	}
	// Every worker of the example is valid.
	if _, err := New(cfg.Workers, Options{MaxJobBytes: cfg.MaxJobBytes, MaxJobBytesPerKey: cfg.MaxJobBytesPerKey}); err != nil {
		t.Fatalf("New: %v", err)
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := map[string]string{
		"unknown key":       "workers:\n  - name: a\n    port: 1\n    slotz: 2\n",
		"unknown timeout":   "workers:\n  - name: a\n    port: 1\n    timeouts: {idle: 1s}\n",
		"bad duration":      "workers:\n  - name: a\n    port: 1\n    timeouts: {connect: soon}\n",
		"no workers":        "port: 8090\n",
		"tool with no cmd":  "workers:\n  - name: a\n    port: 1\n    tools: [{function: {name: t}}]\n",
		"not yaml":          "workers: [\n",
		"no default binary": "workers:\n  - name: a\n    port: 1\n",
		"args to a remote":  "workers:\n  - name: a\n    url: http://h:1\n    args: [x]\n",
	}
	for name, doc := range tests {
		t.Run(name, func(t *testing.T) {
			corral := "/opt/corral"
			if name == "no default binary" {
				corral = ""
			}
			if _, err := ParseConfig([]byte(doc), corral); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestNewWorkerValidates(t *testing.T) {
	ok := WorkerConfig{Name: "a", Command: []string{"x"}, Port: 9000}
	if _, err := NewWorker(ok); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	bad := map[string]func(*WorkerConfig){
		"no name":       func(c *WorkerConfig) { c.Name = "" },
		"no command":    func(c *WorkerConfig) { c.Command = nil },
		"no port":       func(c *WorkerConfig) { c.Port = 0 },
		"bad timezone":  func(c *WorkerConfig) { c.Timezone = "Mars/Olympus" },
		"bad format":    func(c *WorkerConfig) { c.ToolFormat = "xml" },
		"no interval":   func(c *WorkerConfig) { c.Timeouts = TimeoutProfile{Connect: time.Second} },
		"negative slot": func(c *WorkerConfig) { c.Slots = -1 },
		"nameless tool": func(c *WorkerConfig) { c.ExitTools = []agent.ToolDef{{}} },
		"url and cmd":   func(c *WorkerConfig) { c.URL = "http://h:1" },
		"bad url":       func(c *WorkerConfig) { c.Command, c.URL = nil, "h:1" },
		"bad kind":      func(c *WorkerConfig) { c.Kind = "ollama" },
		"unset key env": func(c *WorkerConfig) { c.APIKeyEnv = "SUPERVISOR_TEST_UNSET_KEY" },
		"negative ttl":  func(c *WorkerConfig) { c.ResultTTL = -time.Second },
	}
	for name, mutate := range bad {
		c := ok
		mutate(&c)
		if _, err := NewWorker(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	remote, err := NewWorker(WorkerConfig{Name: "r", URL: "https://gpu7.example:8443/llm/"})
	if err != nil || remote.baseURL != "https://gpu7.example:8443/llm" || !remote.remote || remote.cfg.Readiness.Path != "/v1/models" {
		t.Errorf("remote worker: %+v, %v", remote, err)
	}
	if _, err := New([]WorkerConfig{ok, ok}, Options{}); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Errorf("duplicate names: %v", err)
	}
}

func TestExpandArgs(t *testing.T) {
	c := WorkerConfig{Name: "n", Model: "m", Host: "h", Port: 7, Slots: 3,
		Command: []string{"srv", "--addr={host}:{port}", "-np", "{slots}", "{name}/{model}"}}
	want := []string{"srv", "--addr=h:7", "-np", "3", "n/m"}
	if got := expandArgs(c); !slices.Equal(got, want) {
		t.Fatalf("expandArgs = %q, want %q", got, want)
	}
}

func TestPayloadMergesParams(t *testing.T) {
	w, err := NewWorker(WorkerConfig{Name: "a", Model: "m", Command: []string{"x"}, Port: 9000, MaxTokens: 64,
		ExitTools: []agent.ToolDef{{Type: "function", Function: agent.ToolFunctionDef{Name: "done"}}}})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []wire.Message{{Role: "user", Content: "hi"}}
	params := map[string]any{"temperature": 0.5, "brand_new_knob": []any{1, "x"}, "stream": false, "messages": "ignored", "tools": "ignored"}
	p := w.payload(params, msgs)
	if p["temperature"] != 0.5 || p["stream"] != true || p["model"] != "m" || p["max_tokens"] != 64 {
		t.Errorf("payload = %v", p)
	}
	if !slices.Equal(p["brand_new_knob"].([]any), []any{1, "x"}) {
		t.Errorf("unknown key not passed through: %v", p["brand_new_knob"])
	}
	if m, ok := p["messages"].([]wire.Message); !ok || len(m) != 1 {
		t.Errorf("messages = %v", p["messages"])
	}
	if tools, ok := p["tools"].([]agent.ToolDef); !ok || len(tools) != 1 || tools[0].Function.Name != "done" {
		t.Errorf("native tools = %v", p["tools"])
	}
	if params["stream"] != false {
		t.Error("payload modified the caller's params")
	}
	// The usage is always asked for (it is charged to the job's key);
	// the caller's other stream options pass through.
	if so, ok := p["stream_options"].(map[string]any); !ok || so["include_usage"] != true {
		t.Errorf("stream_options = %v", p["stream_options"])
	}
	theirs := map[string]any{"include_usage": false, "continuous_usage_stats": true}
	p = w.payload(map[string]any{"stream_options": theirs}, msgs)
	if so := p["stream_options"].(map[string]any); so["include_usage"] != true || so["continuous_usage_stats"] != true || theirs["include_usage"] != false {
		t.Errorf("stream_options = %v, the caller's now %v", so, theirs)
	}
	p = w.payload(map[string]any{"max_completion_tokens": 5, "model": "other"}, msgs)
	if _, ok := p["max_tokens"]; ok || p["model"] != "other" {
		t.Errorf("caller's limits/model overridden: %v", p)
	}
	w.cfg.ToolFormat = agent.ToolFormatJSON
	if _, ok := w.payload(nil, msgs)["tools"]; ok {
		t.Error("json tool format sends native tools")
	}
}
