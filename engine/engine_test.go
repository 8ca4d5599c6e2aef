package engine_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// goldens are ../shared/models/GOLDEN.md, in its order.
var goldens = testmodel.Goldens

func newEngine(t *testing.T, model string, cfg engine.Config) *engine.Engine {
	t.Helper()
	cfg.ModelPath = testmodel.Path(t, model)
	if cfg.Threads == 0 {
		cfg.Threads = testThreads
	}
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// collect reads a stream to the end.
func collect(t testing.TB, s *engine.Stream) (string, engine.Result) {
	t.Helper()
	var b strings.Builder
	for {
		c, err := s.Recv(context.Background())
		if errors.Is(err, io.EOF) {
			return b.String(), s.Result()
		}
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(c.Text)
	}
}

func greedy(prompt string, n int) engine.Request {
	return engine.Request{Prompt: prompt, AddSpecial: true, ParseSpecial: true, MaxTokens: n, IgnoreEOS: true}
}

func TestGoldenAloneAndBatched(t *testing.T) {
	for _, model := range []string{testmodel.Stories260K, testmodel.TinyStories656K} {
		e := newEngine(t, model, engine.Config{Parallel: 4, BatchSize: 64})
		cases := testmodel.GoldensFor(model)
		// Alone: one request at a time.
		for _, g := range cases {
			s, err := e.Submit(context.Background(), greedy(g.Prompt, g.N))
			if err != nil {
				t.Fatal(err)
			}
			got, res := collect(t, s)
			if got != g.Want {
				t.Errorf("%s %q alone:\n got %q\nwant %q", model, g.Prompt, got, g.Want)
			}
			if res.FinishReason != engine.FinishLength || res.Usage.CompletionTokens != g.N {
				t.Errorf("%s %q: finish %s after %d tokens, want length after %d", model, g.Prompt, res.FinishReason, res.Usage.CompletionTokens, g.N)
			}
		}
		// Batched: every case three times at once, with different slots
		// holding different caches.
		var wg sync.WaitGroup
		for range 3 {
			for _, g := range cases {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, err := e.Submit(context.Background(), greedy(g.Prompt, g.N))
					if err != nil {
						t.Error(err)
						return
					}
					if got, _ := collect(t, s); got != g.Want {
						t.Errorf("%s %q batched:\n got %q\nwant %q", model, g.Prompt, got, g.Want)
					}
				}()
			}
		}
		wg.Wait()
	}
}

func TestSixteenStreamsOnFourSlots(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 4})
	want := goldens[4].Want
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := e.Submit(context.Background(), greedy("Hello", 16))
			if err != nil {
				t.Error(err)
				return
			}
			got, res := collect(t, s)
			if got != want || res.FinishReason != engine.FinishLength {
				t.Errorf("stream %d: %q (%s), want %q", i, got, res.FinishReason, want)
			}
		}()
	}
	wg.Wait()
	waitIdle(t, e)
}

// waitIdle polls the scheduler's slot view until no slot is processing.
func waitIdle(t *testing.T, e *engine.Engine) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		slots, err := e.Slots(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		busy := 0
		for _, s := range slots {
			if s.IsProcessing {
				busy++
			}
		}
		if busy == 0 && e.Stats().QueueDepth == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d slots still busy: %+v", busy, slots)
		}
	}
}

func TestInterleaving(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 2})
	long, err := e.Submit(context.Background(), greedy("Once upon a time", 1500))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := long.Recv(context.Background()); err != nil {
		t.Fatal(err)
	}
	short, err := e.Submit(context.Background(), greedy("Hello", 4))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := short.Recv(context.Background()); err != nil {
		t.Fatal(err)
	}
	if long.Done() {
		t.Fatal("the long generation finished before the second request's first token")
	}
	long.Cancel()
	collect(t, long)
	collect(t, short)
}

