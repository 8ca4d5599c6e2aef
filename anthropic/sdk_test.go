package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/wire"
)

// These tests put the encoders behind a loopback HTTP server and read
// their output with Anthropic's official Go SDK: its streaming decoder
// and Message.Accumulate, its whole-message decoding and its error type.
// Every decoded object is walked for fields the SDK does not know.

// answer serves every request with write. (SDK v2.15 sends its key as
// "Authorization: Bearer", anthropic-version 2026-10-21; Claude Code sends
// x-api-key, 2023-06-01.)
func answer(t *testing.T, write func(w http.ResponseWriter)) sdk.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/messages" || (r.Header.Get("X-Api-Key") != "key" && r.Header.Get("Authorization") != "Bearer key") || r.Header.Get("Anthropic-Version") == "" {
			http.Error(w, fmt.Sprintf("unexpected request %s %v", r.URL.Path, r.Header), http.StatusTeapot)
			return
		}
		io.Copy(io.Discard, r.Body)
		write(w)
	}))
	t.Cleanup(srv.Close)
	return sdk.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("key"), option.WithMaxRetries(0))
}

func params() sdk.MessageNewParams {
	return sdk.MessageNewParams{Model: "corral", MaxTokens: 100, Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("hi"))}}
}

// streamed serves the events that drive writes through a Stream, and
// returns the message the SDK accumulates from them, the events'
// types in order, and the stream's error.
func streamed(t *testing.T, m Meta, drive func(s *Stream)) (sdk.Message, []string, error) {
	t.Helper()
	c := answer(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		drive(NewStream(w, m))
	})
	st := c.Messages.NewStreaming(context.Background(), params())
	defer st.Close()
	var (
		msg   sdk.Message
		types []string
	)
	for st.Next() {
		ev := st.Current()
		types = append(types, ev.Type)
		servetest.UnknownFields(t, ev.Type, reflect.ValueOf(ev))
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("Accumulate(%s): %v", ev.RawJSON(), err)
		}
	}
	servetest.UnknownFields(t, "message", reflect.ValueOf(msg))
	return msg, types, st.Err()
}

func str(s string) *string { return &s }

