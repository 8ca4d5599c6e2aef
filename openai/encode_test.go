package openai

import (
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/serving"
)

// normalize replaces the parts of a response that change per call.
func normalize(b []byte) string {
	s := regexp.MustCompile(`"created":\d+`).ReplaceAllString(string(b), `"created":0`)
	return regexp.MustCompile(`"id":"(chatcmpl|cmpl)-[a-z0-9]+"`).ReplaceAllString(s, `"id":"$1-X"`)
}

func TestChatEncoding(t *testing.T) {
	a, err := model.New(servetest.NewEngine(), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res := engine.Result{FinishReason: engine.FinishLength, Usage: engine.Usage{PromptTokens: 10, CachedTokens: 4, CompletionTokens: 3}}
	f := &chatEncoder{h: header(a, "chatcmpl-"), includeUsage: true}
	var events []string
	for _, ev := range append(append(f.Start(), f.Deltas(servetest.Content("Hi"), nil, engine.Chunk{Tokens: 1})...), f.End(res, "length")...) {
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
		`{` + h + `,"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":0}}}`,
	}
	for i := range want {
		if i >= len(events) || events[i] != want[i] {
			t.Errorf("event %d:\n got %s\nwant %s", i, events[i:min(i+1, len(events))], want[i])
		}
	}
	if len(events) != len(want) {
		t.Errorf("%d events, want %d", len(events), len(want))
	}
	b, _ := json.Marshal(f.Whole(servetest.Whole("Hello", "stop"), engine.Result{FinishReason: engine.FinishStop, Usage: engine.Usage{PromptTokens: 2, CompletionTokens: 1}}))
	wantWhole := `{"id":"chatcmpl-X","object":"chat.completion","created":0,"model":"tiny","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`
	if got := normalize(b); got != wantWhole {
		t.Errorf("whole:\n got %s\nwant %s", got, wantWhole)
	}
}

func TestTextEncoding(t *testing.T) {
	a, err := model.New(servetest.NewEngine(), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &textEncoder{h: header(a, "cmpl-")}
	res := engine.Result{FinishReason: engine.FinishStop, Usage: engine.Usage{PromptTokens: 2, CompletionTokens: 1}}
	h := `"id":"cmpl-X","object":"text_completion","created":0,"model":"tiny"`
	check := func(v any, want string) {
		t.Helper()
		b, _ := json.Marshal(v)
		if got := normalize(b); got != want {
			t.Errorf("\n got %s\nwant %s", got, want)
		}
	}
	if f.Start() != nil {
		t.Error("text completions stream has a start event")
	}
	check(f.Deltas(servetest.Content("a"), nil, engine.Chunk{Tokens: 1})[0], `{`+h+`,"choices":[{"text":"a","index":0,"logprobs":null,"finish_reason":null}]}`)
	if evs := f.End(res, "stop"); len(evs) != 1 {
		t.Errorf("%d end events without include_usage, want 1", len(evs))
	} else {
		check(evs[0], `{`+h+`,"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"stop"}]}`)
	}
	check(f.Whole(servetest.Whole("ab", "stop"), res), `{`+h+`,"choices":[{"text":"ab","index":0,"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`)
}

func TestWriteError(t *testing.T) {
	w := httptest.NewRecorder()
	WriteError(w, &serving.Error{Status: 400, Param: "temperature", Message: "bad"})
	if want := `{"error":{"message":"bad","type":"invalid_request_error","param":"temperature","code":null}}` + "\n"; w.Body.String() != want {
		t.Errorf("body %q, want %q", w.Body, want)
	}
	if w.Code != 400 || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Retry-After") != "" {
		t.Errorf("status %d, headers %v", w.Code, w.Header())
	}

	w = httptest.NewRecorder()
	WriteError(w, &serving.Error{Status: 503, Code: "queue_full", Message: "busy"})
	if want := `{"error":{"message":"busy","type":"server_error","param":null,"code":"queue_full"}}` + "\n"; w.Body.String() != want {
		t.Errorf("body %q, want %q", w.Body, want)
	}
	if w.Header().Get("Retry-After") != "1" {
		t.Errorf("503 without Retry-After: %v", w.Header())
	}
}
