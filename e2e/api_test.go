package e2e

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/server"
)

// TestChat runs a chat completion whole and streamed: the model has no
// template, so the prompt is ChatML, and both must say the same.
func TestChat(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 2})
	// The model has no chat template: ChatML is the fallback.
	var tok struct{ Tokens []int }
	_, b := ts.Post(t, "/tokenize", map[string]any{"content": "<|im_start|>user\nTell me a story.<|im_end|>\n<|im_start|>assistant\n", "add_special": true})
	unmarshal(t, string(b), &tok)

	req := map[string]any{
		"model":      "tiny",
		"messages":   []map[string]string{{"role": "user", "content": "Tell me a story."}},
		"max_tokens": 12, "temperature": 0, "ignore_eos": true,
	}
	resp, b := ts.Post(t, "/v1/chat/completions", req)
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
	events := e2etest.ReadEvents(t, ts.OpenStream(t, context.Background(), "/v1/chat/completions", req))
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

// TestResponseFormat checks that response_format constrains the output.
// A story model fills a free-form object's first key forever, so plain
// json_object is checked to be a valid JSON prefix within max_tokens; the
// schemas end the object and must parse whole.
func TestResponseFormat(t *testing.T) {
	// TinyStories656K has no token for '{' and no byte fallback; this
	// model has both.
	ts := startModel(t, testmodel.Stories260K, engine.Config{Parallel: 2})
	pet := map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"name": map[string]any{"type": "string", "maxLength": 20}, "age": map[string]any{"type": "integer"}},
		"required":             []string{"name", "age"},
		"additionalProperties": false,
	}
	tests := []struct {
		name     string
		format   any
		complete bool // the output must be a whole object
	}{
		{"json_object", map[string]any{"type": "json_object"}, false},
		{"json_schema", map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "pet", "strict": true, "schema": pet}}, true},
		{"json_object with schema", map[string]any{"type": "json_object", "schema": pet}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, b := ts.Post(t, "/v1/chat/completions", map[string]any{
				"messages":        []map[string]string{{"role": "user", "content": "Describe a pet as JSON."}},
				"response_format": tt.format, "temperature": 0, "max_tokens": 150,
			})
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			var c chatCompletion
			unmarshal(t, string(b), &c)
			content, finish := c.Choices[0].Message.Content, *c.Choices[0].FinishReason
			if !strings.HasPrefix(content, "{") {
				t.Fatalf("content %q does not start an object", content)
			}
			if finish == "length" && !tt.complete {
				dec := json.NewDecoder(strings.NewReader(content))
				for {
					if _, err := dec.Token(); err != nil {
						// The prefix may end between tokens (EOF) or in one.
						if err != io.EOF && err != io.ErrUnexpectedEOF {
							t.Errorf("content %q is not a JSON prefix: %v", content, err)
						}
						return
					}
				}
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(content), &v); err != nil || finish != "stop" {
				t.Fatalf("content %q (finish %s) is not a JSON object: %v", content, finish, err)
			}
			if _, ok := v["name"].(string); tt.complete && (!ok || len(v) != 2) {
				t.Errorf("content %q does not follow the schema", content)
			}
		})
	}
}

// TestEndpoints covers the small endpoints and the errors only the engine
// can detect.
func TestEndpoints(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 2})

	var health struct{ Status string }
	ts.Get(t, "/health", &health)
	if health.Status != "ok" {
		t.Errorf("/health %+v", health)
	}

	var tok struct{ Tokens []int32 }
	_, b := ts.Post(t, "/tokenize", map[string]any{"content": "Once upon a time"})
	unmarshal(t, string(b), &tok)
	if len(tok.Tokens) == 0 {
		t.Fatalf("/tokenize: %s", b)
	}
	var withBOS struct{ Tokens []int32 }
	_, b = ts.Post(t, "/tokenize", map[string]any{"content": "Once upon a time", "add_special": true})
	unmarshal(t, string(b), &withBOS)
	if len(withBOS.Tokens) != len(tok.Tokens)+1 || withBOS.Tokens[0] != ts.Info.BOS {
		t.Errorf("add_special: %v, without %v", withBOS.Tokens, tok.Tokens)
	}
	var detok struct{ Content string }
	_, b = ts.Post(t, "/detokenize", map[string]any{"tokens": tok.Tokens})
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
	ts.Get(t, "/slots", &slots)
	if len(slots) != 2 || slots[1].ID != 1 || slots[0].NCtx != ts.Info.CtxPerRequest || slots[0].IsProcessing || slots[0].IDTask != -1 {
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
	ts.Get(t, "/v1/models", &models)
	if models.Object != "list" || len(models.Data) != 1 || models.Data[0].ID != "tiny" || models.Data[0].Object != "model" ||
		models.Data[0].OwnedBy != "corral" || models.Data[0].Created == 0 {
		t.Errorf("/v1/models %+v", models)
	}

	var props struct {
		Settings struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
		TotalSlots int               `json:"total_slots"`
		Devices    []json.RawMessage `json:"devices"`
		Offload    struct {
			GPULayers int      `json:"n_gpu_layers"`
			Layers    int      `json:"n_layers"`
			Devices   []string `json:"devices"`
		} `json:"offload"`
	}
	ts.Get(t, "/props", &props)
	if props.TotalSlots != 2 || props.Settings.NCtx != ts.Info.CtxPerRequest {
		t.Errorf("/props %+v", props)
	}
	// On the CPU (make test loads no GPU backend): no device, no layer
	// offloaded, the layers counted.
	if props.Devices == nil || len(props.Devices) != 0 || props.Offload.GPULayers != 0 || props.Offload.Layers < 2 ||
		props.Offload.Devices == nil || len(props.Offload.Devices) != 0 {
		t.Errorf("/props devices %s, offload %+v: want [] and no layer offloaded", props.Devices, props.Offload)
	}

	if m := ts.Metrics(t); m["corral_slots"] != 2 {
		t.Errorf("/metrics %v", m)
	}

	// Errors that only the engine can detect.
	long := make([]int32, ts.Info.CtxPerRequest+8)
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
		{"/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": strings.Repeat("story ", ts.Info.CtxPerRequest)}}}, 400, "messages", "context_length_exceeded"},
		{"/completion", map[string]any{"prompt": "a", "n_predict": 1, "id_slot": 7}, 400, "id_slot", ""},
		// TinyStories656K cannot encode '{' (no such token, no byte
		// fallback): in a prompt it is the unknown token, but no token can
		// start a grammar that begins with it.
		{"/completion", map[string]any{"prompt": "a", "n_predict": 1, "grammar": `root ::= "{}"`}, 400, "grammar", "grammar_unsatisfiable"},
		{"/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "{}"}},
			"response_format": map[string]string{"type": "json_object"}}, 400, "response_format", "grammar_unsatisfiable"},
		{"/completion", map[string]any{"prompt": "a", "n_predict": 1, "grammar": "root ::= ("}, 400, "grammar", ""},
		{"/v1/completions", map[string]any{"prompt": strings.Repeat("x", server.DefaultMaxBody)}, 413, "", "request_too_large"},
	}
	for _, tc := range errorCases {
		resp, b := ts.Post(t, tc.path, tc.body)
		e, param, code := openAIError(t, b)
		if resp.StatusCode != tc.status || param != tc.param || code != tc.code || e.Type != "invalid_request_error" {
			t.Errorf("%s: %d %.300s; want %d param %q code %q", tc.path, resp.StatusCode, b, tc.status, tc.param, tc.code)
		}
	}
}

