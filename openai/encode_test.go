package openai

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/model"
)

func TestWriteError(t *testing.T) {
	w := httptest.NewRecorder()
	WriteError(w, &Error{Status: 400, Type: TypeInvalidRequest, Param: "temperature", Message: "bad"})
	if want := `{"error":{"message":"bad","type":"invalid_request_error","param":"temperature","code":null}}` + "\n"; w.Body.String() != want {
		t.Errorf("body %q, want %q", w.Body, want)
	}
	if w.Code != 400 || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Retry-After") != "" {
		t.Errorf("status %d, headers %v", w.Code, w.Header())
	}

	w = httptest.NewRecorder()
	WriteError(w, &Error{Status: 503, Type: TypeServer, Code: "queue_full", Message: "busy"})
	if want := `{"error":{"message":"busy","type":"server_error","param":null,"code":"queue_full"}}` + "\n"; w.Body.String() != want {
		t.Errorf("body %q, want %q", w.Body, want)
	}
	if w.Header().Get("Retry-After") != "1" {
		t.Errorf("503 without Retry-After: %v", w.Header())
	}
}

func TestSSEWriter(t *testing.T) {
	w := httptest.NewRecorder()
	s := startSSE(w)
	if err := s.event(map[string]string{"a": "b\n"}); err != nil {
		t.Fatal(err)
	}
	if err := s.done(); err != nil {
		t.Fatal(err)
	}
	if want := "data: {\"a\":\"b\\n\"}\n\ndata: [DONE]\n\n"; w.Body.String() != want {
		t.Errorf("body %q, want %q", w.Body, want)
	}
	if ct := w.Header().Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	if !w.Flushed {
		t.Error("events were not flushed")
	}
}

func TestUTF8Carry(t *testing.T) {
	euro := "€" // 3 bytes: e2 82 ac
	tests := []struct {
		chunks []string
		want   []string // what next returns per chunk, then rest
	}{
		{[]string{"ab", "c"}, []string{"ab", "c", ""}},
		{[]string{"a" + euro[:1], euro[1:2], euro[2:] + "b"}, []string{"a", "", euro + "b", ""}},
		{[]string{euro[:2]}, []string{"", euro[:2]}},       // cut short at the end: passed on as is
		{[]string{"\xff", "x"}, []string{"\xff", "x", ""}}, // invalid bytes are not held forever
		{[]string{"😀"[:3], "😀"[3:]}, []string{"", "😀", ""}},
	}
	for _, tt := range tests {
		var c utf8Carry
		var got []string
		for _, ch := range tt.chunks {
			got = append(got, c.next(ch))
		}
		got = append(got, c.rest())
		if strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("chunks %q: got %q, want %q", tt.chunks, got, tt.want)
		}
	}
}

// normalize replaces the parts of a response that change per call.
func normalize(b []byte) string {
	s := regexp.MustCompile(`"created":\d+`).ReplaceAllString(string(b), `"created":0`)
	return regexp.MustCompile(`"id":"(chatcmpl|cmpl)-[a-z0-9]+"`).ReplaceAllString(s, `"id":"$1-X"`)
}

