package openai_test

// FuzzRequests sends request bodies to the real server's routes, in
// process, over loopback HTTP and the voice WebSocket, with the tiny real
// model behind them. Every answer must be a 2xx or a 4xx in its API's
// shape, every stream must parse, nothing may panic or hang, and one
// request may allocate only so much. The seed corpus runs with every
// `go test`; fuzz longer with
//
//	go test -run '^$' -fuzz FuzzRequests -fuzztime 10m ./openai/

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/server"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/voice"
	"github.com/corral-llm/corral/wire"
)

// fuzzPaths are the endpoints FuzzRequests reaches, by the input's
// first byte; fuzzVoice is the voice WebSocket.
var fuzzPaths = []string{"/v1/chat/completions", "/v1/completions", "/completion", "/api/chat", "/api/generate", "/v1/embeddings", "/detokenize", "/v1/responses", fuzzVoice}

const fuzzVoice = "voice"

// fuzzWait bounds one input: longer is a hang.
const fuzzWait = 2 * time.Minute

// fuzzAlloc bounds what one request may allocate, with fuzzAllocPerByte
// per byte of its body.
const (
	fuzzAlloc        = 96 << 20
	fuzzAllocPerByte = 64
)

// fuzzSeeds are requests of every kind: ordinary ones, and small forms of
// the hostile ones. stored is the id of the response the harness stored
// (see fuzzStored).
func fuzzSeeds(stored string) map[string][]string {
	msgs := `"messages":[{"role":"user","content":"Tell me a story."}]`
	tool := `{"type":"function","function":{"name":"get","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`
	many := func(s string, n int) string { return strings.TrimSuffix(strings.Repeat(s+",", n), ",") }
	props := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"p%d":{}`, i)
		}
		return `{"type":"object","properties":{` + b.String() + `}}`
	}
	return map[string][]string{
		"/v1/chat/completions": {
			`{` + msgs + `,"max_tokens":8}`,
			`{` + msgs + `,"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`,
			`{` + msgs + `,"max_tokens":8,"logprobs":true,"top_logprobs":20}`,
			`{` + msgs + `,"max_tokens":24,"stream":true,"chunking":{"max_chars":20}}`,
			`{` + msgs + `,"max_tokens":8,"tools":[` + tool + `],"tool_choice":"required"}`,
			`{` + msgs + `,"max_tokens":8,"tools":[` + tool + `],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[` + many(`{"type":"function","function":{"name":"get"}}`, 1001) + `]}}}`,
			`{` + msgs + `,"max_tokens":8,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + props(10001) + `}}}`,
			`{` + msgs + `,"max_tokens":8,"tools":[` + many(tool, 2) + `]}`,
			`{"messages":[` + many(`{"role":"user","content":"a"}`, 10001) + `]}`,
			`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"get","arguments":"{\"city\":\"x\"}"}}]},{"role":"tool","tool_call_id":"1","content":"sunny"}],"max_tokens":4}`,
		},
		"/v1/completions": {
			`{"prompt":"Once upon a time","max_tokens":8}`,
			`{"prompt":[1,2,3],"max_tokens":8,"logprobs":5,"stream":true}`,
			`{"prompt":"a","max_tokens":8,"response_format":{"type":"json_object"}}`,
		},
		"/completion": {
			`{"prompt":"Once upon a time","n_predict":8}`,
			`{"prompt":"a","n_predict":-1,"n_probs":100}`,
			`{"prompt":"a","n_predict":8,"stream":true,"n_probs":3}`,
			`{"prompt":"a","n_predict":8,"grammar":"root ::= \"yes\" | \"no\""}`,
			`{"prompt":"a","n_predict":8,"json_schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}`,
			`{"prompt":"a","json_schema":` + props(10001) + `}`,
		},
		"/api/chat": {
			`{"model":"tiny",` + msgs + `,"stream":false,"options":{"num_predict":8}}`,
			`{"model":"tiny",` + msgs + `,"options":{"num_predict":8}}`,
			`{"model":"tiny",` + msgs + `,"format":"json","stream":false,"options":{"num_predict":8}}`,
			`{"model":"tiny",` + msgs + `,"tools":[` + tool + `],"options":{"num_predict":8}}`,
			`{"model":"tiny",` + msgs + `,"format":` + props(10001) + `}`,
			`{"model":"tiny"}`,
		},
		"/api/generate": {
			`{"model":"tiny","prompt":"Once upon a time","raw":true,"options":{"num_predict":8}}`,
			`{"model":"tiny","prompt":"Hi","system":"Be brief.","stream":false,"options":{"num_predict":8}}`,
		},
		"/v1/embeddings": {
			`{"input":"hello"}`,
			`{"input":[[1,2],[3]]}`,
		},
		"/detokenize": {
			`{"tokens":[1,2,3,4]}`,
			`{"tokens":[` + many("5", 5000) + `]}`,
		},
		"/v1/responses": {
			`{"model":"tiny","input":"Tell me a story.","max_output_tokens":8}`,
			`{"model":"tiny","input":"Tell me a story.","max_output_tokens":8,"stream":true,"store":false}`,
			`{"model":"tiny","instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"Hi."}]}],"max_output_tokens":8,"tools":[{"type":"function","name":"get","parameters":{"type":"object"}}],"tool_choice":"required"}`,
			`{"model":"tiny","previous_response_id":"` + stored + `","input":"Go on.","max_output_tokens":8}`,
			`{"model":"tiny","previous_response_id":"` + stored + `","input":[{"type":"function_call_output","call_id":"call_fuzz","output":"sunny"}],"max_output_tokens":8,"stream":true}`,
			`{"model":"tiny","input":[{"type":"item_reference","id":"fc_fuzz"},{"type":"function_call_output","call_id":"call_fuzz","output":"sunny"}],"max_output_tokens":8}`,
			`{"model":"tiny","input":[{"id":"msg_fuzz_junk"},{"type":"item_reference","id":"rs_fuzz_big"}],"max_output_tokens":8}`,
			`{"model":"tiny","input":[{"type":"item_reference","id":"nowhere"}]}`,
			// Small requests that refer to much: 200 and 8,000 references
			// to 1 MB of reasoning, 1,000 to a message with 1 MB of junk.
			`{"model":"tiny","input":[` + many(`{"type":"item_reference","id":"rs_fuzz_big"}`, 200) + `],"max_output_tokens":4}`,
			`{"model":"tiny","input":[` + many(`{"type":"item_reference","id":"rs_fuzz_big"}`, 8000) + `],"max_output_tokens":4}`,
			`{"model":"tiny","input":[` + many(`{"type":"item_reference","id":"msg_fuzz_junk"}`, 1000) + `],"max_output_tokens":4,"stream":true}`,
		},
		fuzzVoice: {
			`{"type":"response.create","messages":[{"role":"user","content":"Hi.","metadata":{"blob":"zzzz"}}],"max_tokens":8,"chunking":{"max_chars":10}}`,
			`{"type":"response.create","messages":[{"role":"system","content":"Be kind."},{"role":"user","content":"Hi."}],"reset":true,"max_tokens":4}`,
			`{"type":"continue"}`,
			`{"type":"interrupt","spoken_chars":3}`,
			`{"type":"response.create","messages":[` + many(`{"role":"user","content":"a"}`, 10001) + `]}`,
		},
	}
}

