package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	ollama "github.com/ollama/ollama/api"

	corralollama "github.com/corral-llm/corral/ollama"
	"github.com/corral-llm/corral/server"

	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
)

// End-to-end tests of Ollama's API, spoken by Ollama's own Go client, on a
// registry that loads TinyStories656K on demand as the model "tiny".

// startRegistry serves TinyStories656K as the one model "tiny" of a
// registry (see e2etest.StartRegistry) with scfg, and returns Ollama's
// client for it too.
func startRegistry(t *testing.T, scfg server.Config) (*e2etest.Server, *ollama.Client) {
	t.Helper()
	ts := e2etest.StartRegistry(t, scfg)
	base, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	return ts, ollama.NewClient(base, ts.Client)
}

func ptr[T any](v T) *T { return &v }

// greedy are options for a reproducible answer of n tokens.
func greedy(n int) map[string]any {
	return map[string]any{"num_predict": n, "temperature": 0, "seed": 42, "ignore_eos": true}
}

// checkFinal checks the last object of an answer of n tokens.
func checkFinal(t *testing.T, what string, done bool, reason string, m ollama.Metrics, n int) {
	t.Helper()
	if !done || reason != "length" || m.EvalCount != n || m.PromptEvalCount <= 0 ||
		m.EvalDuration <= 0 || m.PromptEvalDuration <= 0 || m.TotalDuration < m.EvalDuration || m.LoadDuration <= 0 {
		t.Errorf("%s: final object done=%v done_reason=%q %+v; want done, length, eval_count %d and the timings", what, done, reason, m, n)
	}
}

