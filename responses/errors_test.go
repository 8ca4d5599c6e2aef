package responses

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	sdk "github.com/openai/openai-go/v3/responses"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// routesClient serves the Responses routes of a Core over fake on
// loopback, to openai-go's client (no retries).
func routesClient(t *testing.T, fake *servetest.Engine) openai.Client {
	t.Helper()
	c := servetest.Strict(t, fake)
	mux := http.NewServeMux()
	for _, r := range Routes(NewStore(StoreOptions{})) {
		for _, path := range r.Paths {
			mux.Handle(r.Method+" "+path, servetest.Bind(c, r.Handler))
		}
	}
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
}

func tinyParams() sdk.ResponseNewParams {
	return sdk.ResponseNewParams{Model: "tiny", Input: sdk.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
}

// TestPromptTooLong: a prompt over the context is OpenAI's
// context_length_exceeded: a 400 before a whole answer; in a stream, as
// OpenAI's does and as Codex reads it to compact its conversation, a
// response.failed whose error has that code, after response.created and
// response.in_progress. Other errors of the submission stay a status
// before the stream.
func TestPromptTooLong(t *testing.T) {
	fake := servetest.NewEngine()
	fake.SubmitErr = &engine.PromptTooLongError{Tokens: 900, Max: 511}
	client := routesClient(t, fake)
	_, err := client.Responses.New(context.Background(), tinyParams())
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Code != "context_length_exceeded" ||
		apiErr.Type != "invalid_request_error" || apiErr.Param != "input" {
		t.Fatalf("whole: %v, want a 400 context_length_exceeded about input", err)
	}

	s := client.Responses.NewStreaming(context.Background(), tinyParams())
	var evs []sdk.ResponseStreamEventUnion
	for s.Next() {
		evs = append(evs, s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	s.Close()
	if got := types(evs); got != "created in_progress failed" {
		t.Fatalf("events %q", got)
	}
	r := evs[2].AsResponseFailed().Response
	if r.Status != "failed" || r.Error.Code != "context_length_exceeded" || r.Error.Message != apiErr.Message || evs[2].SequenceNumber != 2 {
		t.Errorf("response.failed %s", evs[2].RawJSON())
	}

	fake.SubmitErr = engine.ErrQueueFull
	s = client.Responses.NewStreaming(context.Background(), tinyParams())
	for s.Next() {
		t.Errorf("queue full: event %s", s.Current().Type)
	}
	// An overload is OpenAI's server_is_overloaded, which Codex retries.
	if !errors.As(s.Err(), &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable || apiErr.Code != "server_is_overloaded" {
		t.Errorf("queue full, streamed: %v, want a 503 server_is_overloaded", s.Err())
	}
	s.Close()
}

// TestErrorFailsResponse: an error after the stream's headers fails the
// response (response.failed, which Codex reads; it ignores "error"
// events), after response.created and response.in_progress when only
// pings went before; its code is the error's (an overload's OpenAI's
// server_is_overloaded, which Codex retries), else its type's.
func TestErrorFailsResponse(t *testing.T) {
	r, _ := Decode([]byte(`{"input":"hi"}`))
	tr, _ := Translate(r, nil, Limits{})
	for _, begun := range []bool{false, true} {
		enc := &encoder{s: NewStream(NewResponse("resp_x", "corral", 1700000000, r, tr), nil)}
		var out []byte
		if begun {
			for _, ev := range enc.Start() {
				out = ev.(serving.SSEAppender).AppendSSE(out)
			}
			for _, ev := range enc.Deltas([]wire.Delta{{Content: str("Hel")}}, nil, engine.Chunk{}) {
				out = ev.(serving.SSEAppender).AppendSSE(out)
			}
		}
		for _, e := range []*serving.Error{
			{Status: http.StatusServiceUnavailable, Code: "queue_timeout", Message: "waited too long"},
			{Status: http.StatusInternalServerError, Message: "the model crashed"}, // no more: the response failed
		} {
			out = enc.Error(e).(serving.SSEAppender).AppendSSE(out)
		}
		evs, _ := streamed(t, out)
		want := "created in_progress failed"
		if begun {
			want = "created in_progress output_item.added content_part.added output_text.delta output_text.done content_part.done output_item.done failed"
		}
		if got := types(evs); got != want {
			t.Fatalf("begun %v: events %q, want %q", begun, got, want)
		}
		last := evs[len(evs)-1].AsResponseFailed().Response
		if last.Error.Code != "server_is_overloaded" || last.Error.Message != "waited too long" {
			t.Errorf("begun %v: %s", begun, evs[len(evs)-1].RawJSON())
		}
	}
	enc := &encoder{s: NewStream(NewResponse("resp_y", "corral", 1700000000, r, tr), nil)}
	evs, _ := streamed(t, enc.Error(&serving.Error{Status: 500, Message: "boom"}).(serving.SSEAppender).AppendSSE(nil))
	if last := evs[len(evs)-1].AsResponseFailed().Response; last.Error.Code != "server_error" {
		t.Errorf("no code: %s", evs[len(evs)-1].RawJSON())
	}
}

// TestReasoningTokens: output_tokens_details.reasoning_tokens are the
// engine's count of the reasoning's tokens, streamed and whole.
func TestReasoningTokens(t *testing.T) {
	r, _ := Decode([]byte(`{"input":"hi"}`))
	tr, _ := Translate(r, nil, Limits{})
	res := engine.Result{FinishReason: engine.FinishStop, Usage: engine.Usage{PromptTokens: 9, CompletionTokens: 20, ReasoningTokens: 13}}
	enc := &encoder{s: NewStream(NewResponse("resp_r", "corral", 1700000000, r, tr), nil)}
	var out []byte
	for _, batch := range [][]any{enc.Start(), enc.Deltas([]wire.Delta{{ReasoningContent: str("hmm")}, {Content: str("ok")}}, nil, engine.Chunk{}), enc.End(res, "stop")} {
		for _, ev := range batch {
			out = ev.(serving.SSEAppender).AppendSSE(out)
		}
	}
	evs, _ := streamed(t, out)
	if u := evs[len(evs)-1].AsResponseCompleted().Response.Usage; u.OutputTokens != 20 || u.OutputTokensDetails.ReasoningTokens != 13 {
		t.Errorf("streamed usage %s", u.RawJSON())
	}
	enc = &encoder{s: NewStream(NewResponse("resp_w", "corral", 1700000000, r, tr), nil)}
	whole := enc.Whole(serving.Answer{Reasoning: "hmm", Content: "ok", Finish: "stop"}, res).(*Response)
	if u := whole.Usage; u.OutputTokens != 20 || u.OutputTokensDetails.ReasoningTokens != 13 {
		t.Errorf("whole usage %+v", u)
	}
}