// fuzzHarness is the server FuzzRequests talks to.
type fuzzHarness struct {
	url    string
	client *http.Client
	// stored is the id of the response fuzzStored stored.
	stored string
}

// fuzzStored is the input of a response the harness stores, so that
// inputs may refer to it: a reasoning item of 1 MB (rs_fuzz_big), a
// message with an unknown field of 1 MB (msg_fuzz_junk), a function call
// (fc_fuzz).
func fuzzStored() string {
	return `{"model":"tiny","max_output_tokens":4,"input":[` +
		`{"type":"reasoning","id":"rs_fuzz_big","summary":[],"content":[{"type":"reasoning_text","text":"` + strings.Repeat("r", 1<<20) + `"}]},` +
		`{"type":"message","id":"msg_fuzz_junk","role":"user","content":"Tell me a story.","junk":"` + strings.Repeat("j", 1<<20) + `"},` +
		`{"type":"function_call","id":"fc_fuzz","call_id":"call_fuzz","name":"get","arguments":"{}"},` +
		`{"type":"function_call_output","call_id":"call_fuzz","output":"sunny"}]}`
}

func newFuzzHarness(tb testing.TB) *fuzzHarness {
	tb.Helper()
	quiet := slog.New(slog.DiscardHandler)
	eng, err := engine.New(context.Background(), engine.Config{ModelPath: testmodel.Path(tb, testmodel.TinyStories656K), Threads: 1, Parallel: 2, CtxSize: 512})
	if err != nil {
		tb.Fatal(err)
	}
	m, err := model.New(eng, model.Options{Logger: quiet})
	if err != nil {
		eng.Close()
		tb.Fatal(err)
	}
	reg, err := registry.New(registry.Config{KeepAlive: -1, Logger: quiet}, []registry.Spec{{ID: "tiny", Pinned: true}},
		func(context.Context, registry.Spec) (*model.Model, error) { return m, nil })
	if err != nil {
		eng.Close()
		tb.Fatal(err)
	}
	srv := server.New(server.Config{Logger: quiet})
	srv.SetCore(serving.New(reg, serving.Options{Logger: quiet}))
	hs := httptest.NewServer(srv.Handler())
	tb.Cleanup(func() {
		hs.Close()
		reg.Close()
		eng.Close() // the registry closes only a model it loaded: none, in the fuzzing coordinator
	})
	h := &fuzzHarness{url: hs.URL, client: &http.Client{Timeout: fuzzWait}}
	resp, err := h.client.Post(h.url+"/v1/responses", "application/json", strings.NewReader(fuzzStored()))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var stored struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&stored); err != nil || resp.StatusCode != http.StatusOK || stored.ID == "" {
		tb.Fatalf("storing a response: %d %v", resp.StatusCode, err)
	}
	h.stored = stored.ID
	return h
}

