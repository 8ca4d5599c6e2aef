package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/openai"
)

// These tests run the real engine on a real model behind the real server
// on a loopback port.

// golden are greedy continuations of TinyStories656K, from
// ../shared/models/GOLDEN.md (BOS added, n tokens, no EOG reached).
var golden = []struct {
	prompt string
	n      int
	want   string
}{
	{"Once upon a time", 32, ", a little girl named Lily lived in a small house. She loved to eat yummy food. One day, she saw a small bird on the ground. The bird was sad because it could not eat it.\nLily wanted to help the bird. She tried to eat the food and "},
	{"Hello", 16, " and a girl were walking in the park. One day she saw a small bird flying in the sk"},
	{"The little dog", 48, "was in a big forest. He liked to run and jump all day long. He liked to run and jump and play with his friends. One day, he saw a small bird flying in the sky. He wanted to be friends with it, but he was scared. He tried to jump and reach the bird, but he could not reach the bird"},
}

// testServer is a running server over a real engine.
type testServer struct {
	url    string
	client *http.Client
	info   engine.ModelInfo
	stop   func() error // shuts the server down; returns Serve's error
}

// startServer loads TinyStories656K with cfg and serves it on 127.0.0.1.
func startServer(t *testing.T, cfg engine.Config) *testServer {
	t.Helper()
	return startModel(t, testmodel.TinyStories656K, cfg)
}

// startModel serves the named test model with cfg on 127.0.0.1.
func startModel(t *testing.T, model string, cfg engine.Config) *testServer {
	t.Helper()
	cfg.ModelPath = testmodel.Path(t, model)
	cfg.Name = "tiny"
	eng, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	log, _ := newLogger()
	api, err := openai.New(eng, openai.Options{Logger: log})
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	s := New(Config{Logger: log})
	s.SetAPI(api)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	var served error
	stopped := false
	ts := &testServer{
		url:    "http://" + ln.Addr().String(),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}},
		info:   eng.Info(),
	}
	ts.stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			served = <-done
		}
		return served
	}
	t.Cleanup(func() {
		ts.client.CloseIdleConnections()
		if err := ts.stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := eng.Close(); err != nil {
			t.Errorf("engine Close: %v", err)
		}
	})
	return ts
}

// post sends body as JSON and returns the whole response.
func (ts *testServer) post(t *testing.T, path string, body any) (*http.Response, []byte) {
	t.Helper()
	return ts.do(t, context.Background(), http.MethodPost, path, body)
}

func (ts *testServer) do(t *testing.T, ctx context.Context, method, path string, body any) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, ts.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, b
}

// get fetches path and decodes its JSON body into v.
func (ts *testServer) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, b := ts.do(t, context.Background(), http.MethodGet, path, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, b)
		}
	}
}

// openStream posts body and returns the response of a stream, status 200
// checked, for reading with readEvents.
func (ts *testServer) openStream(t *testing.T, ctx context.Context, path string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.url+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("POST %s: %d %s %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return resp
}

// readEvents reads a whole event stream, checking its framing, and
// returns the data of each event.
func readEvents(t *testing.T, resp *http.Response) []string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	if !bytes.HasSuffix(b, []byte("\n\n")) {
		t.Fatalf("stream does not end with a blank line: %q", b)
	}
	var events []string
	for _, ev := range strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("malformed event %q", ev)
		}
		events = append(events, data)
	}
	return events
}

func unmarshal(t *testing.T, data string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(data), v); err != nil {
		t.Fatalf("%v in %s", err, data)
	}
}

type textCompletion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

type llamaCompletion struct {
	Content         string `json:"content"`
	Stop            bool   `json:"stop"`
	TokensPredicted int    `json:"tokens_predicted"`
	TokensEvaluated int    `json:"tokens_evaluated"`
	StopType        string `json:"stop_type"`
	Timings         *struct {
		PredictedN int `json:"predicted_n"`
	} `json:"timings"`
}

