package voice_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/voice"
	"github.com/corral-llm/corral/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is a voice endpoint over a real engine on a loopback port.
type server struct {
	url string
	eng *engine.Engine
	api *serving.Core
}

func start(t *testing.T, cfg engine.Config) *server {
	t.Helper()
	return startWith(t, cfg, voice.Options{})
}

// startWith is start with the voice options opt.
func startWith(t *testing.T, cfg engine.Config, opt voice.Options) *server {
	t.Helper()
	cfg.ModelPath = testmodel.Path(t, testmodel.TinyStories656K)
	cfg.Threads = 1
	eng, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	api, err := serving.ForEngine(eng, model.Options{})
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		voice.Serve(w, r, openai.Pacer{Core: api}, opt)
	}))
	t.Cleanup(func() {
		hs.Close()
		eng.Close()
	})
	return &server{url: "ws" + strings.TrimPrefix(hs.URL, "http"), eng: eng, api: api}
}

func (s *server) dial(t *testing.T) *voice.Client {
	t.Helper()
	c, err := voice.Dial(context.Background(), s.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// user is a turn adding one user message; greedy, bounded.
func user(text string, maxTokens int) map[string]any {
	return map[string]any{
		"messages":    []wire.Message{{Role: "user", Content: text}},
		"temperature": 0, "max_tokens": maxTokens,
	}
}

func next(t *testing.T, c *voice.Client) voice.ServerEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ev, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// answer runs one turn, continuing after every chunk (or interrupting
// after the chunk with index interruptAt, having heard extra more
// characters), and returns the chunks' texts and the done event.
func answer(t *testing.T, c *voice.Client, turn map[string]any, interruptAt, extra int) ([]string, voice.ServerEvent) {
	t.Helper()
	ctx := context.Background()
	if err := c.Create(ctx, turn); err != nil {
		t.Fatal(err)
	}
	return listen(t, c, next(t, c), interruptAt, extra)
}

// listen is answer from the turn's response.created, first, on.
func listen(t *testing.T, c *voice.Client, first voice.ServerEvent, interruptAt, extra int) ([]string, voice.ServerEvent) {
	t.Helper()
	ctx := context.Background()
	if first.Type != voice.TypeCreated {
		t.Fatalf("first event %+v, want response.created", first)
	}
	var texts []string
	heard := 0
	for {
		ev := next(t, c)
		switch ev.Type {
		case voice.TypeChunk:
			if ev.Index == nil || *ev.Index != len(texts) {
				t.Fatalf("chunk %+v, want index %d", ev, len(texts))
			}
			texts = append(texts, ev.Text)
			if len(texts)-1 == interruptAt {
				if err := c.Interrupt(ctx, heard+extra); err != nil {
					t.Fatal(err)
				}
				continue
			}
			heard += utf8.RuneCountInString(ev.Text)
			if err := c.Continue(ctx); err != nil {
				t.Fatal(err)
			}
		case voice.TypeDone:
			return texts, ev
		default:
			t.Fatalf("unexpected event %+v", ev)
		}
	}
}

// TestConversation: two turns on one socket. The chunks of an answer are
// the answer (the done message), the per-response metrics add up, and the
// second turn finds the whole first turn in the KV cache, its prompt and
// its answer's tokens (as the model generated them, which this model's
// tokenizer does not give back from their text).
func TestConversation(t *testing.T) {
	s := start(t, engine.Config{Parallel: 2})
	c := s.dial(t)
	turn := user("Tell me a story about a dog.", 80)
	turn["messages"] = []wire.Message{{Role: "system", Content: "You tell short stories."}, {Role: "user", Content: "Tell me a story about a dog."}}
	texts, done := answer(t, c, turn, -1, 0)
	if len(texts) < 2 || done.Message == nil || done.Message.Content != strings.Join(texts, "") {
		t.Fatalf("%d chunks %q, done %+v", len(texts), texts, done)
	}
	m := done.Metrics
	if m == nil || m.Chunks != len(texts) || m.FirstChunkMS <= 0 || m.FirstChunkMS > m.TotalMS || done.Usage == nil {
		t.Fatalf("metrics %+v usage %+v", m, done.Usage)
	}
	// The whole first turn but the last token (sampled, never evaluated)
	// and, after a stop string, that string's tokens (never in the text):
	// a few tokens of slack. Tokenized again from the text, the answer
	// would match only its first few tokens.
	first := done.Usage.PromptTokens + done.Usage.CompletionTokens - 8
	_, done2 := answer(t, c, user("And then?", 20), -1, 0)
	if got := done2.Usage.PromptTokensDetails.CachedTokens; got < first {
		t.Errorf("second turn: %d tokens cached, want about the whole first turn (%d at least); first turn %s, %+v", got, first, done.FinishReason, done.Usage)
	}
	if r := done2.Metrics.CacheHitRatio; r != float64(done2.Usage.PromptTokensDetails.CachedTokens)/float64(done2.Usage.PromptTokens) {
		t.Errorf("second turn cache hit ratio %v, usage %+v", r, done2.Usage)
	}
}

// TestPacedTextIsTheGreedyText: over the socket, the chunks of a greedy
// answer are the text of the same request answered unpaced over HTTP.
func TestPacedTextIsTheGreedyText(t *testing.T) {
	s := start(t, engine.Config{Parallel: 1})
	texts, done := answer(t, s.dial(t), user("Once upon a time", 60), -1, 0)
	u := start(t, engine.Config{Parallel: 1})
	body, _ := json.Marshal(map[string]any{"messages": []wire.Message{{Role: "user", Content: "Once upon a time"}}, "temperature": 0, "max_tokens": 60})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(string(body)))
	openai.ChatCompletions(u.api, rec, req)
	var out struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("unpaced answer %s: %v", rec.Body, err)
	}
	if got, want := strings.Join(texts, ""), out.Choices[0].Message.Content; got != want {
		t.Fatalf("paced %q\nunpaced %q", got, want)
	}
	if done.FinishReason != "length" && done.FinishReason != "stop" {
		t.Fatalf("done %+v", done)
	}
}