func FuzzRequests(f *testing.F) {
	h := newFuzzHarness(f)
	seeds := fuzzSeeds(h.stored)
	for i, p := range fuzzPaths {
		for _, s := range seeds[p] {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, endpoint uint8, body []byte) {
		path := fuzzPaths[int(endpoint)%len(fuzzPaths)]
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if path == fuzzVoice {
			h.voice(t, body)
		} else {
			h.post(t, path, body)
		}
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > fuzzAlloc+fuzzAllocPerByte*uint64(len(body)) {
			t.Errorf("%s: %d MB allocated for a %d-byte request", path, alloc>>20, len(body))
		}
	})
}

// post sends body to path and checks the answer.
func (h *fuzzHarness) post(t *testing.T, path string, body []byte) {
	resp, err := h.client.Post(h.url+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	ollama := strings.HasPrefix(path, "/api/")
	ct := resp.Header.Get("Content-Type")
	t.Logf("POST %s: %d %s", path, resp.StatusCode, ct)
	switch {
	case resp.StatusCode >= 500 || resp.StatusCode < 200 || resp.StatusCode >= 300 && resp.StatusCode < 400:
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: status %d: %.500s", path, resp.StatusCode, b)
	case resp.StatusCode >= 400:
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		checkError(t, path, b, ollama)
	case strings.HasPrefix(ct, "text/event-stream"):
		h.readSSE(t, path, resp.Body)
	case strings.HasPrefix(ct, "application/x-ndjson"):
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			checkEvent(t, path, sc.Bytes(), ollama)
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("POST %s: reading the stream: %v", path, err)
		}
	case strings.HasPrefix(ct, "application/json"):
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("POST %s: 200 with no JSON: %v: %.500s", path, err, b)
		}
	default:
		t.Fatalf("POST %s: status %d, Content-Type %q", path, resp.StatusCode, ct)
	}
}

