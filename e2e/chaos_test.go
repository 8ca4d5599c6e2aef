//go:build linux

package e2e

// The chaos test runs the real `corral serve` binary as a child process
// and sends it hostile requests one at a time. After each one the child
// must still be alive, healthy and idle. A crash fails the case (and the
// test) and a fresh child serves the cases after it, so one run reports
// every case.
//
// Linux only: the child is pinned to its parent with a parent-death
// signal and limited with prlimit, and its peak memory is read from /proc.

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/internal/testmodel"
)

const (
	// chaosPeakRSS is the peak resident memory the child may reach.
	chaosPeakRSS = 1 << 30
	// chaosWait bounds every wait: for health at start, for the slots
	// to go idle, for one request.
	chaosWait = e2etest.ChildWait
)

// chaosChild is one `corral serve` process on a loopback port.
type chaosChild struct {
	*e2etest.Child
	// bloated is set once the child's peak memory passed chaosPeakRSS: a
	// fresh child serves the next cases, so that they are judged alone.
	bloated bool
}

// exponentialGrammar is n rules r_i ::= r_{i+1} | r_{i+1}: llama.cpp
// explores all 2^n paths, without memoizing, for every character.
func exponentialGrammar(n int) string {
	var b strings.Builder
	b.WriteString("root ::= r0\n")
	for i := range n {
		fmt.Fprintf(&b, "r%d ::= r%d | r%d\n", i, i+1, i+1)
	}
	fmt.Fprintf(&b, "r%d ::= \"a\"\n", n)
	return b.String()
}

// startChaosChild starts `corral serve` on the tiny model with two slots
// and one thread, and waits until /health answers 200.
func startChaosChild(t *testing.T) *chaosChild {
	t.Helper()
	return &chaosChild{Child: e2etest.StartChild(t, testmodel.TinyStories656K, "-np", "2", "-t", "1")}
}

// checkHealthy asserts the invariants after every case: the child is
// alive, /health is 200, no slot is processing (polled until idle,
// bounded), and its peak memory stayed small.
func (c *chaosChild) checkHealthy(t *testing.T) {
	t.Helper()
	if !c.Alive() {
		t.Fatal(c.Died())
	}
	if code, b := c.Request(t, http.MethodGet, "/health", nil); code != http.StatusOK {
		t.Fatalf("GET /health: %d %s", code, b)
	}
	c.waitIdle(t)
	if rss, err := peakRSS(c.PID); err != nil {
		t.Errorf("peak memory: %v", err)
	} else if rss > chaosPeakRSS {
		c.bloated = true
		t.Errorf("corral serve's peak resident memory is %d MiB (limit %d MiB)", rss>>20, chaosPeakRSS>>20)
	}
	if !c.Alive() {
		t.Fatal(c.Died())
	}
}

// waitIdle polls GET /slots until no slot is processing.
func (c *chaosChild) waitIdle(t *testing.T) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(chaosWait)
	defer deadline.Stop()
	for {
		code, b := c.Request(t, http.MethodGet, "/slots", nil)
		if code != http.StatusOK {
			t.Fatalf("GET /slots: %d %s", code, b)
		}
		var slots []struct {
			IsProcessing bool `json:"is_processing"`
		}
		if err := json.Unmarshal(b, &slots); err != nil || len(slots) != 2 {
			t.Fatalf("GET /slots: %v in %s, want 2 slots", err, b)
		}
		if !slots[0].IsProcessing && !slots[1].IsProcessing {
			return
		}
		select {
		case <-tick.C:
		case <-c.Exited():
			t.Fatal(c.Died())
		case <-deadline.C:
			t.Fatalf("a slot is still processing after %s: %s", chaosWait, b)
		}
	}
}