// v1Stream reads a /v1/completions stream and returns its text, checking
// the finish chunk and the [DONE] marker.
func v1Stream(t *testing.T, resp *http.Response, finish string) string {
	t.Helper()
	events := readEvents(t, resp)
	if len(events) < 2 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", events)
	}
	var text strings.Builder
	for i, data := range events[:len(events)-1] {
		var c textCompletion
		unmarshal(t, data, &c)
		if c.Object != "text_completion" || len(c.Choices) != 1 || !strings.HasPrefix(c.ID, "cmpl-") {
			t.Fatalf("chunk %d: %s", i, data)
		}
		last := i == len(events)-2
		if got := c.Choices[0].FinishReason; (got != nil) != last || (last && *got != finish) {
			t.Fatalf("chunk %d of %d: finish_reason in %s, want %q on the last only", i, len(events)-1, data, finish)
		}
		text.WriteString(c.Choices[0].Text)
	}
	return text.String()
}

// llamaStream reads a /completion stream and returns its text and final
// object.
func llamaStream(t *testing.T, resp *http.Response) (string, llamaCompletion) {
	t.Helper()
	events := readEvents(t, resp)
	var text strings.Builder
	var c llamaCompletion
	for i, data := range events {
		c = llamaCompletion{}
		unmarshal(t, data, &c)
		if c.Stop != (i == len(events)-1) {
			t.Fatalf("event %d of %d: %s", i, len(events), data)
		}
		text.WriteString(c.Content)
	}
	return text.String(), c
}

func TestGolden(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 4})
	for _, g := range golden {
		v1 := map[string]any{"model": "tiny", "prompt": g.prompt, "max_tokens": g.n, "temperature": 0, "ignore_eos": true}
		llama := map[string]any{"prompt": g.prompt, "n_predict": g.n, "temperature": 0, "ignore_eos": true}
		t.Run(g.prompt+"/v1", func(t *testing.T) {
			t.Parallel()
			resp, b := ts.post(t, "/v1/completions", v1)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			var c textCompletion
			unmarshal(t, string(b), &c)
			if c.Object != "text_completion" || c.Model != "tiny" || len(c.Choices) != 1 {
				t.Fatalf("response %s", b)
			}
			if c.Choices[0].Text != g.want {
				t.Errorf("text %q\nwant %q", c.Choices[0].Text, g.want)
			}
			if fr := c.Choices[0].FinishReason; fr == nil || *fr != "length" {
				t.Errorf("finish_reason %v, want length", fr)
			}
			if u := c.Usage; u == nil || u.CompletionTokens != g.n || u.PromptTokens == 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
				t.Errorf("usage %+v", u)
			}
		})
		t.Run(g.prompt+"/v1 stream", func(t *testing.T) {
			t.Parallel()
			body := map[string]any{"stream": true}
			for k, v := range v1 {
				body[k] = v
			}
			if got := v1Stream(t, ts.openStream(t, context.Background(), "/v1/completions", body), "length"); got != g.want {
				t.Errorf("text %q\nwant %q", got, g.want)
			}
		})
		t.Run(g.prompt+"/completion", func(t *testing.T) {
			t.Parallel()
			resp, b := ts.post(t, "/completion", llama)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			var c llamaCompletion
			unmarshal(t, string(b), &c)
			if c.Content != g.want || !c.Stop || c.TokensPredicted != g.n || c.StopType != "limit" || c.TokensEvaluated == 0 {
				t.Errorf("got %s\nwant content %q", b, g.want)
			}
		})
		t.Run(g.prompt+"/completion stream", func(t *testing.T) {
			t.Parallel()
			body := map[string]any{"stream": true}
			for k, v := range llama {
				body[k] = v
			}
			text, final := llamaStream(t, ts.openStream(t, context.Background(), "/completion", body))
			if text != g.want {
				t.Errorf("text %q\nwant %q", text, g.want)
			}
			if final.TokensPredicted != g.n || final.StopType != "limit" || final.Timings == nil || final.Timings.PredictedN != g.n {
				t.Errorf("final event %+v", final)
			}
		})
	}
}