// readSSE reads a stream of server-sent events, continuing a paced one
// after each held chunk.
func (h *fuzzHarness) readSSE(t *testing.T, path string, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue // a comment (ping), a blank line, the end
		}
		checkEvent(t, path, []byte(data), false)
		var ev struct {
			ID    string          `json:"id"`
			Chunk *wire.ChunkInfo `json:"chunk"`
		}
		json.Unmarshal([]byte(data), &ev)
		if ev.Chunk != nil && ev.Chunk.Held {
			resp, err := h.client.Post(h.url+path+"/"+ev.ID+"/continue", "application/json", strings.NewReader(fmt.Sprintf(`{"index":%d}`, ev.Chunk.Index)))
			if err != nil {
				t.Fatalf("continue: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound { // not found: it ended meanwhile
				t.Fatalf("continue: status %d", resp.StatusCode)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("POST %s: reading the stream: %v", path, err)
	}
}

// checkEvent checks one event of a stream: a JSON object, and an error
// in it one of the API's shape about the request, not the server.
func checkEvent(t *testing.T, path string, b []byte, ollama bool) {
	t.Helper()
	var ev map[string]json.RawMessage
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("POST %s: an event that is no JSON object: %v: %.500s", path, err, b)
	}
	if _, ok := ev["error"]; ok {
		checkError(t, path, b, ollama)
		if bytes.Contains(b, []byte(wire.TypeServer)) {
			t.Fatalf("POST %s: a server error in the stream: %.500s", path, b)
		}
	}
	// The Responses API's error event: {"type":"error","code","message","param"}.
	if string(ev["type"]) == `"error"` {
		var code, msg string
		json.Unmarshal(ev["code"], &code)
		json.Unmarshal(ev["message"], &msg)
		if msg == "" || code == "" || code == wire.TypeServer {
			t.Fatalf("POST %s: an error event of the server, or without a message: %.500s", path, b)
		}
	}
}

// checkError checks an error body: OpenAI's envelope with a message, or
// with ollama Ollama's {"error": message}.
func checkError(t *testing.T, path string, b []byte, ollama bool) {
	t.Helper()
	if ollama {
		var res map[string]any
		if err := json.Unmarshal(b, &res); err != nil || len(res) != 1 {
			t.Fatalf("POST %s: not Ollama's error: %v: %.500s", path, err, b)
		}
		if msg, _ := res["error"].(string); msg == "" {
			t.Fatalf("POST %s: an error without a message: %.500s", path, b)
		}
		return
	}
	var env struct {
		Error *wire.ErrorObject `json:"error"`
	}
	if err := json.Unmarshal(b, &env); err != nil || env.Error == nil || env.Error.Message == "" || env.Error.Type == "" {
		t.Fatalf("POST %s: not an error envelope: %v: %.500s", path, err, b)
	}
}

// voice sends body as a client message on a fresh socket, twice when the
// first ends an answer (the second turn has a conversation), and reads
// the server's events to each one's end: an error, or done after the
// chunks, each continued.
func (h *fuzzHarness) voice(t *testing.T, body []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), fuzzWait)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+"/v1/voice", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(voice.MaxMessage)
	for turn := range 2 {
		if err := conn.Write(ctx, websocket.MessageText, body); err != nil {
			t.Fatalf("voice: write: %v", err)
		}
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				t.Fatalf("voice turn %d: read: %v", turn, err)
			}
			var ev voice.ServerEvent
			if err := json.Unmarshal(b, &ev); err != nil {
				t.Fatalf("voice: an event that is no JSON: %v: %.500s", err, b)
			}
			switch ev.Type {
			case voice.TypeError:
				if ev.Error == nil || ev.Error.Message == "" || ev.Error.Type != wire.TypeInvalidRequest {
					t.Fatalf("voice: error event %.500s", b)
				}
				conn.Close(websocket.StatusNormalClosure, "")
				return
			case voice.TypeDone:
				if ev.Message == nil || ev.FinishReason == "" || ev.Error != nil && ev.Error.Type != wire.TypeInvalidRequest {
					t.Fatalf("voice: done event %.500s", b)
				}
			case voice.TypeChunk:
				if err := conn.Write(ctx, websocket.MessageText, []byte(`{"type":"continue"}`)); err != nil {
					t.Fatalf("voice: continue: %v", err)
				}
				continue
			case voice.TypeCreated:
				continue
			default:
				t.Fatalf("voice: unknown event %.500s", b)
			}
			break // done
		}
	}
	conn.Close(websocket.StatusNormalClosure, "")
}
