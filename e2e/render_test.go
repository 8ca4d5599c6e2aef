package e2e

import (
	"slices"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/server"
)

// renderAnswer is one prompt of a render endpoint's answer.
type renderAnswer struct {
	RequestID string  `json:"request_id"`
	Model     string  `json:"model"`
	TokenIDs  []int32 `json:"token_ids"`
}

// TestRender: vLLM's render endpoints answer the token ids a request's
// prompt is evaluated as: the chat template's prompt tokenized with BOS
// (the ids /tokenize gives for /apply-template's prompt, as many as the
// completion's usage counts), a text prompt tokenized with BOS, token ids
// as given; /v1/completions/render as a list of one, the chat one as an
// object. Nothing is generated.
func TestRender(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1})
	tokenize := func(text string) []int32 {
		t.Helper()
		var tok struct{ Tokens []int32 }
		_, b := ts.Post(t, "/tokenize", map[string]any{"content": text, "add_special": true})
		unmarshal(t, string(b), &tok)
		if len(tok.Tokens) == 0 {
			t.Fatalf("/tokenize %q: %s", text, b)
		}
		return tok.Tokens
	}

	msgs := []map[string]string{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story."}}
	var tmpl struct{ Prompt string }
	_, b := ts.Post(t, "/apply-template", map[string]any{"messages": msgs})
	unmarshal(t, string(b), &tmpl)
	want := tokenize(tmpl.Prompt)
	resp, b := ts.Post(t, "/v1/chat/completions/render", map[string]any{"messages": msgs, "max_tokens": 8})
	var chat renderAnswer
	unmarshal(t, string(b), &chat)
	if resp.StatusCode != 200 || !slices.Equal(chat.TokenIDs, want) || !strings.HasPrefix(chat.RequestID, "chatcmpl-") || chat.Model == "" {
		t.Fatalf("/v1/chat/completions/render: %d %s; want token_ids %v", resp.StatusCode, b, want)
	}
	resp, b = ts.Post(t, "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 1})
	var c chatCompletion
	unmarshal(t, string(b), &c)
	if resp.StatusCode != 200 || c.Usage == nil || c.Usage.PromptTokens != len(chat.TokenIDs) {
		t.Errorf("chat completion: %d %s; want %d prompt tokens", resp.StatusCode, b, len(chat.TokenIDs))
	}

	for _, tc := range []struct {
		prompt any
		want   []int32
	}{
		{"Once upon a time", tokenize("Once upon a time")},
		{[]int{5, 6, 7}, []int32{5, 6, 7}},
	} {
		resp, b := ts.Post(t, "/v1/completions/render", map[string]any{"prompt": tc.prompt, "max_tokens": 4})
		var list []renderAnswer
		unmarshal(t, string(b), &list)
		if resp.StatusCode != 200 || len(list) != 1 || !slices.Equal(list[0].TokenIDs, tc.want) || !strings.HasPrefix(list[0].RequestID, "cmpl-") {
			t.Errorf("/v1/completions/render %v: %d %s; want one entry with token_ids %v", tc.prompt, resp.StatusCode, b, tc.want)
		}
	}
	// Rendering generates nothing: the engine counted the one completion.
	e2etest.WaitFor(t, "the engine to count the completion", func() bool { return ts.Metrics(t)["corral_requests_total"] == 1 })
	if n := ts.Metrics(t)["vllm:generation_tokens_total"]; n != 1 {
		t.Errorf("%v tokens generated, want the completion's 1", n)
	}
}

// TestRenderErrors: the render endpoints refuse what their completions
// refuse, in OpenAI's error envelope, naming the parameter.
func TestRenderErrors(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1})
	long := strings.Repeat("story ", ts.Info.CtxPerRequest)
	for _, tc := range []struct {
		path        string
		body        map[string]any
		status      int
		param, code string
	}{
		{"/v1/completions/render", map[string]any{"prompt": long}, 400, "prompt", "context_length_exceeded"},
		{"/v1/chat/completions/render", map[string]any{"messages": []map[string]string{{"role": "user", "content": long}}}, 400, "messages", "context_length_exceeded"},
		{"/v1/completions/render", map[string]any{"prompt": []int{1, 1 << 30}}, 400, "prompt", ""},
		{"/v1/completions/render", map[string]any{"prompt": "a", "max_tokens": -1}, 400, "max_tokens", ""},
		{"/v1/chat/completions/render", map[string]any{"messages": []any{}}, 400, "messages", ""},
		{"/v1/chat/completions/render", map[string]any{"messages": []map[string]string{{"role": "robot", "content": "x"}}}, 400, "messages", ""},
		{"/v1/completions/render", map[string]any{"prompt": strings.Repeat("x", server.DefaultMaxBody)}, 413, "", "request_too_large"},
	} {
		resp, b := ts.Post(t, tc.path, tc.body)
		e, param, code := openAIError(t, b)
		if resp.StatusCode != tc.status || param != tc.param || (tc.code != "" && code != tc.code) || e.Message == "" {
			t.Errorf("%s %.80v: %d %.300s; want %d param %q code %q", tc.path, tc.body, resp.StatusCode, b, tc.status, tc.param, tc.code)
		}
	}
}
