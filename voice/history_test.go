package voice_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/voice"
	"github.com/corral-llm/corral/wire"
)

// recorder is the API as a voice Generator, keeping the conversation each
// turn was given.
type recorder struct {
	api  *serving.Core
	mu   sync.Mutex
	last []chat.Message
	// transcribed, when set, receives each transcription's error (nil
	// when it gave a text).
	transcribed chan *serving.Error
}

func (r *recorder) PacedChat(ctx context.Context, body []byte, history []chat.Message, conv *serving.Conversation) (*engine.Stream, func(), *serving.Error) {
	r.mu.Lock()
	r.last = append([]chat.Message(nil), history...)
	r.mu.Unlock()
	return openai.Pacer{Core: r.api}.PacedChat(ctx, body, history, conv)
}

func (r *recorder) Transcribe(ctx context.Context, body []byte) (string, *serving.Error) {
	text, e := openai.Pacer{Core: r.api}.Transcribe(ctx, body)
	if r.transcribed != nil {
		r.transcribed <- e
	}
	return text, e
}

// history is the conversation the last turn was given.
func (r *recorder) history() []chat.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// startRecorded serves voice with opt over the tiny model, with one slot
// of ctx tokens (0: the model's), through a recorder.
func startRecorded(t *testing.T, ctx int, opt voice.Options) (*server, *recorder) {
	t.Helper()
	eng, err := engine.New(context.Background(), engine.Config{ModelPath: testmodel.Path(t, testmodel.TinyStories656K), Threads: 1, Parallel: 1, CtxSize: ctx})
	if err != nil {
		t.Fatal(err)
	}
	api, err := serving.ForEngine(eng, model.Options{})
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	rec := &recorder{api: api}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		voice.Serve(w, r, rec, opt)
	}))
	t.Cleanup(func() {
		hs.Close()
		eng.Close()
	})
	return &server{url: "ws" + strings.TrimPrefix(hs.URL, "http"), eng: eng, api: api}, rec
}

// size is what m counts against Options.MaxHistoryBytes.
func size(m chat.Message) int {
	return voice.MessageOverhead + len(m.Role) + len(m.Content) + len(m.Name) + len(m.ToolCallID)
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestHistoryDropsUnknownFields: messages carrying fields the
// conversation does not use (1 MB each here; they cost no tokens, so the
// context never made the conversation forget them) are kept without them:
// 24 turns keep a few KB, not 24 MB.
func TestHistoryDropsUnknownFields(t *testing.T) {
	s, rec := startRecorded(t, 0, voice.Options{})
	c := s.dial(t)
	blob := strings.Repeat("z", 512<<10)
	base := heapInUse()
	for range 24 {
		turn := map[string]any{
			"messages":    []map[string]any{{"role": "user", "content": "Hi.", "metadata": blob, "x_trace": map[string]any{"blob": blob}}},
			"temperature": 0, "max_tokens": 2,
		}
		if _, done := answer(t, c, turn, -1, 0); done.Type != voice.TypeDone {
			t.Fatalf("%+v", done)
		}
	}
	h := rec.history()
	total := 0
	for _, m := range h {
		total += size(m)
	}
	if len(h) == 0 || total > len(h)*(voice.MessageOverhead+64) {
		t.Errorf("the last turn was given %d messages of %d bytes, want small ones", len(h), total)
	}
	if grown := int64(heapInUse()) - int64(base); grown > 8<<20 {
		t.Errorf("the heap grew by %d MB over 24 turns", grown>>20)
	}
}

// TestHistoryBound: a conversation within MaxHistoryBytes and MaxMessages
// (in a context large enough not to make it forget) forgets its oldest
// messages, never its system message, and every turn is answered.
func TestHistoryBound(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		maxBytes, maxMessages int
		content               int // bytes of each user message
	}{
		{"bytes", 1500, 100, 150},
		{"messages", 1 << 20, 5, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, rec := startRecorded(t, 1024, voice.Options{MaxHistoryBytes: tc.maxBytes, MaxMessages: tc.maxMessages})
			c := s.dial(t)
			forgot := false
			for i := range 12 {
				text := strings.Repeat("Tell me a story. ", 20)[:tc.content-1] + string(rune('a'+i))
				msgs := []wire.Message{{Role: "user", Content: text}}
				if i == 0 {
					msgs = append([]wire.Message{{Role: "system", Content: "You tell stories."}}, msgs...)
				}
				turn := map[string]any{"messages": msgs, "temperature": 0, "max_tokens": 8}
				if _, done := answer(t, c, turn, -1, 0); done.Type != voice.TypeDone || done.Error != nil {
					t.Fatalf("turn %d: %+v", i, done)
				}
				h := rec.history()
				if i > 0 && (len(h) == 0 || h[0].Role != "system") {
					t.Fatalf("turn %d: the system message was forgotten: %+v", i, h)
				}
				total := size(chat.Message{Role: "user", Content: []byte(`"` + text + `"`)}) // the turn's own
				for _, m := range h {
					total += size(m)
				}
				if total > tc.maxBytes || len(h)+1 > tc.maxMessages {
					t.Fatalf("turn %d: %d messages of %d bytes with its own, over %d messages, %d bytes", i, len(h)+1, total, tc.maxMessages, tc.maxBytes)
				}
				forgot = forgot || len(h) < 2*i
			}
			if !forgot {
				t.Fatal("nothing was forgotten")
			}
		})
	}
}

// TestHistoryRefusesTurnTooLarge: a turn that cannot fit even alone is
// refused with an error naming the limit, and the conversation goes on as
// it was.
func TestHistoryRefusesTurnTooLarge(t *testing.T) {
	s, rec := startRecorded(t, 0, voice.Options{MaxHistoryBytes: 1000})
	c := s.dial(t)
	if _, done := answer(t, c, user("Hello there.", 4), -1, 0); done.Type != voice.TypeDone {
		t.Fatalf("%+v", done)
	}
	if err := c.Create(context.Background(), user(strings.Repeat("long ", 400), 4)); err != nil {
		t.Fatal(err)
	}
	ev := next(t, c)
	if ev.Type != voice.TypeError || ev.Error == nil || ev.Error.Code == nil || *ev.Error.Code != "limit_exceeded" ||
		!strings.Contains(ev.Error.Message, "--max-voice-history") {
		t.Fatalf("event %+v, want a limit_exceeded error naming --max-voice-history", ev)
	}
	if _, done := answer(t, c, user("And then?", 4), -1, 0); done.Type != voice.TypeDone {
		t.Fatalf("%+v", done)
	}
	if h := rec.history(); len(h) != 2 || !strings.Contains(string(h[0].Content), "Hello there.") {
		t.Fatalf("the turn after the refusal was given %+v, want the first turn", h)
	}
}