// peakRSS reads the process's peak resident memory (VmHWM) in bytes.
func peakRSS(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// chaosCase is one hostile request, or a scenario of a few.
type chaosCase struct {
	name string
	path string                  // POST here...
	body func(*testing.T) []byte // ...this body
	want []int                   // acceptable statuses
	// check, if set, looks at a response with a wanted status.
	check func(t *testing.T, code int, body []byte)
	// run, if set, replaces path/body/want/check.
	run func(t *testing.T, c *chaosChild)
	// contentType is the body's, application/json when "".
	contentType string
	// ollama: errors come in Ollama's shape, {"error": message}.
	ollama bool
}

// completion is a /completion body: prompt "a", 4 tokens, plus extra.
func completion(extra map[string]any) func(*testing.T) []byte {
	return func(t *testing.T) []byte {
		body := map[string]any{"prompt": "a", "n_predict": 4}
		for k, v := range extra {
			body[k] = v
		}
		return e2etest.Marshal(t, body)
	}
}

// isCompletion checks that a 200 body is a finished /completion object.
func isCompletion(t *testing.T, code int, body []byte) {
	t.Helper()
	var r e2etest.LlamaResult
	if err := json.Unmarshal(body, &r); err != nil || r.Content == nil || !r.Stop {
		t.Errorf("200 without a finished completion: %v in %.500s", err, body)
	}
}

// isOllamaError checks that an error status comes in Ollama's shape.
func isOllamaError(t *testing.T, code int, body []byte) {
	t.Helper()
	var res map[string]any
	if err := json.Unmarshal(body, &res); err != nil || len(res) != 1 || res["error"] == "" {
		t.Errorf("%d without Ollama's error: %v in %.500s", code, err, body)
	}
}

// isError checks that an error status comes with the error envelope.
func isError(t *testing.T, code int, body []byte) {
	t.Helper()
	var env e2etest.ErrorEnvelope
	if err := json.Unmarshal(body, &env); err != nil || env.Error == nil || env.Error.Message == "" {
		t.Errorf("%d without an error envelope: %v in %.500s", code, err, body)
	}
}

func chaosCases() []chaosCase {
	ok := []int{http.StatusOK}
	bad := []int{http.StatusBadRequest}
	return []chaosCase{
		{
			name: "grammar nested 60000 deep",
			path: "/completion",
			body: completion(map[string]any{"grammar": "root ::= " + strings.Repeat("(", 60000) + `"a"` + strings.Repeat(")", 60000)}),
			want: bad,
		},
		// Small grammars that crash or hang llama.cpp's grammar engine
		// (each reproduced against the linked llama.cpp).
		{
			name: "grammar of 60000 references to an empty rule",
			path: "/completion",
			body: completion(map[string]any{"grammar": "root ::= " + strings.Repeat("x ", 60000) + `"a"` + "\nx ::= \"\""}),
			want: bad,
		},
		{
			name: "grammar left-recursive through an empty rule",
			path: "/completion",
			body: completion(map[string]any{"grammar": "root ::= x root \"a\" | \"b\"\nx ::= y\ny ::= \"\""}),
			want: bad,
		},
		{
			name: "grammar with 2^40 alternatives",
			path: "/completion",
			body: completion(map[string]any{"grammar": exponentialGrammar(40)}),
			want: bad,
		},
		{
			name: "grammar repetition x{5,3}",
			path: "/completion",
			body: completion(map[string]any{"grammar": `root ::= "a"{5,3}`}),
			want: bad,
		},
		{
			name: "grammar chained repetitions",
			path: "/completion",
			body: completion(map[string]any{"grammar": `root ::= "a"{2000}{2000}{2000}`}),
			want: bad,
		},
		{
			name: "json_schema nested 5000 deep",
			path: "/completion",
			body: completion(map[string]any{"json_schema": json.RawMessage(strings.Repeat(`{"type":"array","items":`, 5000) + `{"type":"string"}` + strings.Repeat("}", 5000))}),
			want: bad,
		},
		{
			name: "n_probs -1",
			path: "/completion",
			body: completion(map[string]any{"n_probs": -1}),
			want: bad,
		},
		{
			// Bounded (engine.MaxTopLogprobs): the entries of every token are built and sent.
			name: "n_probs 1000000000",
			path: "/completion",
			body: completion(map[string]any{"n_probs": 1000000000}),
			want: bad,
		},
		{
			// A penalty window of 2e9 tokens must be clamped (or refused),
			// never allocated: 8 GB.
			name: "repeat_last_n 2000000000",
			path: "/completion",
			body: completion(map[string]any{"repeat_last_n": 2000000000, "repeat_penalty": 1.1}),
			want: ok, check: isCompletion,
		},
		{
			name: "repeat_last_n -1",
			path: "/completion",
			body: completion(map[string]any{"repeat_last_n": -1, "repeat_penalty": 1.1}),
			want: ok, check: isCompletion,
		},
		{
			name: "stop with 100 strings",
			path: "/completion",
			body: func(t *testing.T) []byte {
				stops := make([]string, 100)
				for i := range stops {
					stops[i] = fmt.Sprintf("stop word %d", i)
				}
				return completion(map[string]any{"stop": stops})(t)
			},
			want: bad,
		},
		{
			name: "stop string of 10000 bytes",
			path: "/completion",
			body: completion(map[string]any{"stop": []string{strings.Repeat("x", 10000)}}),
			want: bad,
		},
		{
			name: "logit_bias token 99999999",
			path: "/completion",
			body: completion(map[string]any{"logit_bias": map[string]float64{"99999999": 1}}),
			want: bad,
		},
		{
			name: "logit_bias key abc",
			path: "/completion",
			body: completion(map[string]any{"logit_bias": map[string]float64{"abc": 1}}),
			want: bad,
		},
		{
			name: "seed 0 twice at temperature 1",
			run: func(t *testing.T, c *chaosChild) {
				body := e2etest.Marshal(t, map[string]any{"prompt": "Once upon a time", "n_predict": 24, "temperature": 1, "seed": 0, "ignore_eos": true})
				var texts []string
				for i := range 2 {
					code, b := c.Request(t, http.MethodPost, "/completion", body)
					if code != http.StatusOK {
						t.Fatalf("request %d: %d %.500s", i+1, code, b)
					}
					var r e2etest.LlamaResult
					if err := json.Unmarshal(b, &r); err != nil || r.Content == nil {
						t.Fatalf("request %d: %v in %.500s", i+1, err, b)
					}
					texts = append(texts, *r.Content)
				}
				if texts[0] != texts[1] {
					t.Errorf("seed 0 gave two texts:\n%q\n%q", texts[0], texts[1])
				}
			},
		},
		{
			name: "top_k 1000000000",
			path: "/completion",
			body: completion(map[string]any{"top_k": 1000000000}),
			want: ok, check: isCompletion,
		},
		{
			// The slot's context (512 tokens) ends it.
			name: "n_predict 1000000000",
			path: "/completion",
			body: completion(map[string]any{"n_predict": 1000000000, "ignore_eos": true}),
			want: ok,
			check: func(t *testing.T, code int, body []byte) {
				isCompletion(t, code, body)
				var r e2etest.LlamaResult
				json.Unmarshal(body, &r)
				if r.StopType != "limit" || r.TokensPredicted+r.TokensEvaluated > 513 {
					t.Errorf("stop_type %q after %d+%d tokens, want limit within the 512-token slot", r.StopType, r.TokensEvaluated, r.TokensPredicted)
				}
			},
		},
		{
			// tinystories has no token that starts with "{": no JSON
			// object can start, so the grammar is refused up front (the
			// grammar-complete-with-EOS-banned path is tested on
			// stories260K in TestJSONObjectWithIgnoreEOS).
			name: "chat json_object ignore_eos 400 tokens",
			path: "/v1/chat/completions",
			body: func(t *testing.T) []byte {
				return e2etest.Marshal(t, map[string]any{
					"messages":        []map[string]string{{"role": "user", "content": "Tell me a story as JSON."}},
					"response_format": map[string]string{"type": "json_object"},
					"ignore_eos":      true,
					"max_tokens":      400,
				})
			},
			want: bad,
		},
		{
			// tinystories has no byte fallback and no token with "é".
			name: "grammar the vocab cannot start",
			path: "/completion",
			body: completion(map[string]any{"grammar": "root ::= \"\u00e9\u00e9\u00e9\""}),
			want: bad,
		},
		{
			// Characters outside tinystories' vocab map to its unknown token.
			name: "prompt of characters outside the vocab",
			path: "/completion",
			body: func(t *testing.T) []byte { return e2etest.Marshal(t, map[string]any{"prompt": "#({", "n_predict": 4}) },
			want: ok, check: isCompletion,
		},
		{
			name: "20 MB body",
			path: "/completion",
			body: completion(map[string]any{"prompt": strings.Repeat("a", 20<<20)}),
			want: []int{http.StatusRequestEntityTooLarge},
		},
		{
			name: "invalid UTF-8 in a JSON string",
			path: "/completion",
			body: func(*testing.T) []byte { return []byte("{\"prompt\":\"a\xff\xfe\xc3(b\",\"n_predict\":4}") },
			want: bad,
		},
		{
			// Every copy of the tool went into the prompt: 280 GB, and
			// the server died of it. The body is not looked at as JSON
			// for its Content-Type.
			name: "allowed_tools naming one 3.5 MB tool 80000 times, as text/plain",
			path: "/v1/chat/completions",
			body: func(*testing.T) []byte { return allowedToolsFinding() },
			want: []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge}, contentType: "text/plain",
			check: names("max-allowed-tools"),
		},
		{
			// Decoded with a scan per property and per required name:
			// minutes of CPU, outside the tokenization semaphore.
			name: "json_schema of 300000 properties",
			path: "/completion",
			body: completion(map[string]any{"json_schema": json.RawMessage(servetest.ManyProperties(300000))}),
			want: bad, check: names("max-schema-properties"),
		},
		{
			name: "response_format of 300000 properties",
			path: "/v1/chat/completions",
			body: func(t *testing.T) []byte {
				return e2etest.Marshal(t, map[string]any{
					"messages":        []map[string]string{{"role": "user", "content": "hi"}},
					"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": json.RawMessage(servetest.ManyProperties(300000))}},
				})
			},
			want: bad, check: names("max-schema-properties"),
		},
		{
			name: "Ollama format of 300000 properties",
			path: "/api/chat",
			body: func(t *testing.T) []byte {
				return e2etest.Marshal(t, map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}, "format": json.RawMessage(servetest.ManyProperties(300000))})
			},
			want: bad, ollama: true, check: names("max-schema-properties"),
		},
		{
			name: "20000 tools",
			path: "/v1/chat/completions",
			body: func(t *testing.T) []byte {
				tools := make([]map[string]any, 20000)
				for i := range tools {
					tools[i] = map[string]any{"type": "function", "function": map[string]any{"name": fmt.Sprintf("f%d", i)}}
				}
				return e2etest.Marshal(t, map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}, "tools": tools})
			},
			want: bad, check: names("max-tools"),
		},
		{
			name: "100000 messages",
			path: "/v1/chat/completions",
			body: func(t *testing.T) []byte {
				return []byte(`{"messages":[` + strings.TrimSuffix(strings.Repeat(`{"role":"user","content":"a"},`, 100000), ",") + `]}`)
			},
			want: bad, check: names("max-messages"),
		},
		{
			name: "embeddings of 2048 inputs of 3 KB",
			path: "/v1/embeddings",
			body: func(t *testing.T) []byte {
				in := make([]string, 2048)
				for i := range in {
					in[i] = strings.Repeat("x", 3000)
				}
				return e2etest.Marshal(t, map[string]any{"input": in})
			},
			want: bad, check: names("max-embed-bytes"),
		},
		{
			// 101 entries for each of up to 512 tokens: within the limit.
			name: "n_probs 100 until the context is full",
			path: "/completion",
			body: completion(map[string]any{"n_probs": 100, "n_predict": -1, "ignore_eos": true}),
			want: ok, check: isCompletion,
		},
		{
			name: "client stops reading a stream",
			run:  stalledStream,
		},
		{
			// 8,000 references to the 1 MB item (352 KB) were 8 GB of
			// reasoning: fatal error: out of memory.
			name: "8000 references to a stored reasoning item of 1 MB",
			run: func(t *testing.T, c *chaosChild) {
				responsesPair(t, c, `[`+bigReasoningItem("rs_big", 1<<20)+`,{"role":"user","content":"a"}]`,
					referenceItems(8000, "rs_big"), bad, names("max-prompt-bytes"))
			},
		},
		{
			// Each reference parsed the 4 MB again: 11 s of CPU.
			name: "1000 references to a stored message of 4 MB",
			run: func(t *testing.T, c *chaosChild) {
				responsesPair(t, c, `[`+junkUserMessage("msg_junk", 4e6)+`]`, referenceItems(1000, "msg_junk"), []int{http.StatusOK, http.StatusBadRequest}, nil)
			},
		},
	}
}

