package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
)

func TestMain(m *testing.M) {
	testsynth.PinGoldenCPU()
	goleak.VerifyTestMain(m)
}

// goldens are ../shared/models/GOLDEN.md, in its order.
var goldens = testmodel.Goldens

func newEngine(t *testing.T, model string, cfg engine.Config) *engine.Engine {
	t.Helper()
	cfg.ModelPath = testmodel.Path(t, model)
	return startEngine(t, cfg)
}

// startEngine starts an engine with cfg (testThreads threads unless it
// says), closed when the test ends.
func startEngine(t *testing.T, cfg engine.Config) *engine.Engine {
	t.Helper()
	if cfg.Threads == 0 {
		cfg.Threads = testThreads
	}
	e, err := engine.New(context.Background(), cfg)
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

// submit submits req, failing t with Submit's error.
func submit(t testing.TB, e *engine.Engine, req engine.Request) *engine.Stream {
	t.Helper()
	s, err := e.Submit(context.Background(), req)
	if err != nil {
		t.Fatalf("Submit %q: %v", req.Prompt, err)
	}
	return s
}

func greedy(prompt string, n int) engine.Request {
	return engine.Request{Prompt: prompt, AddSpecial: true, ParseSpecial: true, MaxTokens: n, IgnoreEOS: true}
}

// TestGoldenAloneAndBatched: the engine reproduces llama.cpp's greedy
// outputs byte for byte, one request at a time, and batched: every case
// three times at once in one unified cache, identical prompts sharing
// their prefix cells across slots, prompt chunks and decode tokens mixed
// in each step's single forward pass.
//
// Batched outputs are exact while each sequence's cells are in position
// order, as they are in a cache whose cells were never freed: llama.cpp's
// CPU attention accumulates (in F16) over a sequence's cells in cell
// order, so once freed cells are reused out of order the same request can
// differ in the last bits, and a near-tie between two tokens can flip
// (measured: "The little dog" on the Q8_0 model, after about 50 tokens).
// Hence a fresh engine with a slot for every batched request.
func TestGoldenAloneAndBatched(t *testing.T) {
	for _, model := range []string{testmodel.Stories260K, testmodel.TinyStories656K} {
		cases := testmodel.GoldensFor(model)
		e := newEngine(t, model, engine.Config{Parallel: 4, BatchSize: 64})
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
		e.Close()

		const copies = 3
		e = newEngine(t, model, engine.Config{Parallel: copies * len(cases), BatchSize: 64})
		var wg sync.WaitGroup
		var shared atomic.Int64
		for range copies {
			for _, g := range cases {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, err := e.Submit(context.Background(), greedy(g.Prompt, g.N))
					if err != nil {
						t.Error(err)
						return
					}
					got, res := collect(t, s)
					if got != g.Want {
						t.Errorf("%s %q batched:\n got %q\nwant %q", model, g.Prompt, got, g.Want)
					}
					shared.Add(int64(res.Usage.CachedTokens))
				}()
			}
		}
		wg.Wait()
		st := e.Stats()
		if st.ForwardPasses != st.Steps+st.SplitSteps || st.StepOwnTime <= 0 {
			t.Errorf("%s: %d forward passes in %d steps (%d split), want one per step, two per split step; the scheduler's own time %v", model, st.ForwardPasses, st.Steps, st.SplitSteps, st.StepOwnTime)
		}
		t.Logf("%s batched: %d steps, %d prompt tokens found cached in other slots", model, st.Steps, shared.Load())
		e.Close()
	}
}

// TestSixteenStreamsOnFourSlots: 16 requests on 4 slots all finish with
// the greedy text. Their first 12 tokens only: once slots are reused, a
// sequence's cells are no longer in position order and the attention sums
// (F16) change in the last bits (see TestGoldenAloneAndBatched); the 14th
// token of this golden is a near tie ("sitting" or "flying") that then
// flips about once in 30 runs.
func TestSixteenStreamsOnFourSlots(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 4})
	want := goldens[4].Want
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := e.Submit(context.Background(), greedy("Hello", 12))
			if err != nil {
				t.Error(err)
				return
			}
			got, res := collect(t, s)
			if !strings.HasPrefix(want, got) || len(got) < len(want)/2 || res.FinishReason != engine.FinishLength {
				t.Errorf("stream %d: %q (%s), want the start of %q", i, got, res.FinishReason, want)
			}
		}()
	}
	wg.Wait()
	waitIdle(t, e)
}

// pollEvery is the pause between two looks at the engine's state: polls
// must not spin, the decode threads need the cores.
const pollEvery = 2 * time.Millisecond