// TestConcurrentStreams runs 16 streams on 4 slots; each must produce its
// greedy continuation exactly, whatever it was batched with.
func TestConcurrentStreams(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 4})
	type result struct {
		i    int
		text string
	}
	results := make(chan result, 16)
	for i := range 16 {
		g := golden[i%len(golden)]
		go func() {
			// Failures come back as an impossible text: t.Fatal must not
			// be called off the test goroutine.
			text := func() string {
				body := map[string]any{"prompt": g.prompt, "max_tokens": g.n, "temperature": 0, "ignore_eos": true, "stream": true}
				b, _ := json.Marshal(body)
				resp, err := ts.client.Post(ts.url+"/v1/completions", "application/json", bytes.NewReader(b))
				if err != nil {
					return "<" + err.Error() + ">"
				}
				defer resp.Body.Close()
				var sb strings.Builder
				sc := bufio.NewScanner(resp.Body)
				done := false
				for sc.Scan() {
					data, ok := strings.CutPrefix(sc.Text(), "data: ")
					if !ok {
						continue
					}
					if data == "[DONE]" {
						done = true
						continue
					}
					var c textCompletion
					if json.Unmarshal([]byte(data), &c) != nil || len(c.Choices) != 1 {
						return "<bad event " + data + ">"
					}
					sb.WriteString(c.Choices[0].Text)
				}
				if !done {
					return "<no [DONE]>"
				}
				return sb.String()
			}()
			results <- result{i, text}
		}()
	}
	for range 16 {
		r := <-results
		if want := golden[r.i%len(golden)].want; r.text != want {
			t.Errorf("stream %d: %q\nwant %q", r.i, r.text, want)
		}
	}
}

type chatCompletion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func TestChat(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 2})
	// The model has no chat template: ChatML is the fallback.
	var tok struct{ Tokens []int }
	_, b := ts.post(t, "/tokenize", map[string]any{"content": "<|im_start|>user\nTell me a story.<|im_end|>\n<|im_start|>assistant\n", "add_special": true})
	unmarshal(t, string(b), &tok)

	req := map[string]any{
		"model":      "tiny",
		"messages":   []map[string]string{{"role": "user", "content": "Tell me a story."}},
		"max_tokens": 12, "temperature": 0, "ignore_eos": true,
	}
	resp, b := ts.post(t, "/v1/chat/completions", req)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var c chatCompletion
	unmarshal(t, string(b), &c)
	if c.Object != "chat.completion" || !strings.HasPrefix(c.ID, "chatcmpl-") || len(c.Choices) != 1 || c.Choices[0].Message.Role != "assistant" {
		t.Fatalf("response %s", b)
	}
	whole := c.Choices[0].Message.Content
	if whole == "" || c.Choices[0].FinishReason == nil || *c.Choices[0].FinishReason != "length" {
		t.Errorf("response %s", b)
	}
	if u := c.Usage; u == nil || u.PromptTokens != len(tok.Tokens) || u.CompletionTokens != 12 || u.TotalTokens != u.PromptTokens+12 {
		t.Errorf("usage %+v; want %d ChatML prompt tokens", u, len(tok.Tokens))
	}

	req["stream"] = true
	req["stream_options"] = map[string]bool{"include_usage": true}
	events := readEvents(t, ts.openStream(t, context.Background(), "/v1/chat/completions", req))
	if n := len(events); n < 4 || events[n-1] != "[DONE]" {
		t.Fatalf("events %q", events)
	}
	var streamed strings.Builder
	for i, data := range events[:len(events)-1] {
		var c chatCompletion
		unmarshal(t, data, &c)
		if c.Object != "chat.completion.chunk" {
			t.Fatalf("event %d: %s", i, data)
		}
		switch i {
		case 0:
			if len(c.Choices) != 1 || c.Choices[0].Delta.Role != "assistant" || c.Choices[0].Delta.Content == nil || *c.Choices[0].Delta.Content != "" {
				t.Errorf("first event %s", data)
			}
		case len(events) - 3:
			if len(c.Choices) != 1 || c.Choices[0].FinishReason == nil || *c.Choices[0].FinishReason != "length" {
				t.Errorf("finish event %s", data)
			}
		case len(events) - 2:
			if len(c.Choices) != 0 || c.Usage == nil || c.Usage.CompletionTokens != 12 || c.Usage.PromptTokens != len(tok.Tokens) {
				t.Errorf("usage event %s", data)
			}
		default:
			if len(c.Choices) != 1 || c.Choices[0].FinishReason != nil || c.Choices[0].Delta.Content == nil {
				t.Errorf("content event %d: %s", i, data)
			} else {
				streamed.WriteString(*c.Choices[0].Delta.Content)
			}
		}
	}
	if streamed.String() != whole {
		t.Errorf("streamed %q, not streamed %q", streamed.String(), whole)
	}
}