// TestInterruptKeepsWhatWasHeard: an interrupt cuts the assistant's turn
// to the characters heard; the next turn goes on from there.
func TestInterruptKeepsWhatWasHeard(t *testing.T) {
	s := start(t, engine.Config{Parallel: 1})
	c := s.dial(t)
	texts, done := answer(t, c, user("Tell me a story.", 200), 1, 4)
	if done.FinishReason != string(engine.FinishInterrupted) {
		t.Fatalf("done %+v", done)
	}
	want := texts[0] + string([]rune(texts[1])[:4])
	if done.Message.Content != want {
		t.Fatalf("kept %q, want %q", done.Message.Content, want)
	}
	_, done2 := answer(t, c, user("What next?", 10), -1, 0)
	if done2.Usage.PromptTokensDetails.CachedTokens <= done.Usage.PromptTokens {
		t.Errorf("next turn cached %d tokens; the previous prompt alone had %d", done2.Usage.PromptTokensDetails.CachedTokens, done.Usage.PromptTokens)
	}
}

// waitStats polls the engine's stats until ok says so.
func waitStats(t *testing.T, e *engine.Engine, what string, ok func(engine.Stats) bool) engine.Stats {
	t.Helper()
	deadline := time.After(time.Minute)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		st := e.Stats()
		if ok(st) {
			return st
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: still not so: %+v", what, st)
		}
	}
}

// waitIdle polls until no slot is busy and nothing is queued.
func waitIdle(t *testing.T, e *engine.Engine) {
	t.Helper()
	waitStats(t, e, "waiting for idle slots", func(st engine.Stats) bool { return st.SlotsBusy == 0 && st.QueueDepth == 0 })
}