// pollDeadline bounds every poll; generous, for a loaded CI machine.
const pollDeadline = time.Minute

// poll calls check every pollEvery until it reports done, failing t with
// what it last reported once pollDeadline has passed.
func poll(t *testing.T, what string, check func() (done bool, state string)) {
	t.Helper()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	deadline := time.NewTimer(pollDeadline)
	defer deadline.Stop()
	for {
		done, state := check()
		if done {
			return
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("%s: still not the case after %s: %s", what, pollDeadline, state)
		}
	}
}

// waitIdle polls the scheduler's slot view until no slot is processing
// and nothing is queued.
func waitIdle(t *testing.T, e *engine.Engine) {
	t.Helper()
	poll(t, "waiting for the engine to go idle", func() (bool, string) {
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
		q := e.Stats().QueueDepth
		return busy == 0 && q == 0, fmt.Sprintf("%d slots busy, %d queued: %+v", busy, q, slots)
	})
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
	poll(t, "waiting for the prefill state", func() (bool, string) {
		slots, err := e.Slots(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if slots[0].State == "prefill" {
			return true, ""
		}
		if s.Done() {
			t.Fatalf("the request finished before its prefill was observed: %+v", slots)
		}
		return false, fmt.Sprintf("%+v", slots)
	})
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
	// The only request on this engine: its completion tokens are all the
	// engine's TokensOut.
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 2})
	const maxTokens = 1500
	s := submit(t, e, greedy("Once upon a time", maxTokens))
	received := 0
	for received < 3 {
		c, err := s.Recv(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		received += c.Tokens
	}
	published := e.Stats().TokensOut // tokens generated by the last finished step
	s.Cancel()
	// The scheduler's view after Cancel: a slot still decoding has at most
	// one step in flight, and the next step boundary retires it.
	slots, err := e.Slots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sl := slots[0]
	if sl.RequestID != s.ID() {
		sl = slots[1]
	}
	active := sl.IsProcessing && sl.RequestID == s.ID()

	// Read the stream after Cancel to its end.
	after := 0
	for {
		c, err := s.Recv(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		after += c.Tokens
	}
	res := s.Result()
	n := res.Usage.CompletionTokens
	t.Logf("%d tokens read before Cancel, %d published at Cancel, slot after Cancel: active %v decoded %d; %d tokens read after, %d in all",
		received, published, active, sl.Decoded, after, n)
	if res.FinishReason != engine.FinishCancelled {
		t.Fatalf("finish reason %s after %d tokens, want cancelled", res.FinishReason, n)
	}
	if received+after != n {
		t.Fatalf("the stream delivered %d tokens, the result counts %d", received+after, n)
	}
	// No token beyond those in flight at Cancel: with the slot seen busy
	// after Cancel, at most the step it was computing; otherwise it was
	// already retired, at most a few steps after the last published count
	// (slack for the test goroutine being descheduled around Cancel).
	if active && n > sl.Decoded+1 {
		t.Fatalf("%d tokens generated, but the slot had %d after Cancel: generation went on", n, sl.Decoded)
	}
	const slack = 32
	if n > int(published)+slack {
		t.Fatalf("%d tokens generated, %d had been published at Cancel: generation went on", n, published)
	}
	// The count stops growing: the slot is idle and the engine generates
	// nothing more.
	waitIdle(t, e)
	poll(t, "waiting for the stats to show the final count", func() (bool, string) {
		out := e.Stats().TokensOut
		return out >= uint64(n), fmt.Sprintf("TokensOut %d, want %d", out, n)
	})
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for range 25 { // 50 ms: a slot still decoding adds tokens every step
		if out := e.Stats().TokensOut; out != uint64(n) {
			t.Fatalf("the engine generated %d tokens, the cancelled request %d: decoding went on after it finished", out, n)
		}
		<-tick.C
	}
}

func TestRandomCancelsLeaveNoBusySlot(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 4, MaxQueue: 512})
	cancelAtRandom(t, e, rand.New(rand.NewPCG(1, 2)), 200, []string{"Once upon a time"}, 20, 100, 6)
	waitIdle(t, e)
	if st := e.Stats(); st.SlotsBusy != 0 || st.QueueDepth != 0 {
		t.Fatalf("after 200 random cancels: %+v", st)
	}
}