func TestCancelWhileQueued(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	busy, err := e.Submit(context.Background(), greedy("Once upon a time", 1500))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := busy.Recv(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	queued, err := e.Submit(ctx, greedy("Hello", 8))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	got, res := collect(t, queued)
	if got != "" || res.FinishReason != engine.FinishCancelled || res.Usage.CompletionTokens != 0 || res.Slot != -1 {
		t.Fatalf("queued request after cancel: text %q, result %+v", got, res)
	}
	busy.Cancel()
	collect(t, busy)
	waitIdle(t, e)
}

func TestCancelWhilePrefilling(t *testing.T) {
	// A small step budget turns a long prompt into hundreds of steps.
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 1, BatchSize: 4})
	prompt := strings.Repeat("The little dog ran to the park. ", 70)
	s, err := e.Submit(context.Background(), greedy(prompt, 8))
	if err != nil {
		t.Fatal(err)
	}
	if s.PromptTokens() < 400 {
		t.Fatalf("prompt has only %d tokens", s.PromptTokens())
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		slots, err := e.Slots(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if slots[0].State == "prefill" {
			break
		}
		if s.Done() || time.Now().After(deadline) {
			t.Fatalf("never observed the prefill state: %+v", slots)
		}
	}
	s.Cancel()
	got, res := collect(t, s)
	if got != "" || res.FinishReason != engine.FinishCancelled || res.Usage.CompletionTokens != 0 {
		t.Fatalf("after cancel during prefill: text %q, result %+v", got, res)
	}
	waitIdle(t, e)
	// The slot works afterwards and reuses what was evaluated.
	s, err = e.Submit(context.Background(), greedy("Hello", 16))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := collect(t, s); got != goldens[1].Want {
		t.Fatalf("after a cancelled prefill: %q, want %q", got, goldens[1].Want)
	}
}

func TestCancelWhileDecoding(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 2})
	s, err := e.Submit(context.Background(), greedy("Once upon a time", 1500))
	if err != nil {
		t.Fatal(err)
	}
	received := 0
	for received < 3 {
		c, err := s.Recv(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		received += c.Tokens
	}
	s.Cancel()
	_, res := collect(t, s)
	if res.FinishReason != engine.FinishCancelled {
		t.Fatalf("finish reason %s, want cancelled", res.FinishReason)
	}
	if res.Usage.CompletionTokens >= 1500 {
		t.Fatalf("generation ran to the end (%d tokens) after cancel", res.Usage.CompletionTokens)
	}
	waitIdle(t, e)
	before := e.Stats().TokensOut
	waitIdle(t, e)
	if after := e.Stats().TokensOut; after != before {
		t.Fatalf("tokens produced after the cancelled request finished: %d → %d", before, after)
	}
}

func TestRandomCancelsLeaveNoBusySlot(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 4, MaxQueue: 512})
	rng := rand.New(rand.NewPCG(1, 2))
	var wg sync.WaitGroup
	for i := range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := e.Submit(ctx, greedy("Once upon a time", 20+rng.IntN(100)))
		if err != nil {
			t.Fatal(err)
		}
		after := rng.IntN(6) // cancel after this many chunks (0: at once)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			for n := 0; ; n++ {
				if n == after {
					cancel()
				}
				if _, err := s.Recv(context.Background()); err != nil {
					if !errors.Is(err, io.EOF) {
						t.Errorf("request %d: %v", i, err)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	waitIdle(t, e)
	if st := e.Stats(); st.SlotsBusy != 0 || st.QueueDepth != 0 {
		t.Fatalf("after 200 random cancels: %+v", st)
	}
}

func TestQueueFull(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 1, MaxQueue: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streams []*engine.Stream
	var full error
	for range 10 {
		s, err := e.Submit(ctx, greedy("Once upon a time", 1500))
		if err != nil {
			full = err
			break
		}
		streams = append(streams, s)
	}
	if !errors.Is(full, engine.ErrQueueFull) {
		t.Fatalf("got %v after %d submissions, want ErrQueueFull", full, len(streams))
	}
	cancel()
	for _, s := range streams {
		collect(t, s)
	}
	s, err := e.Submit(context.Background(), greedy("Hello", 16))
	if err != nil {
		t.Fatalf("after the queue drained: %v", err)
	}
	if got, _ := collect(t, s); got != goldens[1].Want {
		t.Fatalf("got %q", got)
	}
}

func TestPromptCacheReuse(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	s, _ := e.Submit(context.Background(), greedy("Once upon a time", 8))
	_, first := collect(t, s)
	if first.Usage.CachedTokens != 0 {
		t.Fatalf("first request reused %d tokens from an empty cache", first.Usage.CachedTokens)
	}
	s, _ = e.Submit(context.Background(), greedy("Once upon a time", 60))
	got, second := collect(t, s)
	if second.Usage.CachedTokens != second.Usage.PromptTokens-1 {
		t.Fatalf("cached %d of %d prompt tokens, want all but the last", second.Usage.CachedTokens, second.Usage.PromptTokens)
	}
	if got != goldens[0].Want {
		t.Fatalf("output with a reused prefix differs:\n got %q\nwant %q", got, goldens[0].Want)
	}
	s, _ = e.Submit(context.Background(), engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 4, NoCachePrompt: true})
	if _, r := collect(t, s); r.Usage.CachedTokens != 0 {
		t.Fatalf("NoCachePrompt reused %d tokens", r.Usage.CachedTokens)
	}
}