// TestClosedSocketFreesTheSlot: a socket closed while its answer is
// paused interrupts it; the slot goes idle.
func TestClosedSocketFreesTheSlot(t *testing.T) {
	s := start(t, engine.Config{Parallel: 1})
	c := s.dial(t)
	if err := c.Create(context.Background(), user("Tell me a story.", 200)); err != nil {
		t.Fatal(err)
	}
	next(t, c)
	if ev := next(t, c); ev.Type != voice.TypeChunk {
		t.Fatalf("event %+v", ev)
	}
	waitStats(t, s.eng, "waiting for the answer to pause", func(st engine.Stats) bool { return st.SlotsPaused == 1 })
	c.Close()
	waitStats(t, s.eng, "waiting for the closed socket to interrupt the answer", func(st engine.Stats) bool {
		return st.SlotsBusy == 0 && st.Paced.Interrupted == 1
	})
}

// TestProtocolErrors: bad messages get an error event and the
// conversation goes on.
func TestProtocolErrors(t *testing.T) {
	s := start(t, engine.Config{Parallel: 1})
	c := s.dial(t)
	ctx := context.Background()
	for _, bad := range []map[string]any{
		{"type": "continue"},
		{"type": "interrupt", "spoken_chars": 3},
		{"type": "dance"},
		{"type": voice.TypeCreate},
		{"type": voice.TypeCreate, "messages": "hello"},
		{"type": voice.TypeCreate, "messages": []wire.Message{{Role: "user", Content: "x"}}, "chunking": map[string]any{"first_min_tokens": -1}},
		{"type": voice.TypeCreate, "messages": []wire.Message{{Role: "user", Content: "x"}}, "temperature": 9},
	} {
		typ := bad["type"].(string)
		delete(bad, "type")
		var err error
		if typ == voice.TypeCreate {
			err = c.Create(ctx, bad)
		} else {
			bad["type"] = typ
			b, _ := json.Marshal(bad)
			err = writeRaw(c, b)
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev := next(t, c); ev.Type != voice.TypeError || ev.Error == nil || ev.Error.Message == "" {
			t.Errorf("%v: event %+v, want an error", bad, ev)
		}
	}
	texts, done := answer(t, c, user("Hello", 20), -1, 0)
	if done.Message.Content != strings.Join(texts, "") {
		t.Fatalf("after the errors: %+v", done)
	}
}

// writeRaw sends b as a client message, whatever it is.
func writeRaw(c *voice.Client, b []byte) error {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	switch m["type"] {
	case voice.TypeContinue:
		return c.Continue(context.Background())
	case voice.TypeInterrupt:
		return c.Interrupt(context.Background(), int(m["spoken_chars"].(float64)))
	}
	return c.Send(context.Background(), m)
}

// TestManySessions: 100 conversations at once on 4 slots, each two
// turns with random interrupts and random closes; afterwards no slot is
// busy and nothing is queued.
func TestManySessions(t *testing.T) {
	s := start(t, engine.Config{Parallel: 4, MaxQueue: 256})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			if err := session(s.url, rng); err != nil {
				errs <- fmt.Errorf("session %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitIdle(t, s.eng)
	if st := s.eng.Stats(); st.SlotsPaused != 0 || st.Paced.Requests < 100 {
		t.Fatalf("stats %+v", st)
	}
}

// session is one random conversation of TestManySessions.
func session(url string, rng *rand.Rand) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := voice.Dial(ctx, url, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	for turn := range 2 {
		if err := c.Create(ctx, user(fmt.Sprintf("Tell me story %d.", turn), 40+rng.IntN(40))); err != nil {
			return err
		}
		interruptAt := -1
		if rng.IntN(3) == 0 {
			interruptAt = rng.IntN(3)
		}
		closeAt := -1
		if rng.IntN(8) == 0 {
			closeAt = rng.IntN(3)
		}
		chunks := 0
		for done := false; !done; {
			ev, err := c.Next(ctx)
			if err != nil {
				return err
			}
			switch ev.Type {
			case voice.TypeCreated:
			case voice.TypeChunk:
				if chunks == closeAt {
					return nil // deferred Close: the socket goes away mid-answer
				}
				if chunks == interruptAt {
					err = c.Interrupt(ctx, rng.IntN(20))
				} else {
					err = c.Continue(ctx)
				}
				chunks++
			case voice.TypeDone:
				if ev.Metrics == nil {
					return fmt.Errorf("done %+v without metrics", ev)
				}
				if ev.Metrics.Chunks != chunks && ev.FinishReason != string(engine.FinishInterrupted) {
					return fmt.Errorf("done %+v (metrics %+v) after %d chunks", ev, *ev.Metrics, chunks)
				}
				done = true
			default:
				return fmt.Errorf("event %+v", ev)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// TestPingsKeepAPausedConversation: the server pings during a pause of
// ten ping intervals; voice.Client, whose reader answers them while
// nobody calls Next, keeps its conversation, and the answer goes on after
// continue.
func TestPingsKeepAPausedConversation(t *testing.T) {
	// The client has a ping interval to answer each ping in: 100ms, not
	// less, or a loaded machine's scheduling alone misses it.
	s := startWith(t, engine.Config{Parallel: 1}, voice.Options{PingInterval: 100 * time.Millisecond})
	eng := s.eng
	c := s.dial(t)
	ctx := context.Background()
	if err := c.Create(ctx, user("Tell me a story.", 60)); err != nil {
		t.Fatal(err)
	}
	next(t, c)
	if ev := next(t, c); ev.Type != voice.TypeChunk {
		t.Fatalf("event %+v", ev)
	}
	waitStats(t, eng, "the answer to pause", func(st engine.Stats) bool { return st.SlotsPaused == 1 })
	time.Sleep(time.Second) // the pause under test (a listener hearing the chunk, ten pings), not a synchronisation
	if err := c.Continue(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, c); ev.Type != voice.TypeChunk && ev.Type != voice.TypeDone {
		t.Fatalf("after a pause with pings: %+v", ev)
	}
}

// TestSilentClientIsInterrupted: a client that stops reading (a raw
// socket: voice.Client always reads) answers no ping; the server closes
// its socket, which interrupts the paused answer long before its pause
// timeout.
func TestSilentClientIsInterrupted(t *testing.T) {
	s := startWith(t, engine.Config{Parallel: 1}, voice.Options{PingInterval: 10 * time.Millisecond})
	eng := s.eng
	ctx := context.Background()
	conn, _, err := websocket.Dial(ctx, s.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	turn := user("Tell me a story.", 60)
	turn["type"] = voice.TypeCreate
	turn["chunking"] = map[string]any{"pause_timeout": 3600}
	b, _ := json.Marshal(turn)
	if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
	for range 2 { // response.created, then the first chunk; then it reads nothing
		if _, _, err := conn.Read(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitStats(t, eng, "the silent client's answer to be interrupted", func(st engine.Stats) bool {
		return st.Paced.Interrupted == 1 && st.SlotsBusy == 0
	})
}

// TestLongConversationForgetsItsStart: a conversation that outgrows the
// slot's context drops its oldest messages, not the system message, and
// every turn is answered (answer's done arrives, no error event).
func TestLongConversationForgetsItsStart(t *testing.T) {
	s := start(t, engine.Config{Parallel: 1, CtxSize: 192})
	c := s.dial(t)
	turn := user("Tell me a story.", 40)
	turn["messages"] = []wire.Message{{Role: "system", Content: "You tell stories."}, {Role: "user", Content: "Tell me a story."}}
	forgot := false
	prev := 0
	slot := s.eng.Info().CtxPerRequest // llama.cpp rounds the context up
	for i := range 8 {
		_, done := answer(t, c, turn, -1, 0)
		p := done.Usage.PromptTokens
		if p >= slot {
			t.Fatalf("turn %d: a prompt of %d tokens in a %d-token slot", i, p, slot)
		}
		forgot = forgot || p < prev
		prev = p
		turn = user(fmt.Sprintf("And then, part %d?", i+2), 40)
	}
	if !forgot {
		t.Fatal("no turn's prompt was shorter than the one before: nothing was forgotten")
	}
}