// cancelAtRandom submits n greedy requests, each of a prompt drawn from
// prompts and of minTokens to minTokens+spread-1 tokens, cancelled after
// 0 to chunks-1 of its chunks (0: at once), and waits until every stream
// has ended with io.EOF.
func cancelAtRandom(t *testing.T, e *engine.Engine, rng *rand.Rand, n int, prompts []string, minTokens, spread, chunks int) {
	t.Helper()
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := e.Submit(ctx, greedy(prompts[rng.IntN(len(prompts))], minTokens+rng.IntN(spread)))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		after := rng.IntN(chunks)
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
	s := submit(t, e, greedy("Once upon a time", 8))
	_, first := collect(t, s)
	if first.Usage.CachedTokens != 0 {
		t.Fatalf("first request reused %d tokens from an empty cache", first.Usage.CachedTokens)
	}
	s = submit(t, e, greedy("Once upon a time", 60))
	got, second := collect(t, s)
	if second.Usage.CachedTokens != second.Usage.PromptTokens-1 {
		t.Fatalf("cached %d of %d prompt tokens, want all but the last", second.Usage.CachedTokens, second.Usage.PromptTokens)
	}
	if got != goldens[0].Want {
		t.Fatalf("output with a reused prefix differs:\n got %q\nwant %q", got, goldens[0].Want)
	}
	s = submit(t, e, engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 4, NoCachePrompt: true})
	if _, r := collect(t, s); r.Usage.CachedTokens != 0 {
		t.Fatalf("NoCachePrompt reused %d tokens", r.Usage.CachedTokens)
	}
}

// eogText is TinyStories656K's whole greedy continuation of "Once upon a
// time" (GOLDEN.md's first 32 tokens, then on) up to its end-of-story
// token, reached after 107 tokens. The model spells "<|end_story|>" out
// in plain tokens before the end token itself.
const (
	eogText = ", a little girl named Lily lived in a small house. She loved to eat yummy food. " +
		"One day, she saw a small bird on the ground. The bird was sad because it could not eat it.\n" +
		"Lily wanted to help the bird. She tried to eat the food and get the food to reach the bird. " +
		"The bird tried to eat the food and get the food to reach the bird. The bird was fresh and flew away.\n" +
		"Lily felt sad for the bird. She felt sad for the bird. She said, \"Thank you, cat! You are a good friend.\" " +
		"Lily felt good and said, \"You're welcome, little bird. I will help you find your food.\" " +
		"They both sat under the tree. They became good friends and played together every day.<|end_story|>"
	eogTokens = 107
)

func TestStopStringAndEOG(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 2})
	g := goldens[3] // TinyStories656K, "Once upon a time", 32 tokens
	if g.Model != testmodel.TinyStories656K || g.Prompt != "Once upon a time" || !strings.HasPrefix(eogText, g.Want) {
		t.Fatalf("golden %+v is not the start of this test's continuation", g)
	}
	// A stop string inside the golden text: the text before it, then stop.
	const stop = " bird"
	before, _, ok := strings.Cut(g.Want, stop)
	if !ok {
		t.Fatalf("%q is not in the golden text %q", stop, g.Want)
	}
	req := greedy(g.Prompt, g.N)
	req.Stop = []string{"a dragon", stop}
	got, res := collect(t, submit(t, e, req))
	if got != before || res.FinishReason != engine.FinishStop || res.StopWord != stop {
		t.Fatalf("stop %q:\n got %q %+v\nwant %q, finish stop, stop word %q", stop, got, res, before, stop)
	}
	// Without ignore_eos the model ends the story on its own after
	// eogTokens tokens: stop with no stop word, the end token neither in
	// the text nor in the count.
	req = greedy(g.Prompt, 400)
	req.IgnoreEOS = false
	got, res = collect(t, submit(t, e, req))
	if got != eogText || res.FinishReason != engine.FinishStop || res.StopWord != "" || res.Usage.CompletionTokens != eogTokens {
		t.Fatalf("end of generation:\n got %q %+v\nwant %q, finish stop after %d tokens", got, res, eogText, eogTokens)
	}
}

func TestContextFullFinishesWithLength(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, CtxSize: 256})
	s, err := e.Submit(context.Background(), greedy("Once upon a time", 10000))
	if err != nil {
		t.Fatal(err)
	}
	_, res := collect(t, s)
	slotCtx := e.Info().CtxPerRequest
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

