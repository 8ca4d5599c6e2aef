package anthropic

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// These tests serve /v1/messages over the fake engine (servetest) on
// loopback HTTP and read the answers with Anthropic's official SDK: the
// errors agents act on (a prompt over the context, an overloaded
// server), tool names of Anthropic's length, output_config.effort, and
// the thinking tokens of the usage.

// sdkClient serves the Messages endpoints of a Core over fake, and
// returns an SDK client of it that retries a request retries times.
func sdkClient(t *testing.T, fake *servetest.Engine, retries int) sdk.Client {
	t.Helper()
	c := servetest.Strict(t, fake)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/messages", servetest.Bind(c, Messages))
	mux.Handle("POST /v1/messages/count_tokens", servetest.Bind(c, CountTokens))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return sdk.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("key"), option.WithMaxRetries(retries))
}

// tinyParams is a request for the fake's model, "tiny".
func tinyParams() sdk.MessageNewParams {
	p := params()
	p.Model = "tiny"
	return p
}

// sdkError is err as the SDK's *Error.
func sdkError(t *testing.T, err error) *sdk.Error {
	t.Helper()
	var ae *sdk.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T), want *anthropic.Error", err, err)
	}
	return ae
}

// claudeCodePTL is the expression by which Claude Code reads a prompt
// too long's counts, to compact its conversation by their difference.
var claudeCodePTL = regexp.MustCompile(`(?i)prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)`)

// TestPromptTooLongSDK: a prompt over the context is Anthropic's 400
// invalid_request_error "prompt is too long: N tokens > M maximum", the
// engine's counts in it, whole and streamed (before any event), and the
// SDK does not retry it.
func TestPromptTooLongSDK(t *testing.T) {
	for _, stream := range []bool{false, true} {
		fake := servetest.NewEngine()
		fake.SubmitErr = &engine.PromptTooLongError{Tokens: 900, Max: 511}
		c := sdkClient(t, fake, 2)
		var err error
		if stream {
			s := c.Messages.NewStreaming(context.Background(), tinyParams())
			for s.Next() {
				t.Errorf("streamed: event %s", s.Current().Type)
			}
			err = s.Err()
			s.Close()
		} else {
			_, err = c.Messages.New(context.Background(), tinyParams())
		}
		ae := sdkError(t, err)
		const want = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 900 tokens \u003e 511 maximum"}}`
		if ae.StatusCode != http.StatusBadRequest || ae.Type() != "invalid_request_error" || ae.Message != "prompt is too long: 900 tokens > 511 maximum" ||
			strings.TrimSpace(ae.RawJSON()) != want {
			t.Errorf("stream %v: %d %s\nwant 400 %s", stream, ae.StatusCode, ae.RawJSON(), want)
		}
		m := claudeCodePTL.FindStringSubmatch(ae.Message)
		if m == nil || m[1] != "900" || m[2] != "511" {
			t.Errorf("stream %v: Claude Code reads %q as %v", stream, ae.Message, m)
		}
		if len(fake.Submitted) != 1 {
			t.Errorf("stream %v: submitted %d times: a 400 is not retried", stream, len(fake.Submitted))
		}
	}
}

// TestOverloadedSDK: a full queue and a request that waited its longest
// for a slot are Anthropic's 529 overloaded_error with Retry-After, which
// the SDK retries (after Retry-After's second); a server shutting down
// stays a 503 (overloaded_error as well). The other dialects answer 503
// (see serving's TestSubmitErrors).
func TestOverloadedSDK(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
	}{
		{engine.ErrQueueFull, StatusOverloaded},
		{engine.ErrQueueTimeout, StatusOverloaded},
		{engine.ErrClosed, http.StatusServiceUnavailable},
	} {
		fake := servetest.NewEngine()
		fake.SubmitErr = tc.err
		c := sdkClient(t, fake, 1)
		start := time.Now()
		_, err := c.Messages.New(context.Background(), tinyParams())
		ae := sdkError(t, err)
		if ae.StatusCode != tc.status || ae.Type() != "overloaded_error" || ae.Response.Header.Get("Retry-After") != "1" {
			t.Errorf("%v: %d %s (Retry-After %q), want %d overloaded_error", tc.err, ae.StatusCode, ae.RawJSON(), ae.Response.Header.Get("Retry-After"), tc.status)
		}
		if len(fake.Submitted) != 2 || time.Since(start) < time.Second {
			t.Errorf("%v: submitted %d times in %v, want the SDK's one retry after Retry-After", tc.err, len(fake.Submitted), time.Since(start))
		}
	}
	// A model that could not get memory while the models holding it were
	// in use, as the registry reports it (serving.ModelError).
	w := httptest.NewRecorder()
	busy := serving.ModelError(&registry.BusyError{ID: "m", Why: "every model holding memory was in use"})
	WriteError(w, busy)
	if w.Code != StatusOverloaded || w.Header().Get("Retry-After") != "1" ||
		strings.TrimSpace(w.Body.String()) != `{"type":"error","error":{"type":"overloaded_error","message":`+strconv.Quote(busy.Message)+`}}` {
		t.Errorf("model_busy: %d %q %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
}

// TestToolNameLength: /v1/messages takes tool names of Anthropic's 128
// characters (the core applies no dialect's rule), forced calls of them
// included; 129, or a name defined twice, is a 400 naming the tool in
// Anthropic's form.
func TestToolNameLength(t *testing.T) {
	long := strings.Repeat("a", 100) + strings.Repeat("Z_-9", 7)
	tool := func(name string) string {
		return `{"name": "` + name + `", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}`
	}
	body := func(tools, choice string) string {
		return `{"model": "tiny", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "tools": [` + tools + `]` + choice + `}`
	}
	for _, tc := range []struct {
		name, body, param string
	}{
		{"128, offered", body(tool(long), ""), ""},
		{"128, forced", body(tool(long), `, "tool_choice": {"type": "tool", "name": "`+long+`"}`), ""},
		{"129", body(tool(long+"x"), ""), "tools.0.name"},
		{"twice", body(tool(long)+", "+tool(long), ""), "tools.1.name"},
	} {
		fake := servetest.NewEngine()
		w := servetest.Serve(t, fake, Messages, tc.body)
		if tc.param != "" {
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"message":"`+tc.param+`: `) || len(fake.Submitted) != 0 {
				t.Errorf("%s: %d %s, want a 400 about %s", tc.name, w.Code, w.Body, tc.param)
			}
			continue
		}
		if w.Code != StatusOverloaded || len(fake.Submitted) != 1 { // the fake's queue is full
			t.Fatalf("%s: %d %s, want the request submitted", tc.name, w.Code, w.Body)
		}
		if g := fake.Submitted[0].Grammar; strings.Contains(tc.name, "forced") != strings.Contains(g, `"`+long) {
			t.Errorf("%s: grammar %q", tc.name, g)
		}
	}
}

