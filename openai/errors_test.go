package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/wire"
)

// chatClient serves POST /v1/chat/completions of a Core over fake on
// loopback, to openai-go's client (no retries).
func chatClient(t *testing.T, fake *servetest.Engine) sdk.Client {
	t.Helper()
	ts := httptest.NewServer(servetest.Bind(servetest.Strict(t, fake), ChatCompletions))
	t.Cleanup(ts.Close)
	return sdk.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
}

func chatParams(tools ...string) sdk.ChatCompletionNewParams {
	p := sdk.ChatCompletionNewParams{Model: "tiny", Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage("hi")}}
	for _, name := range tools {
		p.Tools = append(p.Tools, sdk.ChatCompletionFunctionTool(sdk.FunctionDefinitionParam{Name: name}))
	}
	return p
}

// TestPromptTooLongSDK: a prompt over the context is OpenAI's 400
// context_length_exceeded about messages, its message giving the
// engine's counts, as openai-go reads it.
func TestPromptTooLongSDK(t *testing.T) {
	fake := servetest.NewEngine()
	fake.SubmitErr = &engine.PromptTooLongError{Tokens: 900, Max: 511}
	client := chatClient(t, fake)
	_, err := client.Chat.Completions.New(context.Background(), chatParams())
	var e *sdk.Error
	if !errors.As(err, &e) || e.StatusCode != http.StatusBadRequest || e.Code != "context_length_exceeded" || e.Type != "invalid_request_error" ||
		e.Param != "messages" || !strings.Contains(e.Message, "the prompt has 900 tokens") || !strings.Contains(e.Message, "a prompt may have 511 tokens (512 per request") {
		t.Errorf("%v, want a 400 context_length_exceeded naming 900 and 511 tokens", err)
	}
}

// TestToolNameLength: Chat Completions keeps OpenAI's rule for function
// names, 1 to 64 letters, digits, '_' or '-' (the core no longer applies
// it), about the name's field.
func TestToolNameLength(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{strings.Repeat("f", 64), true},
		{strings.Repeat("f", 65), false},
		{"a.b", false},
	} {
		fake := servetest.NewEngine()
		client := chatClient(t, fake)
		_, err := client.Chat.Completions.New(context.Background(), chatParams("g", tc.name))
		var e *sdk.Error
		switch {
		case !errors.As(err, &e):
			t.Fatalf("%s: %v", tc.name, err)
		case tc.ok && (e.StatusCode != http.StatusServiceUnavailable || len(fake.Submitted) != 1): // the fake's queue is full
			t.Errorf("%s: %d %s, want it submitted", tc.name, e.StatusCode, e.Message)
		case !tc.ok && (e.StatusCode != http.StatusBadRequest || e.Param != "tools[1].function.name" || len(fake.Submitted) != 0):
			t.Errorf("%s: %d %q %s, want a 400 about tools[1].function.name", tc.name, e.StatusCode, e.Param, e.Message)
		}
	}
}

// TestReasoningTokensSDK: completion_tokens_details.reasoning_tokens are
// the engine's count of the reasoning's tokens, whole and in a stream's
// usage chunk, as openai-go reads them.
func TestReasoningTokensSDK(t *testing.T) {
	m, err := model.New(servetest.NewEngine(), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res := engine.Result{FinishReason: engine.FinishStop, Usage: engine.Usage{PromptTokens: 10, CompletionTokens: 8, ReasoningTokens: 5}}
	f := &chatEncoder{h: header(m, "chatcmpl-"), includeUsage: true}
	serve := func(write func(w http.ResponseWriter)) sdk.Client {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { write(w) }))
		t.Cleanup(ts.Close)
		return sdk.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	}
	whole := f.Whole(servetest.Whole("ok", "stop"), res)
	client := serve(func(w http.ResponseWriter) { wire.WriteJSON(w, 200, whole) })
	c, err := client.Chat.Completions.New(context.Background(), chatParams())
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Usage.CompletionTokensDetails; c.Usage.CompletionTokens != 8 || d.ReasoningTokens != 5 || !d.JSON.ReasoningTokens.Valid() {
		t.Errorf("whole usage %s", c.Usage.RawJSON())
	}
	var chunks []byte
	for _, ev := range f.End(res, "stop") {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(append(append(chunks, "data: "...), b...), "\n\n"...)
	}
	chunks = append(chunks, "data: [DONE]\n\n"...)
	client = serve(func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(chunks)
	})
	s := client.Chat.Completions.NewStreaming(context.Background(), chatParams())
	var acc sdk.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if d := acc.Usage.CompletionTokensDetails; d.ReasoningTokens != 5 {
		t.Errorf("streamed usage %s", acc.Usage.RawJSON())
	}
}
