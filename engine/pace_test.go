package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
)

// storyPrompt makes TinyStories656K tell a story of many sentences. Its
// tokens are a prefix of the tokens of itself followed by what the model
// writes (not so for "Once upon a time").
const storyPrompt = "Lily and Tom went to the park.\n"

// pacedStory is a greedy paced request for storyPrompt.
func pacedStory(n int) engine.Request {
	req := greedy(storyPrompt, n)
	req.IgnoreEOS = false
	req.Chunking = &engine.Chunking{}
	return req
}

// nextChunk receives one chunk of a paced stream (io.EOF at the end).
func nextChunk(t *testing.T, s *engine.Stream) (engine.Chunk, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pollDeadline)
	defer cancel()
	c, err := s.Recv(ctx)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("Recv: %v", err)
	}
	return c, err
}

// pace reads a paced stream to the end, from chunk index from on,
// continuing after every chunk, and checks the chunks' indexes and flags.
func pace(t *testing.T, s *engine.Stream, from int) ([]engine.Chunk, engine.Result) {
	t.Helper()
	var cs []engine.Chunk
	for {
		c, err := nextChunk(t, s)
		if err == io.EOF {
			res := s.Result()
			if n := len(cs); n > 0 && !cs[n-1].Last && res.FinishReason != engine.FinishPauseTimeout {
				t.Errorf("the final chunk is not marked Last: %+v", cs[n-1])
			}
			if res.Chunks != from+len(cs) {
				t.Errorf("Result.Chunks = %d, received %d after %d", res.Chunks, len(cs), from)
			}
			return cs, res
		}
		if c.Index != from+len(cs) {
			t.Fatalf("chunk %d has index %d", from+len(cs), c.Index)
		}
		if strings.TrimSpace(c.Text) == "" {
			t.Errorf("chunk %d is blank: %q", c.Index, c.Text)
		}
		cs = append(cs, c)
		if c.Held {
			s.Continue(c.Index)
		}
	}
}

func joined(cs []engine.Chunk) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString(c.Text)
	}
	return b.String()
}

// slotOf returns the slot serving request id.
func slotOf(t *testing.T, e *engine.Engine, id uint64) engine.SlotInfo {
	t.Helper()
	infos, err := e.Slots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if in.RequestID == id {
			return in
		}
	}
	t.Fatalf("no slot serves request %d: %+v", id, infos)
	return engine.SlotInfo{}
}