// TestEffort: output_config.effort is the template's reasoning_effort,
// where the template reads it; a value Anthropic does not define is a 400.
func TestEffort(t *testing.T) {
	body := func(oc string) string {
		return `{"model": "tiny", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]` + oc + `}`
	}
	for _, tc := range []struct {
		oc, prompt string
	}{
		{"", "effort=|hi"},
		{`, "output_config": {"effort": "low"}`, "effort=low|hi"},
		{`, "output_config": {"effort": "max"}`, "effort=max|hi"},
		{`, "output_config": {"effort": "xhigh", "format": {"type": "json_schema", "schema": {"type": "object"}}}`, "effort=xhigh|hi"},
	} {
		fake := servetest.NewEngine()
		fake.Model.ChatTemplate = `effort={{ reasoning_effort }}|{% for m in messages %}{{ m.content }}{% endfor %}`
		servetest.Serve(t, fake, Messages, body(tc.oc))
		if len(fake.Submitted) != 1 || fake.Submitted[0].Prompt != tc.prompt {
			t.Errorf("%s: submitted %+v, want the prompt %q", tc.oc, fake.Submitted, tc.prompt)
		}
	}
	fake := servetest.NewEngine()
	w := servetest.Serve(t, fake, Messages, body(`, "output_config": {"effort": "extreme"}`))
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"message":"output_config.effort: must be one of low, medium, high, xhigh, max, got \"extreme\""`) {
		t.Errorf("effort extreme: %d %s", w.Code, w.Body)
	}
}

// TestThinkingTokensSDK: the usage's output_tokens_details.thinking_tokens
// are the engine's count of the reasoning's tokens, whole and streamed
// (message_delta), as the SDK reads them.
func TestThinkingTokensSDK(t *testing.T) {
	u := usageOf(engine.Usage{PromptTokens: 30, CachedTokens: 10, CompletionTokens: 20, ReasoningTokens: 12})
	msg, _, err := streamed(t, Meta{Model: "corral"}, func(s *Stream) {
		s.Delta(wire.Delta{ReasoningContent: str("hmm")})
		s.Delta(wire.Delta{Content: str("ok")})
		s.End(End{Finish: "stop", Usage: u})
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := msg.Usage.OutputTokensDetails; msg.Usage.OutputTokens != 20 || d.ThinkingTokens != 12 || !d.JSON.ThinkingTokens.Valid() {
		t.Errorf("streamed usage %s", msg.Usage.RawJSON())
	}
	whole := Whole(Meta{Model: "corral"}, wire.Message{ReasoningContent: "hmm", Content: "ok"}, End{Finish: "stop", Usage: u})
	c := answer(t, func(w http.ResponseWriter) { wire.WriteJSON(w, 200, whole) })
	m, err := c.Messages.New(context.Background(), params())
	if err != nil {
		t.Fatal(err)
	}
	if d := m.Usage.OutputTokensDetails; m.Usage.OutputTokens != 20 || d.ThinkingTokens != 12 || !d.JSON.ThinkingTokens.Valid() {
		t.Errorf("whole usage %s", m.Usage.RawJSON())
	}
	// An answer without reasoning says 0.
	if n := usageOf(engine.Usage{CompletionTokens: 3}).usage().OutputTokensDetails.ThinkingTokens; n != 0 {
		t.Errorf("no reasoning: %d thinking tokens", n)
	}
}