// responsesPair stores a response of the input items stored, then sends
// a request of the input items refs, which must get a status of want.
func responsesPair(t *testing.T, c *chaosChild, stored, refs string, want []int, check func(t *testing.T, code int, body []byte)) {
	t.Helper()
	if code, b := c.Request(t, http.MethodPost, "/v1/responses", []byte(`{"max_output_tokens":1,"input":`+stored+`}`)); code != http.StatusOK {
		t.Fatalf("storing a response: %d %.500s", code, b)
	}
	code, b := c.Request(t, http.MethodPost, "/v1/responses", []byte(`{"max_output_tokens":1,"input":`+refs+`}`))
	t.Logf("POST /v1/responses: %d %.200s", code, b)
	if !slices.Contains(want, code) {
		t.Errorf("POST /v1/responses: status %d, want one of %v; body %.500s", code, want, b)
	}
	if code != http.StatusOK {
		isError(t, code, b)
	}
	if check != nil {
		check(t, code, b)
	}
}

// names checks that an error's message names the corral serve flag.
func names(flag string) func(t *testing.T, code int, body []byte) {
	return func(t *testing.T, code int, body []byte) {
		t.Helper()
		if code != http.StatusOK && !bytes.Contains(body, []byte("corral serve --"+flag)) {
			t.Errorf("%d does not name --%s: %.500s", code, flag, body)
		}
	}
}