// waitPaused polls until request s is paused in its slot.
func waitPaused(t *testing.T, e *engine.Engine, s *engine.Stream) engine.SlotInfo {
	t.Helper()
	var in engine.SlotInfo
	poll(t, fmt.Sprintf("waiting for request %d to pause", s.ID()), func() (bool, string) {
		infos, _ := e.Slots(context.Background())
		for _, in = range infos {
			if in.RequestID == s.ID() && in.State == "paused" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", infos)
	})
	return in
}

// TestPacedEqualsUnpaced: the chunks of a paced greedy response,
// concatenated, are the unpaced response, and it evaluates exactly as many
// tokens: pausing re-evaluates nothing. Chunks end at sentence ends.
func TestPacedEqualsUnpaced(t *testing.T) {
	model := testmodel.TinyStories656K
	req := pacedStory(120)
	e := newEngine(t, model, engine.Config{Parallel: 1})
	cs, res := pace(t, submit(t, e, req), 0)

	plain := req
	plain.Chunking = nil
	u := newEngine(t, model, engine.Config{Parallel: 1})
	want, wres := collect(t, submit(t, u, plain))

	if got := joined(cs); got != want {
		t.Fatalf("paced text differs from unpaced:\n got %q\nwant %q", got, want)
	}
	for _, c := range cs {
		t.Logf("chunk %d (%d tokens, held %v): %q", c.Index, c.Tokens, c.Held, c.Text)
	}
	if len(cs) < 4 {
		t.Fatalf("only %d chunks for %q", len(cs), want)
	}
	if res.Usage.EvaluatedTokens != wres.Usage.EvaluatedTokens || res.Usage.CompletionTokens != wres.Usage.CompletionTokens {
		t.Errorf("paced usage %+v, unpaced %+v: tokens evaluated again", res.Usage, wres.Usage)
	}
	for _, c := range cs[:len(cs)-1] {
		if !c.Held {
			t.Errorf("chunk %d %q was not held", c.Index, c.Text)
		}
		if end := strings.TrimRight(c.Text, " \n\"'"); !strings.HasSuffix(end, ".") && !strings.HasSuffix(end, "!") &&
			!strings.HasSuffix(end, "?") && !strings.HasSuffix(c.Text, "\n") {
			t.Errorf("chunk %d %q does not end a sentence or a line", c.Index, c.Text)
		}
	}
	if res.Timings.FirstChunk <= 0 || res.Timings.FirstChunk > res.Timings.Total {
		t.Errorf("time to first chunk %v of %v", res.Timings.FirstChunk, res.Timings.Total)
	}
	st := settled(t, e, 1)
	if st.Paced.Requests != 1 || st.Paced.Chunks != uint64(len(cs)) || st.Paced.Reevaluated != 0 || st.Paced.FirstChunkCount != 1 {
		t.Errorf("paced stats %+v after %d chunks", st.Paced, len(cs))
	}
	if st.ForwardPasses != st.Steps+st.SplitSteps {
		t.Errorf("%d forward passes in %d steps (%d split)", st.ForwardPasses, st.Steps, st.SplitSteps)
	}
}

// TestPausedSlotSitsOut: while a paced request is paused its slot keeps
// its cache and takes no part in the batches another request decodes in;
// Continue resumes it.
func TestPausedSlotSitsOut(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 2})
	p := submit(t, e, pacedStory(80))
	c, _ := nextChunk(t, p)
	if !c.Held {
		t.Fatalf("first chunk %+v not held", c)
	}
	before := waitPaused(t, e, p)
	stepsBefore := e.Stats().Steps
	other, res := collect(t, submit(t, e, greedy("Tom had a red ball", 40)))
	if res.Usage.CompletionTokens != 40 {
		t.Fatalf("the other request: %q %+v", other, res)
	}
	st := settled(t, e, 1) // and the slots' snapshot of the same step
	after := slotOf(t, e, p.ID())
	if after.State != "paused" || after.CachedTokens != before.CachedTokens || after.Decoded != before.Decoded {
		t.Fatalf("the paused slot moved while another request decoded: before %+v, after %+v", before, after)
	}
	if st.Steps < stepsBefore+40 || st.SlotsPaused != 1 {
		t.Fatalf("stats %+v: want 40 more steps than %d and one paused slot", st, stepsBefore)
	}
	p.Continue(c.Index)
	rest, r := pace(t, p, 1)
	if r.FinishReason != engine.FinishLength && r.FinishReason != engine.FinishStop || len(rest) == 0 {
		t.Fatalf("after Continue: %d chunks, %+v", len(rest), r)
	}
}

// TestPauseTimeout: a paced request nobody continues ends with
// FinishPauseTimeout, and its tokens stay cached: the prompt re-sent with
// the text so far is found in the cache.
func TestPauseTimeout(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	req := pacedStory(80)
	req.PauseTimeout = 20 * time.Millisecond
	s := submit(t, e, req)
	c, _ := nextChunk(t, s)
	if _, err := nextChunk(t, s); err != io.EOF {
		t.Fatal("a chunk after the pause that was not continued")
	}
	res := s.Result()
	if res.FinishReason != engine.FinishPauseTimeout || res.Chunks != 1 {
		t.Fatalf("result %+v, want pause_timeout after 1 chunk", res)
	}
	again := greedy(storyPrompt+c.Text, 4)
	prompt := tokens(t, e, again.Prompt)
	_, r := collect(t, submit(t, e, again))
	if r.Usage.CachedTokens <= len(tokens(t, e, storyPrompt)) {
		t.Fatalf("re-sent prompt of %d tokens found %d cached", len(prompt), r.Usage.CachedTokens)
	}
	if st := settled(t, e, 2); st.Paced.PauseTimeouts != 1 {
		t.Fatalf("stats %+v", st.Paced)
	}
}

