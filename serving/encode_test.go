package serving

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
)

func TestSSEWriter(t *testing.T) {
	w := httptest.NewRecorder()
	s, _ := startSSETimeout(w, DefaultWriteTimeout, nil)
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

func TestResultError(t *testing.T) {
	if e := ResultError(engine.Result{FinishReason: engine.FinishStop}); e != nil {
		t.Errorf("stop is an error: %v", e)
	}
	e := ResultError(engine.Result{FinishReason: engine.FinishError, Err: http.ErrHandlerTimeout})
	if e == nil || e.Status != 500 || !strings.Contains(e.Message, http.ErrHandlerTimeout.Error()) {
		t.Errorf("FinishError gave %+v", e)
	}
	if e := ResultError(engine.Result{FinishReason: engine.FinishCancelled}); e == nil || e.Status != 503 {
		t.Errorf("FinishCancelled gave %+v", e)
	}
	// A grammar no token continues: the request asked what the model
	// cannot write.
	e = ResultError(engine.Result{FinishReason: engine.FinishError, Err: &engine.UnsatisfiableError{Reason: `no token writes "{"`}})
	if e == nil || e.Status != 400 || e.Code != "grammar_unsatisfiable" || e.Param != "grammar" || !strings.HasSuffix(e.Message, `: no token writes "{"`) {
		t.Errorf("an unsatisfiable grammar gave %+v", e)
	}
}

func TestNDJSONWriter(t *testing.T) {
	w := httptest.NewRecorder()
	s, err := startNDJSON(w, time.Second, func() any { return map[string]any{"response": "", "done": false} })
	if err != nil {
		t.Fatal(err)
	}
	if s.event(map[string]string{"a": "b\n"}) != nil || s.ping() != nil || s.done() != nil {
		t.Fatal("write failed")
	}
	if want := "{\"a\":\"b\\n\"}\n{\"done\":false,\"response\":\"\"}\n"; w.Body.String() != want {
		t.Errorf("body %q, want %q", w.Body, want)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/x-ndjson" || !w.Flushed {
		t.Errorf("Content-Type %q, flushed %v", ct, w.Flushed)
	}
}

// rawEvent frames itself.
type rawEvent string

func (e rawEvent) AppendSSE(dst []byte) []byte { return append(dst, e...) }

// A dialect's events are framed as it says: an Event with its name, an
// SSEAppender as it writes itself, the encoder's ping as an event; in
// NDJSON an Event is its data.
func TestNamedEvents(t *testing.T) {
	w := httptest.NewRecorder()
	s, err := startSSETimeout(w, time.Second, func() any { return Event{Name: "ping", Data: map[string]string{"type": "ping"}} })
	if err != nil {
		t.Fatal(err)
	}
	if s.event(Event{Name: "message_start", Data: map[string]int{"a": 1}}) != nil || s.event(rawEvent("event: x\ndata: {}\n\n")) != nil || s.ping() != nil {
		t.Fatal("write failed")
	}
	want := "event: message_start\ndata: {\"a\":1}\n\nevent: x\ndata: {}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n"
	if w.Body.String() != want {
		t.Errorf("body %q, want %q", w.Body, want)
	}

	w = httptest.NewRecorder()
	n, err := startNDJSON(w, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n.event(Event{Name: "ignored", Data: map[string]int{"a": 1}}) != nil {
		t.Fatal("write failed")
	}
	if want := "{\"a\":1}\n"; w.Body.String() != want {
		t.Errorf("NDJSON body %q, want %q", w.Body, want)
	}
}