func TestChatEncoding(t *testing.T) {
	a, err := model.New(newFake(), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res := engine.Result{FinishReason: engine.FinishLength, Usage: engine.Usage{PromptTokens: 10, CachedTokens: 4, CompletionTokens: 3}}
	f := &chatResponder{h: header(a, "chatcmpl-"), includeUsage: true}
	var events []string
	for _, ev := range append([]any{f.streamStart(), f.streamText("Hi", engine.Chunk{Tokens: 1})}, f.streamEnd(res)...) {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, normalize(b))
	}
	h := `"id":"chatcmpl-X","object":"chat.completion.chunk","created":0,"model":"tiny"`
	want := []string{
		`{` + h + `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
		`{` + h + `,"choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]}`,
		`{` + h + `,"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}`,
		`{` + h + `,"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":4}}}`,
	}
	for i := range want {
		if i >= len(events) || events[i] != want[i] {
			t.Errorf("event %d:\n got %s\nwant %s", i, events[i:min(i+1, len(events))], want[i])
		}
	}
	if len(events) != len(want) {
		t.Errorf("%d events, want %d", len(events), len(want))
	}
	b, _ := json.Marshal(f.whole("Hello", nil, engine.Result{FinishReason: engine.FinishStop, Usage: engine.Usage{PromptTokens: 2, CompletionTokens: 1}}))
	wantWhole := `{"id":"chatcmpl-X","object":"chat.completion","created":0,"model":"tiny","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3,"prompt_tokens_details":{"cached_tokens":0}}}`
	if got := normalize(b); got != wantWhole {
		t.Errorf("whole:\n got %s\nwant %s", got, wantWhole)
	}
}

func TestTextEncoding(t *testing.T) {
	a, err := model.New(newFake(), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &textResponder{h: header(a, "cmpl-")}
	res := engine.Result{FinishReason: engine.FinishStop, Usage: engine.Usage{PromptTokens: 2, CompletionTokens: 1}}
	h := `"id":"cmpl-X","object":"text_completion","created":0,"model":"tiny"`
	check := func(v any, want string) {
		t.Helper()
		b, _ := json.Marshal(v)
		if got := normalize(b); got != want {
			t.Errorf("\n got %s\nwant %s", got, want)
		}
	}
	if f.streamStart() != nil {
		t.Error("text completions stream has a start event")
	}
	check(f.streamText("a", engine.Chunk{Tokens: 1}), `{`+h+`,"choices":[{"text":"a","index":0,"logprobs":null,"finish_reason":null}]}`)
	if evs := f.streamEnd(res); len(evs) != 1 {
		t.Errorf("%d end events without include_usage, want 1", len(evs))
	} else {
		check(evs[0], `{`+h+`,"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"stop"}]}`)
	}
	check(f.whole("ab", nil, res), `{`+h+`,"choices":[{"text":"ab","index":0,"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3,"prompt_tokens_details":{"cached_tokens":0}}}`)
}

func TestLlamaEncoding(t *testing.T) {
	f := &llamaResponder{model: "tiny"}
	b, _ := json.Marshal(f.streamText("a", engine.Chunk{Tokens: 2}))
	if want := `{"content":"a","stop":false,"tokens_predicted":2}`; string(b) != want {
		t.Errorf("partial %s, want %s", b, want)
	}
	res := engine.Result{
		FinishReason: engine.FinishStop, StopWord: "END", Slot: 1,
		Usage:   engine.Usage{PromptTokens: 6, CachedTokens: 2, CompletionTokens: 4},
		Timings: engine.Timings{Prefill: 8 * time.Millisecond, Decode: 20 * time.Millisecond},
	}
	b, _ = json.Marshal(f.whole("abcd", nil, res))
	want := `{"content":"abcd","stop":true,"model":"tiny","id_slot":1,"tokens_predicted":4,"tokens_evaluated":6,"tokens_cached":2,` +
		`"stop_type":"word","stopping_word":"END","truncated":false,"timings":{"prompt_n":4,"prompt_ms":8,"prompt_per_token_ms":2,` +
		`"prompt_per_second":500,"predicted_n":4,"predicted_ms":20,"predicted_per_token_ms":5,"predicted_per_second":200}}`
	if string(b) != want {
		t.Errorf("final\n got %s\nwant %s", b, want)
	}
	for reason, stopType := range map[engine.FinishReason]string{engine.FinishStop: "eos", engine.FinishLength: "limit"} {
		v := f.whole("", nil, engine.Result{FinishReason: reason}).(*llamaFinal)
		if v.StopType != stopType {
			t.Errorf("%s: stop_type %q, want %q", reason, v.StopType, stopType)
		}
	}
}

func TestResultError(t *testing.T) {
	if e := resultError(engine.Result{FinishReason: engine.FinishStop}); e != nil {
		t.Errorf("stop is an error: %v", e)
	}
	e := resultError(engine.Result{FinishReason: engine.FinishError, Err: http.ErrHandlerTimeout})
	if e == nil || e.Status != 500 || !strings.Contains(e.Message, http.ErrHandlerTimeout.Error()) {
		t.Errorf("FinishError gave %+v", e)
	}
	if e := resultError(engine.Result{FinishReason: engine.FinishCancelled}); e == nil || e.Status != 503 {
		t.Errorf("FinishCancelled gave %+v", e)
	}
	// A grammar no token continues: the request asked what the model
	// cannot write.
	e = resultError(engine.Result{FinishReason: engine.FinishError, Err: &engine.UnsatisfiableError{Reason: `no token writes "{"`}})
	if e == nil || e.Status != 400 || e.Code != "grammar_unsatisfiable" || e.Param != "grammar" || !strings.HasSuffix(e.Message, `: no token writes "{"`) {
		t.Errorf("an unsatisfiable grammar gave %+v", e)
	}
}