func TestResponseFormat(t *testing.T) {
	// TinyStories656K has no tokens for '{' and no byte fallback; this
	// model has both.
	ts := startModel(t, testmodel.Stories260K, engine.Config{Parallel: 2})
	formats := map[string]any{
		"json_object": map[string]any{"type": "json_object"},
		"json_schema": map[string]any{"type": "json_schema", "json_schema": map[string]any{
			"name": "pet", "strict": true,
			"schema": map[string]any{
				"type":                 "object",
				"properties":           map[string]any{"name": map[string]any{"type": "string", "maxLength": 20}, "age": map[string]any{"type": "integer"}},
				"required":             []string{"name", "age"},
				"additionalProperties": false,
			},
		}},
	}
	for name, format := range formats {
		t.Run(name, func(t *testing.T) {
			resp, b := ts.post(t, "/v1/chat/completions", map[string]any{
				"messages":        []map[string]string{{"role": "user", "content": "Describe a pet as JSON."}},
				"response_format": format, "temperature": 0, "max_tokens": 400,
			})
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			var c chatCompletion
			unmarshal(t, string(b), &c)
			content := c.Choices[0].Message.Content
			var v map[string]any
			if err := json.Unmarshal([]byte(content), &v); err != nil {
				t.Fatalf("content %q is not a JSON object: %v (response %s)", content, err, b)
			}
			if name == "json_schema" {
				if _, ok := v["name"].(string); !ok || len(v) != 2 {
					t.Errorf("content %q does not follow the schema", content)
				}
			}
		})
	}
}

func TestEndpoints(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 2})

	var health struct{ Status string }
	ts.get(t, "/health", &health)
	if health.Status != "ok" {
		t.Errorf("/health %+v", health)
	}

	var tok struct{ Tokens []int32 }
	_, b := ts.post(t, "/tokenize", map[string]any{"content": "Once upon a time"})
	unmarshal(t, string(b), &tok)
	if len(tok.Tokens) == 0 {
		t.Fatalf("/tokenize: %s", b)
	}
	var withBOS struct{ Tokens []int32 }
	_, b = ts.post(t, "/tokenize", map[string]any{"content": "Once upon a time", "add_special": true})
	unmarshal(t, string(b), &withBOS)
	if len(withBOS.Tokens) != len(tok.Tokens)+1 || withBOS.Tokens[0] != ts.info.BOS {
		t.Errorf("add_special: %v, without %v", withBOS.Tokens, tok.Tokens)
	}
	var detok struct{ Content string }
	_, b = ts.post(t, "/detokenize", map[string]any{"tokens": tok.Tokens})
	unmarshal(t, string(b), &detok)
	if strings.TrimSpace(detok.Content) != "Once upon a time" {
		t.Errorf("/detokenize: %s", b)
	}

	var slots []struct {
		ID           int  `json:"id"`
		IDTask       int  `json:"id_task"`
		NCtx         int  `json:"n_ctx"`
		IsProcessing bool `json:"is_processing"`
	}
	ts.get(t, "/slots", &slots)
	if len(slots) != 2 || slots[1].ID != 1 || slots[0].NCtx != ts.info.SlotCtx || slots[0].IsProcessing || slots[0].IDTask != -1 {
		t.Errorf("/slots %+v", slots)
	}

	var models struct {
		Object string
		Data   []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			OwnedBy string `json:"owned_by"`
		}
	}
	ts.get(t, "/v1/models", &models)
	if models.Object != "list" || len(models.Data) != 1 || models.Data[0].ID != "tiny" || models.Data[0].Object != "model" ||
		models.Data[0].OwnedBy != "corral" || models.Data[0].Created == 0 {
		t.Errorf("/v1/models %+v", models)
	}

	if m := metrics(t, ts); m["corral_slots"] != 2 {
		t.Errorf("/metrics %v", m)
	}

	// Errors that only the engine can detect.
	long := make([]int32, ts.info.SlotCtx+8)
	for i := range long {
		long[i] = tok.Tokens[i%len(tok.Tokens)]
	}
	errorCases := []struct {
		path        string
		body        any
		status      int
		param, code string
	}{
		{"/completion", map[string]any{"prompt": long, "n_predict": 1}, 400, "prompt", "context_length_exceeded"},
		{"/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": strings.Repeat("story ", ts.info.SlotCtx)}}}, 400, "messages", "context_length_exceeded"},
		{"/completion", map[string]any{"prompt": "a", "n_predict": 1, "id_slot": 7}, 400, "id_slot", ""},
		{"/completion", map[string]any{"prompt": "a", "n_predict": 1, "grammar": "root ::= ("}, 400, "grammar", ""},
		{"/v1/completions", map[string]any{"prompt": strings.Repeat("x", DefaultMaxBody)}, 413, "", "request_too_large"},
	}
	for _, tc := range errorCases {
		resp, b := ts.post(t, tc.path, tc.body)
		var env struct {
			Error struct {
				Type  string  `json:"type"`
				Param *string `json:"param"`
				Code  *string `json:"code"`
			} `json:"error"`
		}
		unmarshal(t, string(b), &env)
		param, code := "", ""
		if env.Error.Param != nil {
			param = *env.Error.Param
		}
		if env.Error.Code != nil {
			code = *env.Error.Code
		}
		if resp.StatusCode != tc.status || param != tc.param || code != tc.code || env.Error.Type != "invalid_request_error" {
			t.Errorf("%s: %d %.300s; want %d param %q code %q", tc.path, resp.StatusCode, b, tc.status, tc.param, tc.code)
		}
	}
}