// TestApplyTemplate: POST /apply-template answers the prompt a chat
// completion gives the model (the test model has no template: ChatML),
// which tokenizes to the completion's prompt tokens, and refuses what a
// completion refuses.
func TestApplyTemplate(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1})
	msgs := []map[string]string{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story."}}
	resp, b := ts.Post(t, "/apply-template", map[string]any{"messages": msgs})
	var got struct{ Prompt string }
	unmarshal(t, string(b), &got)
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nTell me a story.<|im_end|>\n<|im_start|>assistant\n"
	if resp.StatusCode != 200 || got.Prompt != want {
		t.Fatalf("/apply-template: %d %s, want prompt %q", resp.StatusCode, b, want)
	}
	var tok struct{ Tokens []int }
	_, b = ts.Post(t, "/tokenize", map[string]any{"content": got.Prompt, "add_special": true})
	unmarshal(t, string(b), &tok)
	resp, b = ts.Post(t, "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 1})
	var c chatCompletion
	unmarshal(t, string(b), &c)
	if resp.StatusCode != 200 || c.Usage == nil || c.Usage.PromptTokens != len(tok.Tokens) {
		t.Errorf("chat completion: %d %s; want %d prompt tokens", resp.StatusCode, b, len(tok.Tokens))
	}
	resp, b = ts.Post(t, "/apply-template", map[string]any{"messages": msgs, "add_generation_prompt": false})
	unmarshal(t, string(b), &got)
	if resp.StatusCode != 200 || got.Prompt != strings.TrimSuffix(want, "<|im_start|>assistant\n") {
		t.Errorf("add_generation_prompt false: %d %s", resp.StatusCode, b)
	}
	for _, bad := range []map[string]any{
		{"messages": []any{}},
		{"messages": msgs, "chat_template_kwargs": []int{1}},
		{"messages": []map[string]string{{"role": "robot", "content": "x"}}},
	} {
		if resp, b := ts.Post(t, "/apply-template", bad); resp.StatusCode != 400 {
			t.Errorf("%v: %d %s, want 400", bad, resp.StatusCode, b)
		}
	}
}

// TestPropsChatTemplates: /props tells the chat template in use and,
// for a GGUF that has one, its tool_use template, as llama-server does;
// a model without one has no chat_template_tool_use.
func TestPropsChatTemplates(t *testing.T) {
	vocab, err := gguf.ReadMetadata(testmodel.Path(t, testmodel.Stories260K))
	if err != nil {
		t.Fatal(err)
	}
	chat, tools := testmodel.Template(t, "Qwen-Qwen2.5-7B-Instruct"), testmodel.Template(t, "NousResearch-Hermes-3-Llama-3.1-8B-tool_use")
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := gguf.WriteSyntheticOptions(p, gguf.Shapes["tiny"], 1, gguf.SynthOptions{Tokenizer: vocab, ChatTemplate: chat, ChatTemplateToolUse: tools}); err != nil {
		t.Fatal(err)
	}
	var props map[string]any
	e2etest.Start(t, p, e2etest.Options{}).Get(t, "/props", &props)
	if props["chat_template"] != chat || props["chat_template_tool_use"] != tools {
		t.Errorf("/props chat_template %.40q…, chat_template_tool_use %.40q…: want the model's two", props["chat_template"], props["chat_template_tool_use"])
	}
	props = nil
	e2etest.Start(t, testmodel.Stories260K, e2etest.Options{}).Get(t, "/props", &props)
	if _, ok := props["chat_template_tool_use"]; ok || props["chat_template"] == "" {
		t.Errorf("/props of a model with one template: %v", props)
	}
}