// allowedToolsFinding is the 7 MB request that killed corral serve: one
// tool with a 3.5 MB description, allowed 80,000 times over.
func allowedToolsFinding() []byte {
	var b bytes.Buffer
	b.WriteString(`{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"t","description":"`)
	b.WriteString(strings.Repeat("d", 3500000))
	b.WriteString(`","parameters":{"type":"object"}}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[`)
	for i := range 80000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"type":"function","function":{"name":"t"}}`)
	}
	b.WriteString(`]}}}`)
	return b.Bytes()
}

// stalledStream opens a long stream with a tiny receive buffer, reads the
// response headers and then nothing more. The generation must still end
// and free its slot while the client sits there, and the server must keep
// answering others.
func stalledStream(t *testing.T, c *chaosChild) {
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(c.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := e2etest.Marshal(t, map[string]any{"prompt": "Once upon a time", "n_predict": -1, "ignore_eos": true, "stream": true})
	fmt.Fprintf(conn, "POST /completion HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		strings.TrimPrefix(c.URL, "http://"), len(body), body)
	conn.SetReadDeadline(time.Now().Add(chaosWait))
	head := make([]byte, 12) // "HTTP/1.1 200"
	if _, err := io.ReadFull(conn, head); err != nil {
		c.Settle()
		if !c.Alive() {
			t.Fatalf("stream: %v\n%s", err, c.Died())
		}
		t.Fatalf("stream: reading the status line: %v", err)
	}
	if string(head) != "HTTP/1.1 200" {
		t.Fatalf("stream: status line starts %q, want HTTP/1.1 200", head)
	}
	// Stop reading. The slot must go idle anyway, and others are served.
	c.waitIdle(t)
	if code, b := c.Request(t, http.MethodPost, "/completion", e2etest.Marshal(t, map[string]any{"prompt": "Hello", "n_predict": 4})); code != http.StatusOK {
		t.Fatalf("another client while one stalls: %d %.500s", code, b)
	}
}

func TestChaos(t *testing.T) {
	c := startChaosChild(t)
	for _, cc := range chaosCases() {
		t.Run(strings.ReplaceAll(cc.name, " ", "_"), func(t *testing.T) {
			if cc.run != nil {
				cc.run(t, c)
			} else {
				code, b := c.RequestAs(t, http.MethodPost, cc.path, cc.body(t), cmp.Or(cc.contentType, "application/json"))
				t.Logf("POST %s: %d %.200s", cc.path, code, b)
				switch {
				case !slices.Contains(cc.want, code):
					t.Errorf("POST %s: status %d, want one of %v; body %.500s", cc.path, code, cc.want, b)
				case code == http.StatusOK:
					if cc.check != nil {
						cc.check(t, code, b)
					}
				case cc.ollama:
					isOllamaError(t, code, b)
				default:
					isError(t, code, b)
				}
				if code != http.StatusOK && cc.check != nil {
					cc.check(t, code, b)
				}
			}
			c.checkHealthy(t)
		})
		if !c.Alive() || c.bloated {
			// The case has failed (with the child's log if it died); a
			// fresh child serves the rest.
			t.Logf("restarting corral serve after %q", cc.name)
			c.Kill()
			c = startChaosChild(t)
		}
	}
}