// TestOllamaChat streams a chat answer and asks for it whole: both are
// the greedy answer of /v1/chat/completions to the same messages.
func TestOllamaChat(t *testing.T) {
	ts, c := startRegistry(t, server.Config{})
	ctx := context.Background()
	msgs := []ollama.Message{{Role: "user", Content: "Tell me a story."}}
	const n = 200

	var text strings.Builder
	lines, final := 0, ollama.ChatResponse{}
	err := c.Chat(ctx, &ollama.ChatRequest{Model: "tiny", Messages: msgs, Options: greedy(n)}, func(r ollama.ChatResponse) error {
		if final.Done {
			t.Errorf("object after the final one: %+v", r)
		}
		if r.Model != "tiny" || r.CreatedAt.IsZero() || r.Message.Role != "assistant" {
			t.Errorf("object %+v", r)
		}
		if !r.Done {
			lines++
			text.WriteString(r.Message.Content)
		}
		final = r
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if lines < 2 || final.Message.Content != "" {
		t.Errorf("%d text lines before a final message %q; want several, then an empty one", lines, final.Message.Content)
	}
	checkFinal(t, "stream", final.Done, final.DoneReason, final.Metrics, n)

	var whole []ollama.ChatResponse
	err = c.Chat(ctx, &ollama.ChatRequest{Model: "tiny:latest", Messages: msgs, Options: greedy(n), Stream: ptr(false)}, func(r ollama.ChatResponse) error {
		whole = append(whole, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(whole) != 1 || whole[0].Model != "tiny:latest" {
		t.Fatalf("not streamed: %+v; want one object naming the model as asked", whole)
	}
	checkFinal(t, "whole", whole[0].Done, whole[0].DoneReason, whole[0].Metrics, n)
	if whole[0].Message.Content != text.String() || text.Len() == 0 {
		t.Errorf("whole %q, streamed %q", whole[0].Message.Content, text.String())
	}

	resp, b := ts.Post(t, "/v1/chat/completions", map[string]any{
		"model": "tiny", "messages": msgs, "max_tokens": n, "temperature": 0, "ignore_eos": true,
	})
	var oc chatCompletion
	unmarshal(t, string(b), &oc)
	if resp.StatusCode != 200 || len(oc.Choices) != 1 || oc.Choices[0].Message.Content != text.String() {
		t.Errorf("/v1/chat/completions said %s; /api/chat %q", b, text.String())
	}
}

// TestOllamaGenerate generates from a raw prompt, streamed and whole, as
// /v1/completions does, and from a templated one, as a chat does.
func TestOllamaGenerate(t *testing.T) {
	ts, c := startRegistry(t, server.Config{})
	ctx := context.Background()
	const n = 200
	prompt := "Once upon a time"

	var text strings.Builder
	lines, final := 0, ollama.GenerateResponse{}
	err := c.Generate(ctx, &ollama.GenerateRequest{Model: "tiny", Prompt: prompt, Raw: true, Options: greedy(n)}, func(r ollama.GenerateResponse) error {
		if !r.Done {
			lines++
			text.WriteString(r.Response)
		}
		final = r
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if lines < 2 || final.Response != "" {
		t.Errorf("%d text lines before a final response %q; want several, then an empty one", lines, final.Response)
	}
	checkFinal(t, "stream", final.Done, final.DoneReason, final.Metrics, n)

	_, b := ts.Post(t, "/v1/completions", map[string]any{"model": "tiny", "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": true})
	var tc textCompletion
	unmarshal(t, string(b), &tc)
	if len(tc.Choices) != 1 || tc.Choices[0].Text != text.String() {
		t.Errorf("/v1/completions said %s; /api/generate %q", b, text.String())
	}

	// Not raw: the prompt is a user message in the chat template.
	var whole []ollama.GenerateResponse
	err = c.Generate(ctx, &ollama.GenerateRequest{Model: "tiny", Prompt: prompt, Stream: ptr(false), Options: greedy(n)}, func(r ollama.GenerateResponse) error {
		whole = append(whole, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(whole) != 1 {
		t.Fatalf("not streamed: %d objects", len(whole))
	}
	checkFinal(t, "whole", whole[0].Done, whole[0].DoneReason, whole[0].Metrics, n)
	_, b = ts.Post(t, "/v1/chat/completions", map[string]any{
		"model": "tiny", "messages": []map[string]string{{"role": "user", "content": prompt}}, "max_tokens": n, "temperature": 0, "ignore_eos": true,
	})
	var oc chatCompletion
	unmarshal(t, string(b), &oc)
	if len(oc.Choices) != 1 || oc.Choices[0].Message.Content != whole[0].Response {
		t.Errorf("/v1/chat/completions said %s; /api/generate %q", b, whole[0].Response)
	}
}

// TestOllamaNDJSON reads a stream as bytes: NDJSON lines, one object
// each, with a keep-alive so short that the stream is mostly pings:
// objects without text, which clients take as any other.
func TestOllamaNDJSON(t *testing.T) {
	ts, _ := startRegistry(t, server.Config{KeepAlive: time.Microsecond})
	body := `{"model":"tiny","prompt":"Once upon a time","raw":true,"options":{"num_predict":8,"temperature":0,"ignore_eos":true}}`
	resp, err := ts.Client.Post(ts.URL+"/api/generate", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	var (
		last map[string]any
		text strings.Builder
	)
	for sc.Scan() {
		if last["done"] == true {
			t.Fatalf("line after the final one: %s", sc.Text())
		}
		last = nil
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		r, ok := last["response"].(string)
		if last["model"] != "tiny" || last["created_at"] == nil || !ok {
			t.Fatalf("line %s", sc.Text())
		}
		text.WriteString(r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if last["done"] != true || last["done_reason"] != "length" || last["eval_count"] != float64(8) {
		t.Errorf("final line %v", last)
	}
	_, b := ts.Post(t, "/v1/completions", map[string]any{"model": "tiny", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "ignore_eos": true})
	var tc textCompletion
	unmarshal(t, string(b), &tc)
	if len(tc.Choices) != 1 || tc.Choices[0].Text != text.String() {
		t.Errorf("/v1/completions said %s; the stream %q", b, text.String())
	}
}

// TestOllamaUnknownModel gets Ollama's 404 from every endpoint naming a
// model, as an api.StatusError from the client.
func TestOllamaUnknownModel(t *testing.T) {
	ts, c := startRegistry(t, server.Config{})
	ctx := context.Background()
	const want = "model 'nope' not found"
	check := func(what string, err error) {
		t.Helper()
		var se ollama.StatusError
		if !errors.As(err, &se) || se.StatusCode != http.StatusNotFound || se.ErrorMessage != want {
			t.Errorf("%s: %#v; want a 404 StatusError %q", what, err, want)
		}
	}
	chatFn := func(ollama.ChatResponse) error { return nil }
	genFn := func(ollama.GenerateResponse) error { return nil }
	check("chat", c.Chat(ctx, &ollama.ChatRequest{Model: "nope", Messages: []ollama.Message{{Role: "user", Content: "Hi"}}}, chatFn))
	check("generate", c.Generate(ctx, &ollama.GenerateRequest{Model: "nope", Prompt: "Hi"}, genFn))
	check("load", c.Generate(ctx, &ollama.GenerateRequest{Model: "nope"}, genFn))
	check("unload", c.Generate(ctx, &ollama.GenerateRequest{Model: "nope", KeepAlive: &ollama.Duration{}}, genFn))
	_, err := c.Show(ctx, &ollama.ShowRequest{Model: "nope"})
	check("show", err)

	resp, b := ts.Post(t, "/api/chat", map[string]any{"model": "nope", "messages": []map[string]string{{"role": "user", "content": "Hi"}}})
	if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/json" || string(b) != `{"error":"model 'nope' not found"}`+"\n" {
		t.Errorf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	resp, b = ts.Post(t, "/api/generate", map[string]any{"model": "tiny", "prompt": "Hi", "options": map[string]any{"temperature": 9}})
	if resp.StatusCode != 400 || !strings.HasPrefix(string(b), `{"error":"'temperature' must be`) {
		t.Errorf("bad option: %d %s", resp.StatusCode, b)
	}
}

// modelState is the state /v1/models reports for "tiny".
func modelState(t *testing.T, ts *e2etest.Server) string {
	t.Helper()
	var list struct {
		Data []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"data"`
	}
	ts.Get(t, "/v1/models", &list)
	if len(list.Data) != 1 || list.Data[0].ID != "tiny" {
		t.Fatalf("/v1/models: %+v", list)
	}
	return list.Data[0].State
}

// TestOllamaLoadUnload loads the model with an empty prompt and unloads it
// with keep_alive 0, watching /api/ps and /v1/models.
func TestOllamaLoadUnload(t *testing.T) {
	ts, c := startRegistry(t, server.Config{})
	ctx := context.Background()
	running := func() []ollama.ProcessModelResponse {
		t.Helper()
		ps, err := c.ListRunning(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ps.Models
	}
	if ms := running(); len(ms) != 0 {
		t.Fatalf("running before any request: %+v", ms)
	}
	generate := func(req *ollama.GenerateRequest) ollama.GenerateResponse {
		t.Helper()
		var got []ollama.GenerateResponse
		if err := c.Generate(ctx, req, func(r ollama.GenerateResponse) error { got = append(got, r); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Fatalf("%d objects; want one", len(got))
		}
		return got[0]
	}

	r := generate(&ollama.GenerateRequest{Model: "tiny"})
	if !r.Done || r.DoneReason != "load" || r.Response != "" || r.Model != "tiny" {
		t.Errorf("load: %+v", r)
	}
	ms := running()
	if len(ms) != 1 || ms[0].Name != "tiny:latest" || ms[0].Model != "tiny:latest" || ms[0].Size <= 0 || ms[0].SizeVRAM != 0 ||
		ms[0].ContextLength <= 0 || !ms[0].ExpiresAt.After(time.Now()) || len(ms[0].Digest) != 64 || ms[0].Details.Family != "llama" {
		t.Errorf("running after load: %+v", ms)
	}
	if s := modelState(t, ts); s != "loaded" {
		t.Errorf("/v1/models says %q after the load", s)
	}

	r = generate(&ollama.GenerateRequest{Model: "tiny", KeepAlive: &ollama.Duration{}})
	if !r.Done || r.DoneReason != "unload" || r.Model != "tiny" {
		t.Errorf("unload: %+v", r)
	}
	if ms := running(); len(ms) != 0 {
		t.Errorf("running after the unload: %+v", ms)
	}
	e2etest.WaitFor(t, "the model to unload", func() bool { return modelState(t, ts) == "unloaded" })
	// Unloading a model that is not loaded leaves it so.
	r = generate(&ollama.GenerateRequest{Model: "tiny", KeepAlive: &ollama.Duration{}})
	if r.DoneReason != "unload" || modelState(t, ts) != "unloaded" {
		t.Errorf("unload again: %+v, state %s", r, modelState(t, ts))
	}

	// /api/chat does the same with no messages. (The keep-alive 0 of the
	// unload stays the model's until a request sets another.)
	var got []ollama.ChatResponse
	if err := c.Chat(ctx, &ollama.ChatRequest{Model: "tiny", KeepAlive: &ollama.Duration{Duration: time.Hour}}, func(r ollama.ChatResponse) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].DoneReason != "load" || got[0].Message.Role != "assistant" || got[0].Message.Content != "" {
		t.Errorf("chat load: %+v", got)
	}
	if s := modelState(t, ts); s != "loaded" {
		t.Errorf("/v1/models says %q after the chat load", s)
	}
	got = nil
	if err := c.Chat(ctx, &ollama.ChatRequest{Model: "tiny", KeepAlive: &ollama.Duration{}}, func(r ollama.ChatResponse) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].DoneReason != "unload" {
		t.Errorf("chat unload: %+v", got)
	}
	e2etest.WaitFor(t, "the model to unload", func() bool { return modelState(t, ts) == "unloaded" })
}

// TestOllamaCancel stops reading a stream after its first line and goes
// away: the request's slot comes free.
func TestOllamaCancel(t *testing.T) {
	ts, c := startRegistry(t, server.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errStop := errors.New("stop")
	req := &ollama.GenerateRequest{Model: "tiny", Prompt: "Once upon a time", Raw: true, Options: map[string]any{"num_predict": -1, "ignore_eos": true}}
	err := c.Generate(ctx, req, func(r ollama.GenerateResponse) error {
		if r.Done {
			t.Errorf("the answer ended before the cancel: %+v", r)
		}
		cancel()
		return errStop
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("Generate: %v; want the callback's error", err)
	}
	e2etest.WaitFor(t, "the slot to come free", func() bool { return busySlots(t, ts) == 0 })
	// Freed by the cancel, not by a full context.
	var slots []struct {
		NCtx int `json:"n_ctx"`
	}
	ts.Get(t, "/slots", &slots)
	if n := ts.Metrics(t)["corral_tokens_generated_total"]; len(slots) == 0 || n >= float64(slots[0].NCtx)/2 {
		t.Errorf("%v tokens generated of a %v-token slot: the cancel did not stop the answer", n, slots)
	}
}

// TestOllamaModels lists, describes and versions the models.
func TestOllamaModels(t *testing.T) {
	ts, c := startRegistry(t, server.Config{})
	ctx := context.Background()
	fi, err := os.Stat(testmodel.Path(t, testmodel.TinyStories656K))
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := ollama.ModelDetails{Format: "gguf", Family: "llama", Families: []string{"llama"}, QuantizationLevel: "Q8_0"}
	if len(list.Models) != 1 {
		t.Fatalf("/api/tags: %+v", list)
	}
	m := list.Models[0]
	d := m.Details
	if m.Name != "tiny:latest" || m.Model != "tiny:latest" || m.Size != fi.Size() || !m.ModifiedAt.Equal(fi.ModTime()) || len(m.Digest) != 64 ||
		d.Format != want.Format || d.Family != want.Family || strings.Join(d.Families, ",") != "llama" || d.QuantizationLevel != want.QuantizationLevel || d.ParameterSize == "" {
		t.Errorf("/api/tags: %+v; want details like %+v", m, want)
	}

	show, err := c.Show(ctx, &ollama.ShowRequest{Model: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	if show.Details.Family != "llama" || show.Details.ParameterSize != d.ParameterSize || show.ModelInfo["general.architecture"] != "llama" ||
		show.ModelInfo["llama.context_length"] == nil || len(show.Capabilities) == 0 || show.Capabilities[0] != "completion" {
		t.Errorf("/api/show: %+v", show)
	}
	if resp, b := ts.Post(t, "/api/show", map[string]string{"name": "tiny:latest"}); resp.StatusCode != 200 {
		t.Errorf("/api/show by the older field name: %d %s", resp.StatusCode, b)
	}

	v, err := c.Version(ctx)
	if err != nil || v != corralollama.APIVersion {
		t.Errorf("/api/version: %q, %v", v, err)
	}
}