func TestStopStringAndEOG(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 2})
	req := greedy("Once upon a time", 60)
	req.Stop = []string{"Lily"}
	s, _ := e.Submit(context.Background(), req)
	got, res := collect(t, s)
	if got != ", there was a little girl named " || res.FinishReason != engine.FinishStop || res.StopWord != "Lily" {
		t.Fatalf("stop: %q %+v", got, res)
	}
	// Without ignore_eos the model may end on its own; the end token is
	// never part of the text, and the reason is stop or length.
	req = greedy("Hello", 400)
	req.IgnoreEOS = false
	s, _ = e.Submit(context.Background(), req)
	got, res = collect(t, s)
	if strings.Contains(got, "</s>") || (res.FinishReason != engine.FinishStop && res.FinishReason != engine.FinishLength) {
		t.Fatalf("eog: %q %+v", got, res)
	}
}

func TestContextFullFinishesWithLength(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, CtxSize: 256})
	s, err := e.Submit(context.Background(), greedy("Once upon a time", 10000))
	if err != nil {
		t.Fatal(err)
	}
	_, res := collect(t, s)
	slotCtx := e.Info().SlotCtx
	if res.FinishReason != engine.FinishLength || res.Usage.PromptTokens+res.Usage.CompletionTokens != slotCtx+1 {
		t.Fatalf("context %d: %+v", slotCtx, res)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 2})
	long := strings.Repeat("Once upon a time there was a dog. ", 200)
	for _, c := range []struct {
		name string
		req  engine.Request
		want error
	}{
		{"empty", engine.Request{Prompt: ""}, engine.ErrEmptyPrompt},
		{"too long", engine.Request{Prompt: long, AddSpecial: true}, engine.ErrPromptTooLong},
		{"bad slot", engine.Request{Prompt: "Hi", PinSlot: true, SlotID: 7}, engine.ErrBadSlot},
		{"bad token", engine.Request{Tokens: []int32{1, 99999}}, engine.ErrBadToken},
		{"bad grammar", engine.Request{Prompt: "Hi", Grammar: "root ::= ("}, engine.ErrGrammar},
	} {
		if _, err := e.Submit(context.Background(), c.req); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	waitIdle(t, e)
}

func TestGrammarConstrainsOutput(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	req := greedy("Once upon a time", 40)
	req.IgnoreEOS = false
	req.Grammar = `root ::= "yes" | "no"`
	s, err := e.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	got, res := collect(t, s)
	if got != "yes" && got != "no" {
		t.Fatalf("grammar output %q (%s)", got, res.FinishReason)
	}
}

func TestCloseFinishesEverything(t *testing.T) {
	cfg := engine.Config{ModelPath: testmodel.Path(t, testmodel.Stories260K), Parallel: 1, Threads: testThreads}
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	running, _ := e.Submit(context.Background(), greedy("Once upon a time", 1500))
	queued, _ := e.Submit(context.Background(), greedy("Hello", 8))
	if _, err := running.Recv(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.Close()
	for _, s := range []*engine.Stream{running, queued} {
		_, res := collect(t, s)
		if res.FinishReason != engine.FinishCancelled || !errors.Is(res.Err, engine.ErrClosed) {
			t.Fatalf("after Close: %+v", res)
		}
	}
	if _, err := e.Submit(context.Background(), greedy("Hello", 1)); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
}

// testThreads keeps compute single-threaded in tests: the test models are
// tiny, and ggml's spinning thread barriers crawl on a loaded 2-core CI box.
const testThreads = 1

func TestGrammarTheVocabCannotSatisfyIsAnError(t *testing.T) {
	// tinystories-656k has no token that starts with "{": a JSON grammar
	// leaves no candidate. That must fail the request, not abort the process.
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	for _, temp := range []float32{0, 0.8} {
		req := greedy("Once upon a time", 8)
		req.Grammar = `root ::= "{" [a-z]* "}"`
		req.Sampling.Temperature = temp
		s, err := e.Submit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		_, res := collect(t, s)
		if res.FinishReason != engine.FinishError || res.Err == nil {
			t.Fatalf("temperature %v: %+v, want an error", temp, res)
		}
	}
	s, _ := e.Submit(context.Background(), greedy("Hello", 16))
	if got, _ := collect(t, s); got != goldens[4].Want {
		t.Fatalf("engine unusable afterwards: %q", got)
	}
}