// metrics reads /metrics as name → value.
func metrics(t *testing.T, ts *testServer) map[string]float64 {
	t.Helper()
	resp, b := ts.do(t, context.Background(), http.MethodGet, "/metrics", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	m := make(map[string]float64)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		f, err := strconv.ParseFloat(val, 64)
		if !ok || err != nil {
			t.Fatalf("/metrics line %q", line)
		}
		m[name] = f
	}
	return m
}

// waitFor polls cond until it holds, failing t after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

func busySlots(t *testing.T, ts *testServer) int {
	t.Helper()
	var slots []struct {
		IsProcessing bool `json:"is_processing"`
	}
	ts.get(t, "/slots", &slots)
	n := 0
	for _, s := range slots {
		if s.IsProcessing {
			n++
		}
	}
	return n
}

// TestQueueFull fills one slot and a queue of one: the requests beyond get
// 503 with Retry-After, and the server serves again once they drain.
func TestQueueFull(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1, MaxQueue: 1})
	body := map[string]any{"prompt": "Once upon a time", "n_predict": 200, "temperature": 0, "ignore_eos": true}
	type reply struct {
		status     int
		retryAfter string
		body       []byte
		err        error
	}
	// Send bursts until one overflows: a burst arrives far faster than a
	// 200-token generation ends, so the first burst normally does.
	rejected := false
	for round := 0; !rejected; round++ {
		if round == 20 {
			t.Fatal("20 bursts of 6 requests never filled a queue of 1")
		}
		replies := make(chan reply, 6)
		for range 6 {
			go func() {
				b, _ := json.Marshal(body)
				resp, err := ts.client.Post(ts.url+"/completion", "application/json", bytes.NewReader(b))
				if err != nil {
					replies <- reply{err: err}
					return
				}
				defer resp.Body.Close()
				rb, err := io.ReadAll(resp.Body)
				replies <- reply{resp.StatusCode, resp.Header.Get("Retry-After"), rb, err}
			}()
		}
		for range 6 {
			r := <-replies
			switch {
			case r.err != nil:
				t.Errorf("request: %v", r.err)
			case r.status == 503:
				rejected = true
				_, code := errorOf(t, "application/json", r.body)
				if code != "queue_full" || r.retryAfter != "1" {
					t.Errorf("503 with code %q, Retry-After %q", code, r.retryAfter)
				}
			case r.status == 200:
				var c llamaCompletion
				unmarshal(t, string(r.body), &c)
				if c.TokensPredicted != 200 {
					t.Errorf("accepted request: %s", r.body)
				}
			default:
				t.Errorf("status %d: %s", r.status, r.body)
			}
		}
	}
	resp, b := ts.post(t, "/completion", map[string]any{"prompt": "Hello", "n_predict": 16, "temperature": 0, "ignore_eos": true})
	if resp.StatusCode != 200 || !strings.Contains(string(b), golden[1].want) {
		t.Errorf("after the burst: %d %s", resp.StatusCode, b)
	}
}