// TestCancelPacedInEveryState: a paced request ends in one step when
// cancelled while queued behind a paused one, while paused, or after a
// Continue; no slot stays busy.
func TestCancelPacedInEveryState(t *testing.T) {
	// No grace ends in the test: the paused slot is not lent to a worse class.
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, PauseGrace: time.Hour})
	a := submit(t, e, pacedStory(200))
	c, _ := nextChunk(t, a)
	waitPaused(t, e, a)

	worse := pacedStory(200)
	worse.Priority = 1
	b := submit(t, e, worse) // queued: the only slot is paused, for a better class
	b.Cancel()
	if _, res := collect(t, b); res.FinishReason != engine.FinishCancelled || res.Usage.CompletionTokens != 0 {
		t.Fatalf("queued: %+v", res)
	}
	if in := slotOf(t, e, a.ID()); in.State != "paused" {
		t.Fatalf("the paused request lost its slot: %+v", in)
	}
	a.Continue(c.Index)
	a.Cancel()
	if _, res := collect(t, a); res.FinishReason != engine.FinishCancelled {
		t.Fatalf("continued then cancelled: %+v", res)
	}
	waitIdle(t, e)

	d := submit(t, e, pacedStory(200))
	nextChunk(t, d)
	waitPaused(t, e, d)
	d.Cancel()
	if _, res := collect(t, d); res.FinishReason != engine.FinishCancelled {
		t.Fatalf("paused: %+v", res)
	}
	waitIdle(t, e)
}

// TestInterruptKeepsWhatWasSpoken: after an interrupt the slot's cache
// holds the prompt and the tokens of the text that was spoken, no more;
// Result.History lists them, and the next turn sent as that history and
// new text finds them all cached (as text alone it would not: this
// model's greedy tokens are not what its tokenizer makes of their text).
func TestInterruptKeepsWhatWasSpoken(t *testing.T) {
	const story = storyPrompt
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	req := pacedStory(200)
	req.Prompt = story
	s := submit(t, e, req)
	first, _ := nextChunk(t, s)
	s.Continue(first.Index)
	if second, _ := nextChunk(t, s); !second.Held {
		t.Fatalf("second chunk %+v", second)
	}
	spoken := utf8.RuneCountInString(first.Text) + 3 // a few characters into the second chunk
	slot := slotOf(t, e, s.ID()).ID
	s.Interrupt(spoken)
	_, res := collect(t, s)
	if res.FinishReason != engine.FinishInterrupted || res.Chunks != 2 {
		t.Fatalf("result %+v", res)
	}
	prompt := tokens(t, e, story)
	settled(t, e, 1) // the slots' snapshot of the step that finished it
	infos, _ := e.Slots(context.Background())
	if got, want := infos[slot].CachedTokens, len(prompt)+first.Tokens; got != want {
		t.Errorf("after the interrupt the slot holds %d tokens, want the prompt and the first chunk: %d", got, want)
	}
	// The history: the same tokens, and the text they make (the chunk's
	// last character may belong to the token that follows).
	if n := utf8.RuneCountInString(first.Text); len(res.History) != len(prompt)+first.Tokens || res.HistoryChars > n || res.HistoryChars < n-2 {
		t.Errorf("history of %d tokens, %d characters; want %d, about %d", len(res.History), res.HistoryChars, len(prompt)+first.Tokens, n)
	}
	// The next turn, as the history's tokens (Request.Prefix) and text,
	// finds the whole history cached.
	cont := greedy("\nThe end.", 8)
	cont.Prefix = res.History
	if _, r := collect(t, submit(t, e, cont)); r.Usage.CachedTokens != len(res.History) {
		t.Errorf("the next turn as Prefix + text found %d tokens cached, want the %d of the history", r.Usage.CachedTokens, len(res.History))
	}
	if st := settled(t, e, 2); st.Paced.Interrupted != 1 {
		t.Errorf("stats %+v", st.Paced)
	}
}