// TestStreamSDK streams reasoning, text and two calls, their arguments in
// fragments, with pings before and among the events, and checks what the
// SDK accumulates: the blocks in order, the tool inputs as JSON objects,
// the stop reason and the exact usage.
func TestStreamSDK(t *testing.T) {
	msg, types, err := streamed(t, Meta{ID: "msg_1", Model: "corral"}, func(s *Stream) {
		s.Ping()
		s.Start(Usage{PromptTokens: 100, CachedTokens: 60})
		s.Delta(wire.Delta{ReasoningContent: str("Let me ")})
		s.Delta(wire.Delta{ReasoningContent: str("think.")})
		s.Ping()
		s.Delta(wire.Delta{Content: str("Hello <b>&")})
		s.Delta(wire.Delta{Content: str(" world"), ToolCalls: []wire.ToolCallDelta{{Index: 0, ID: "call_abc", Type: "function", Function: wire.FunctionCall{Name: "f"}}}})
		s.Delta(wire.Delta{ToolCalls: []wire.ToolCallDelta{{Index: 0, Function: wire.FunctionCall{Arguments: `{"a":`}}}})
		s.Delta(wire.Delta{ToolCalls: []wire.ToolCallDelta{{Index: 0, Function: wire.FunctionCall{Arguments: `1}`}}, {Index: 1, ID: "call_def", Function: wire.FunctionCall{Name: "g", Arguments: `{"b":[1,2]}`}}}})
		s.End(End{Finish: "tool_calls", Usage: Usage{PromptTokens: 100, CachedTokens: 60, CompletionTokens: 25}})
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if !reflect.DeepEqual(types, want) {
		t.Errorf("events %v\nwant   %v", types, want)
	}
	if msg.ID != "msg_1" || msg.Model != "corral" || msg.Role != "assistant" || msg.Type != "message" {
		t.Errorf("message %s", msg.RawJSON())
	}
	if len(msg.Content) != 4 {
		t.Fatalf("content %s", msg.RawJSON())
	}
	if b := msg.Content[0].AsThinking(); b.Type != "thinking" || b.Thinking != "Let me think." {
		t.Errorf("block 0: %s", msg.Content[0].RawJSON())
	}
	if b := msg.Content[1].AsText(); b.Type != "text" || b.Text != "Hello <b>& world" {
		t.Errorf("block 1: %s", msg.Content[1].RawJSON())
	}
	for i, want := range []struct{ id, name, input string }{{"toolu_abc", "f", `{"a":1}`}, {"toolu_def", "g", `{"b":[1,2]}`}} {
		b := msg.Content[2+i].AsToolUse()
		if b.Type != "tool_use" || b.ID != want.id || b.Name != want.name || string(b.Input) != want.input {
			t.Errorf("block %d: %s (input %s)", 2+i, msg.Content[2+i].RawJSON(), b.Input)
		}
		var in map[string]any
		if err := json.Unmarshal(b.Input, &in); err != nil {
			t.Errorf("block %d input is no object: %v", 2+i, err)
		}
	}
	if msg.StopReason != sdk.StopReasonToolUse || msg.JSON.StopSequence.Raw() != "null" {
		t.Errorf("stop_reason %q stop_sequence %s", msg.StopReason, msg.JSON.StopSequence.Raw())
	}
	if u := msg.Usage; u.InputTokens != 40 || u.CacheReadInputTokens != 60 || u.CacheCreationInputTokens != 0 || u.OutputTokens != 25 {
		t.Errorf("usage %s", u.RawJSON())
	}
}

// TestStreamStopReasons checks the stop reason and stop sequence of each
// ending, and that message_delta's usage is the final word even when
// message_start had none.
func TestStreamStopReasons(t *testing.T) {
	for _, tc := range []struct {
		end    End
		calls  bool
		reason sdk.StopReason
		seq    string
	}{
		{End{Finish: "stop"}, false, sdk.StopReasonEndTurn, ""},
		{End{Finish: "stop", StopWord: "<|im_end|>"}, false, sdk.StopReasonEndTurn, ""},
		{End{Finish: "stop", StopWord: "END"}, false, sdk.StopReasonStopSequence, "END"},
		{End{Finish: "length"}, false, sdk.StopReasonMaxTokens, ""},
		{End{Finish: "length"}, true, sdk.StopReasonMaxTokens, ""},
		{End{Finish: "stop"}, true, sdk.StopReasonToolUse, ""},
		{End{Finish: "tool_calls"}, true, sdk.StopReasonToolUse, ""},
	} {
		tc.end.Usage = Usage{PromptTokens: 7, CachedTokens: 2, CompletionTokens: 3}
		msg, _, err := streamed(t, Meta{Model: "corral", StopSequences: []string{"END", "STOP"}}, func(s *Stream) {
			s.Delta(wire.Delta{Content: str("x")})
			if tc.calls {
				s.Delta(wire.Delta{ToolCalls: []wire.ToolCallDelta{{Index: 0, ID: "call_1", Function: wire.FunctionCall{Name: "f", Arguments: `{}`}}}})
			}
			s.End(tc.end)
		})
		if err != nil {
			t.Fatal(err)
		}
		if msg.StopReason != tc.reason || msg.StopSequence != tc.seq || (tc.seq == "" && msg.JSON.StopSequence.Raw() != "null") {
			t.Errorf("%+v: stop_reason %q stop_sequence %s, want %q %q", tc.end, msg.StopReason, msg.JSON.StopSequence.Raw(), tc.reason, tc.seq)
		}
		if u := msg.Usage; u.InputTokens != 5 || u.CacheReadInputTokens != 2 || u.OutputTokens != 3 {
			t.Errorf("%+v: usage %s", tc.end, u.RawJSON())
		}
		if !strings.HasPrefix(msg.ID, "msg_") {
			t.Errorf("id %q", msg.ID)
		}
	}
}

// TestStreamOmitThinking checks that display "omitted" leaves the
// reasoning out, and that an answer with nothing else is one empty text
// block.
func TestStreamOmitThinking(t *testing.T) {
	msg, _, err := streamed(t, Meta{Model: "corral", OmitThinking: true}, func(s *Stream) {
		s.Delta(wire.Delta{ReasoningContent: str("secret")})
		s.End(End{Finish: "stop"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Type != "text" || msg.Content[0].Text != "" || strings.Contains(msg.RawJSON(), "secret") {
		t.Errorf("content %s", msg.RawJSON())
	}
}

// TestStreamError checks an error event mid-stream: the SDK's stream
// ends with its *Error, of the envelope's type and message.
func TestStreamError(t *testing.T) {
	msg, _, err := streamed(t, Meta{Model: "corral"}, func(s *Stream) {
		s.Delta(wire.Delta{Content: str("partial")})
		s.Error(NewError(503, "unavailable", "the request was cancelled: the server is shutting down", "", "req_1"))
		s.End(End{Finish: "stop"}) // nothing after an error
	})
	var ae *sdk.Error
	if !errors.As(err, &ae) {
		t.Fatalf("stream error %v (%T), want *anthropic.Error", err, err)
	}
	if ae.Type() != "overloaded_error" || ae.Message != "the request was cancelled: the server is shutting down" {
		t.Errorf("error %s: type %q message %q", ae.RawJSON(), ae.Type(), ae.Message)
	}
	if msg.StopReason != "" || len(msg.Content) != 1 {
		t.Errorf("message before the error: %s", msg.RawJSON())
	}
}

// TestWholeSDK decodes Whole's Message with the SDK's client.
func TestWholeSDK(t *testing.T) {
	whole := Whole(Meta{ID: "msg_w", Model: "corral", StopSequences: []string{"END"}}, wire.Message{
		ReasoningContent: "Thinking.", Content: "Calling.",
		ToolCalls: []wire.ToolCall{{ID: "call_x", Type: "function", Function: wire.FunctionCall{Name: "f", Arguments: `{"q": "a b"}`}}},
	}, End{Finish: "tool_calls", Usage: Usage{PromptTokens: 50, CachedTokens: 10, CompletionTokens: 9}})
	c := answer(t, func(w http.ResponseWriter) { wire.WriteJSON(w, 200, whole) })
	msg, err := c.Messages.New(context.Background(), params())
	if err != nil {
		t.Fatal(err)
	}
	servetest.UnknownFields(t, "message", reflect.ValueOf(*msg))
	if msg.ID != "msg_w" || msg.Model != "corral" || msg.StopReason != sdk.StopReasonToolUse || msg.JSON.StopSequence.Raw() != "null" || len(msg.Content) != 3 {
		t.Fatalf("message %s", msg.RawJSON())
	}
	if msg.Content[0].AsThinking().Thinking != "Thinking." || msg.Content[1].AsText().Text != "Calling." {
		t.Errorf("content %s", msg.RawJSON())
	}
	if b := msg.Content[2].AsToolUse(); b.ID != "toolu_x" || b.Name != "f" || string(b.Input) != `{"q":"a b"}` {
		t.Errorf("tool_use %s", msg.Content[2].RawJSON())
	}
	if u := msg.Usage; u.InputTokens != 40 || u.CacheReadInputTokens != 10 || u.OutputTokens != 9 {
		t.Errorf("usage %s", u.RawJSON())
	}

	// A stop sequence, and an empty answer.
	whole = Whole(Meta{Model: "corral", StopSequences: []string{"END"}}, wire.Message{}, End{Finish: "stop", StopWord: "END"})
	c = answer(t, func(w http.ResponseWriter) { wire.WriteJSON(w, 200, whole) })
	if msg, err = c.Messages.New(context.Background(), params()); err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != sdk.StopReasonStopSequence || msg.StopSequence != "END" || len(msg.Content) != 1 || msg.Content[0].Type != "text" || !strings.HasPrefix(msg.ID, "msg_") {
		t.Errorf("message %s", msg.RawJSON())
	}
}

// TestErrorSDK checks the envelope of each status as the SDK's *Error
// reads it: its status, type and message.
func TestErrorSDK(t *testing.T) {
	for _, tc := range []struct {
		status         int
		code, param    string
		message, typ   string
		wantMessage    string
		wantRetryAfter bool
	}{
		{400, "", "max_tokens", "max_tokens: field required", "invalid_request_error", "max_tokens: field required", false},
		{400, "context_length_exceeded", "messages", "the prompt is 9000 tokens", "invalid_request_error", "messages: the prompt is 9000 tokens", false},
		{401, "", "", "invalid API key", "authentication_error", "invalid API key", false},
		{403, "", "", "forbidden", "permission_error", "forbidden", false},
		{404, "model_not_found", "model", "model 'x' is not served here", "not_found_error", "model 'x' is not served here", false},
		{413, "request_too_large", "", "request body is larger than 8 bytes", "request_too_large", "request body is larger than 8 bytes", false},
		{429, "", "", "slow down", "rate_limit_error", "slow down", false},
		{500, "", "", "generation failed", "api_error", "generation failed", false},
		{503, "queue_full", "", "the server is busy", "overloaded_error", "the server is busy", false},
		{504, "", "", "timed out", "timeout_error", "timed out", false},
	} {
		env := NewError(tc.status, tc.code, tc.message, tc.param, "req_x")
		c := answer(t, func(w http.ResponseWriter) { wire.WriteJSON(w, tc.status, env) })
		_, err := c.Messages.New(context.Background(), params())
		var ae *sdk.Error
		if !errors.As(err, &ae) {
			t.Fatalf("%d: error %v (%T), want *anthropic.Error", tc.status, err, err)
		}
		if ae.StatusCode != tc.status || string(ae.Type()) != tc.typ || ae.Message != tc.wantMessage {
			t.Errorf("%d: status %d type %q message %q, want %q %q", tc.status, ae.StatusCode, ae.Type(), ae.Message, tc.typ, tc.wantMessage)
		}
		var body sdk.ErrorResponse
		if err := json.Unmarshal([]byte(ae.RawJSON()), &body); err != nil {
			t.Fatal(err)
		}
		servetest.UnknownFields(t, "error body", reflect.ValueOf(body))
		if body.RequestID != "req_x" || body.Type != "error" {
			t.Errorf("%d: body %s", tc.status, ae.RawJSON())
		}
	}
	// A translation error's envelope.
	_, e := ParseMessages([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if env := e.Envelope(""); env.Error.Type != "invalid_request_error" || env.Error.Message != "max_tokens: field required" {
		t.Errorf("envelope %+v", env)
	}
	if b, _ := json.Marshal(e.Envelope("")); bytes.Contains(b, []byte("request_id")) {
		t.Errorf("empty request_id written: %s", b)
	}
}

// TestStreamFraming reads a Stream's bytes as they go on the wire: each
// event is one write, "event: <type>" then "data: <JSON>" whose type is
// the event's; a ping may come first; nothing follows an error event.
func TestStreamFraming(t *testing.T) {
	var w writes
	s := NewStream(&w, Meta{Model: "corral"})
	s.Ping()
	s.Delta(wire.Delta{Content: str("a\nb")})
	s.Error(NewError(500, "", "generation failed", "", ""))
	if err := s.End(End{Finish: "stop"}); err != nil {
		t.Fatal(err)
	}
	s.Delta(wire.Delta{Content: str("more")})
	s.Ping()
	want := []string{"ping", "message_start", "content_block_start", "content_block_delta", "error"}
	if len(w) != len(want) {
		t.Fatalf("%d writes, want %d:\n%s", len(w), len(want), bytes.Join(w, nil))
	}
	for i, b := range w {
		r := wire.NewReader(bytes.NewReader(b))
		ev, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		var data struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(ev.Data, &data); err != nil || ev.Name != want[i] || data.Type != want[i] || !bytes.HasSuffix(b, []byte("}\n\n")) {
			t.Errorf("write %d: %q (%v), want a %s event", i, b, err, want[i])
		}
		if _, err := r.Next(); err != io.EOF {
			t.Errorf("write %d holds more than one event: %q", i, b)
		}
	}
}

// writes keeps each Write apart.
type writes [][]byte

func (w *writes) Write(b []byte) (int, error) {
	*w = append(*w, bytes.Clone(b))
	return len(b), nil
}

// TestStreamWriteError checks that the first write error ends the stream:
// it is returned by that call and every later one, and nothing more is
// written.
func TestStreamWriteError(t *testing.T) {
	fw := &failing{after: 3}
	s := NewStream(fw, Meta{Model: "corral"})
	if err := s.Delta(wire.Delta{Content: str("a")}); err != nil { // message_start, content_block_start, content_block_delta
		t.Fatal(err)
	}
	if err := s.Delta(wire.Delta{Content: str("b")}); !errors.Is(err, errGone) {
		t.Fatalf("Delta: %v, want the write's error", err)
	}
	if err := s.Ping(); !errors.Is(err, errGone) {
		t.Errorf("Ping: %v, want the first error", err)
	}
	if err := s.End(End{Finish: "stop"}); !errors.Is(err, errGone) || fw.calls != 4 {
		t.Errorf("End: %v after %d writes, want the first error and no more writes", err, fw.calls)
	}
}

var errGone = errors.New("client gone")

// failing fails every write after the first after.
type failing struct{ after, calls int }

func (f *failing) Write(b []byte) (int, error) {
	f.calls++
	if f.calls > f.after {
		return 0, errGone
	}
	return len(b), nil
}