// TestDisconnect checks that a client going away frees the engine,
// whether its request is streaming, waiting for a whole response, or still
// queued. The slot context is far larger than what a cancelled request
// generates, so a request that was not cancelled would keep its slot busy
// for a long time and push tokens_generated_total far up.
func TestDisconnect(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1, CtxSize: 16384})
	unlimited := map[string]any{"prompt": "Once upon a time", "n_predict": -1, "temperature": 0, "ignore_eos": true}
	generated := func() float64 { return metrics(t, ts)["corral_tokens_generated_total"] }

	t.Run("streaming", func(t *testing.T) {
		before := generated()
		ctx, cancel := context.WithCancel(context.Background())
		body := map[string]any{"stream": true}
		for k, v := range unlimited {
			body[k] = v
		}
		resp := ts.openStream(t, ctx, "/completion", body)
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "data: ") {
			t.Fatalf("first event %q, %v", line, err)
		}
		cancel()
		resp.Body.Close()
		waitFor(t, "the slot to be released", func() bool { return busySlots(t, ts) == 0 })
		if n := generated() - before; n >= float64(ts.info.SlotCtx)/2 {
			t.Errorf("%v tokens generated: the request was not cancelled", n)
		}
	})

	t.Run("whole response", func(t *testing.T) {
		before := generated()
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			b, _ := json.Marshal(unlimited)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.url+"/v1/completions", bytes.NewReader(b))
			resp, err := ts.client.Do(req)
			if err == nil {
				resp.Body.Close()
				err = fmt.Errorf("request completed with status %d", resp.StatusCode)
			}
			errc <- err
		}()
		waitFor(t, "the request to run", func() bool { return busySlots(t, ts) == 1 })
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("client: %v", err)
		}
		waitFor(t, "the slot to be released", func() bool { return busySlots(t, ts) == 0 })
		if n := generated() - before; n >= float64(ts.info.SlotCtx)/2 {
			t.Errorf("%v tokens generated: the request was not cancelled", n)
		}
	})

	t.Run("queued", func(t *testing.T) {
		runCtx, stopRunning := context.WithCancel(context.Background())
		defer stopRunning()
		body := map[string]any{"stream": true}
		for k, v := range unlimited {
			body[k] = v
		}
		running := ts.openStream(t, runCtx, "/completion", body)
		defer running.Body.Close()

		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			b, _ := json.Marshal(unlimited)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.url+"/completion", bytes.NewReader(b))
			resp, err := ts.client.Do(req)
			if err == nil {
				resp.Body.Close()
				err = fmt.Errorf("request completed with status %d", resp.StatusCode)
			}
			errc <- err
		}()
		waitFor(t, "a queued request", func() bool { return metrics(t, ts)["corral_queue_depth"] == 1 })
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("client: %v", err)
		}
		waitFor(t, "the queue to empty", func() bool { return metrics(t, ts)["corral_queue_depth"] == 0 })
		if busySlots(t, ts) != 1 {
			t.Error("the running request stopped with the queued one")
		}
		stopRunning()
		waitFor(t, "the slot to be released", func() bool { return busySlots(t, ts) == 0 })
	})
}

// TestGracefulShutdown stops the server while a stream is in flight: the
// stream completes, then Serve returns.
func TestGracefulShutdown(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1})
	g := golden[2]
	resp := ts.openStream(t, context.Background(), "/completion",
		map[string]any{"prompt": g.prompt, "n_predict": g.n, "temperature": 0, "ignore_eos": true, "stream": true})
	stopped := make(chan error, 1)
	go func() { stopped <- ts.stop() }()
	text, final := llamaStream(t, resp)
	if text != g.want || final.TokensPredicted != g.n {
		t.Errorf("stream cut by shutdown: %q, %+v", text, final)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := ts.client.Get(ts.url + "/health"); err == nil {
		t.Error("server still answers after shutdown")
	}
}