// TestContinueAheadDoesNotPause: Continue with a chunk index not reached
// yet lets the request run through those chunks without pausing.
func TestContinueAheadDoesNotPause(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	// The paced request waits behind one that holds the only slot, so
	// that Continue is in place before its first chunk (a fast engine
	// could otherwise reach that chunk first and pause there).
	blocker := submit(t, e, greedy(storyPrompt, 1<<20))
	if _, err := blocker.Recv(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := submit(t, e, pacedStory(60))
	s.Continue(1 << 20)
	blocker.Cancel()
	collect(t, blocker)
	cs, res := pace(t, s, 0)
	for _, c := range cs {
		if c.Held {
			t.Errorf("chunk %d held after Continue ahead", c.Index)
		}
	}
	if len(cs) < 2 || res.Timings.Held != 0 {
		t.Errorf("%d chunks, held %v", len(cs), res.Timings.Held)
	}
}

// TestPausedRequestIsPreemptedFirst: a request of a better class takes
// the slot of a paused one, which continues afterwards with the text it
// would have had anyway.
func TestPausedRequestIsPreemptedFirst(t *testing.T) {
	req := pacedStory(100)
	req.Priority = 1
	got, want, res, _ := yieldWhilePaused(t, req, greedy("Tom had a red ball", 10))
	if res.Preemptions != 1 {
		t.Errorf("%d preemptions, want 1", res.Preemptions)
	}
	if got != want {
		t.Errorf("text after a preemption while paused:\n got %q\nwant %q", got, want)
	}
}

// yieldWhilePaused runs the paced req alone in a one-slot engine with a
// host cache until its first chunk, then other to the end (it takes the
// paused slot), then continues req. It returns req's text, its text
// unpaced on a fresh engine, its result and the engine.
func yieldWhilePaused(t *testing.T, req, other engine.Request) (got, want string, res engine.Result, e *engine.Engine) {
	t.Helper()
	model := testmodel.TinyStories656K
	plain := req
	plain.Chunking = nil
	want = alone(t, model, plain)

	e = newEngine(t, model, engine.Config{Parallel: 1, HostCacheBytes: 64 << 20})
	p := submit(t, e, req)
	c, _ := nextChunk(t, p)
	waitPaused(t, e, p)
	if _, r := collect(t, submit(t, e, other)); r.Usage.CompletionTokens != other.MaxTokens {
		t.Fatalf("the request that took the paused slot: %+v", r)
	}
	p.Continue(c.Index)
	rest, res := pace(t, p, 1)
	return c.Text + joined(rest), want, res, e
}

func TestBadChunking(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	for _, req := range []engine.Request{
		{Prompt: "x", Chunking: &engine.Chunking{FirstMinTokens: -1}},
		{Prompt: "x", Chunking: &engine.Chunking{}, PauseTimeout: -time.Second},
	} {
		if _, err := e.Submit(context.Background(), req); !errors.Is(err, engine.ErrBadChunking) {
			t.Errorf("%+v: err %v, want ErrBadChunking", req, err)
		}
	}
}

// TestPausedSlotIsLent: a request of the same class that finds no free
// slot takes a paused one's; the paused answer, continued, comes back
// through the host cache with nothing evaluated twice and the text it
// would have had anyway.
func TestPausedSlotIsLent(t *testing.T) {
	req := pacedStory(100)
	req.Prompt = strings.Repeat("Tom had a big red ball and a small blue car. ", 6) + storyPrompt
	got, want, res, e := yieldWhilePaused(t, req, greedy("Hello", 10))
	if got != want {
		t.Errorf("text after lending the slot:\n got %q\nwant %q", got, want)
	}
	if res.Preemptions != 1 || res.Usage.ReevaluatedTokens != 0 {
		t.Errorf("result %+v: want 1 preemption, nothing evaluated twice", res)
	}
	if st := settled(t, e, 2); st.HostCacheRestored != 1 {
		t.Errorf("stats %+v: the paused history did not come back from the host cache", st)
	}
}