// TestPromptTooLongCounts: a prompt over the context is a
// *PromptTooLongError with its exact count of tokens and the most a
// prompt may have (the context per request less the first generated
// token's cell), whichever way it was tokenized: llama.cpp's own path,
// the path that keeps client text plain, token ids, after a prefix.
func TestPromptTooLongCounts(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, CtxSize: 256})
	max := e.Info().CtxPerRequest - 1
	long := strings.Repeat("Once upon a time there was a dog. ", 200)
	count := func(text string, bos bool) int {
		toks, err := e.Tokenize(text, bos, false)
		if err != nil {
			t.Fatal(err)
		}
		return len(toks)
	}
	// Client text that spells a special token, kept plain: the tokenizer
	// splits the prompt itself.
	special := long + e.TokenPiece(e.Info().EOS) + long
	ids := make([]int32, max+1)
	for i := range ids {
		ids[i] = 100
	}
	for _, c := range []struct {
		name string
		req  engine.Request
		want int
	}{
		{"text", engine.Request{Prompt: long, AddSpecial: true}, count(long, true)},
		{"plain spans", engine.Request{Prompt: special, AddSpecial: true, ParseSpecial: true, Plain: []engine.Span{{Start: 0, End: len(special)}}}, count(special, true)},
		{"token ids, one too many", engine.Request{Tokens: ids}, max + 1},
		{"a prefix", engine.Request{Prefix: ids[:100], Prompt: long}, 100 + count(long, false)},
		{"a prefix that fills the context", engine.Request{Prefix: ids[:max], Prompt: "Once upon a time"}, max + count("Once upon a time", false)},
	} {
		_, err := e.Submit(context.Background(), c.req)
		var pt *engine.PromptTooLongError
		if !errors.As(err, &pt) || !errors.Is(err, engine.ErrPromptTooLong) || pt.Tokens != c.want || pt.Max != max {
			t.Errorf("%s: %v (%+v), want %d tokens, at most %d", c.name, err, pt, c.want, max)
		}
	}
	// The most a prompt may have is served.
	if _, res := collect(t, submit(t, e, engine.Request{Tokens: ids[:max], MaxTokens: 4})); res.FinishReason != engine.FinishLength || res.Usage.PromptTokens != max {
		t.Errorf("a prompt of %d tokens: %+v", max, res)
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
	e, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	running := submit(t, e, greedy("Once upon a time", 1500))
	queued := submit(t, e, greedy("Hello", 8))
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
	// tinystories-656k has no token that starts with "{": no token can
	// start a JSON grammar. Submit refuses it (a 400 over HTTP); it must
	// never abort the process.
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	for _, temp := range []float32{0, 0.8} {
		// Neither "{" first nor "{" after text the vocabulary can write,
		// as in a forced tool call.
		for _, g := range []string{`root ::= "{" [a-z]* "}"`, `root ::= "<tool_call>\n{" [a-z]* "}"`} {
			req := greedy("Once upon a time", 8)
			req.Grammar = g
			req.Sampling.Temperature = temp
			_, err := e.Submit(context.Background(), req)
			var ue *engine.UnsatisfiableError
			if !errors.Is(err, engine.ErrGrammar) || !errors.As(err, &ue) || !errors.Is(err, engine.ErrGrammarUnsatisfiable) {
				t.Fatalf("temperature %v, %s: Submit error %v, want ErrGrammar and ErrGrammarUnsatisfiable", temp, g, err)
			}
		}
	}
	s := submit(t, e, greedy("Hello", 16))
	if got, _ := collect(t, s); got != goldens[4].Want {
		t.Fatalf("engine unusable afterwards: %q", got)
	}
}

// TestGrammarTheVocabCannotContinueEndsTheAnswer: a grammar that reaches
// a point no token of the vocabulary continues ends the answer there with
// FinishError and an *UnsatisfiableError naming the text it needed, after
// the text written before; the engine goes on serving.
func TestGrammarTheVocabCannotContinueEndsTheAnswer(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	for _, temp := range []float32{0, 0.8} {
		req := greedy("Once upon a time", 8)
		req.Grammar = `root ::= ("a" | "b") "{"`
		req.Sampling = engine.Sampling{Temperature: temp, Seed: 3}
		got, res := collect(t, submit(t, e, req))
		var ue *engine.UnsatisfiableError
		if (got != "a" && got != "b") || res.FinishReason != engine.FinishError || !errors.As(res.Err, &ue) || !strings.Contains(ue.Reason, `"{"`) {
			t.Fatalf("temperature %v: %q, %s, %v; want a or b, then ErrGrammarUnsatisfiable naming \"{\"", temp, got, res.FinishReason, res.Err)
		}
	}
	if got, _ := collect(t, submit(t, e, greedy("Hello", 16))); got != goldens[4].Want {
		t.Fatalf("engine unusable afterwards: %q", got)
	}
}
