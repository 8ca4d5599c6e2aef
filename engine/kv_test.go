package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
)

// tokens tokenizes text as a prompt (BOS added).
func tokens(t *testing.T, e *engine.Engine, text string) []int32 {
	t.Helper()
	toks, err := e.Tokenize(text, true, false)
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// waitDecoding polls until the request s has generated at least n tokens.
func waitDecoding(t *testing.T, e *engine.Engine, s *engine.Stream, n int) {
	t.Helper()
	poll(t, fmt.Sprintf("waiting for request %d to generate %d tokens", s.ID(), n), func() (bool, string) {
		infos, err := e.Slots(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			if in.RequestID == s.ID() && in.Decoded >= n {
				return true, ""
			}
		}
		return false, fmt.Sprintf("slots %+v", infos)
	})
}

// settled returns the engine's stats once they count n finished
// requests: a stream ends before the step that finished it publishes them.
func settled(t *testing.T, e *engine.Engine, n uint64) engine.Stats {
	t.Helper()
	var st engine.Stats
	poll(t, fmt.Sprintf("waiting for stats of %d finished requests", n), func() (bool, string) {
		st = e.Stats()
		return st.Requests >= n, fmt.Sprintf("%+v", st)
	})
	return st
}

// alone is the greedy output of req on a fresh engine with one slot.
func alone(t *testing.T, model string, req engine.Request) string {
	t.Helper()
	e := newEngine(t, model, engine.Config{Parallel: 1})
	defer e.Close()
	got, _ := collect(t, submit(t, e, req))
	return got
}

// aloneAfter is what req generates in an engine of its own, with batches
// of batch tokens, after a request for prefix alone left prefix in the
// cache. llama.cpp's kernels are not invariant to how a prompt is cut into
// batches (a matrix product over 3 rows takes another code path than one
// over 32), so the reference for a prompt whose prefix came from the cache
// evaluates that prefix separately too.
func aloneAfter(t *testing.T, model string, batch int, prefix []int32, req engine.Request) string {
	t.Helper()
	e := newEngine(t, model, engine.Config{Parallel: 1, BatchSize: batch})
	defer e.Close()
	collect(t, submit(t, e, engine.Request{Tokens: prefix, MaxTokens: 1}))
	got, res := collect(t, submit(t, e, req))
	if res.Usage.CachedTokens < len(prefix) {
		t.Fatalf("alone: %d prompt tokens cached, want the prefix's %d", res.Usage.CachedTokens, len(prefix))
	}
	return got
}

// TestPrefixFromABusySlot: a prompt starting with what another slot holds
// while that slot is still generating starts from those cells, and its
// output is what it would be alone.
func TestPrefixFromABusySlot(t *testing.T) {
	model := testmodel.TinyStories656K
	e := newEngine(t, model, engine.Config{Parallel: 2})
	shared := tokens(t, e, "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog.")
	a := submit(t, e, engine.Request{Tokens: shared, MaxTokens: 1000, IgnoreEOS: true})
	waitDecoding(t, e, a, 2)

	tail := tokens(t, e, "One day")[1:] // without BOS
	req := engine.Request{Tokens: append(append([]int32(nil), shared...), tail...), MaxTokens: 24, IgnoreEOS: true}
	got, res := collect(t, submit(t, e, req))
	if res.Usage.CachedTokens < len(shared) {
		t.Errorf("cached %d prompt tokens; the busy slot held the first %d", res.Usage.CachedTokens, len(shared))
	}
	if want := alone(t, model, req); got != want {
		t.Errorf("output from shared cells:\n got %q\nwant %q (alone)", got, want)
	}
	if st := e.Stats(); st.ForwardPasses != st.Steps+st.SplitSteps {
		t.Errorf("%d forward passes in %d steps (%d split), want one per step, two per split step", st.ForwardPasses, st.Steps, st.SplitSteps)
	}
	a.Cancel()
	collect(t, a)
}

// TestPriorityThenArrivalOrder: with every slot busy, a request of a
// better class starts before earlier ones of a worse class, and within a
// class requests start in arrival order.
func TestPriorityThenArrivalOrder(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	blocker := longRunning(t, e, ctx, 0)
	low1 := submit(t, e, engine.Request{Prompt: "Hello", AddSpecial: true, MaxTokens: 4, Priority: 5})
	low2 := submit(t, e, engine.Request{Prompt: "The", AddSpecial: true, MaxTokens: 4, Priority: 5})
	high := submit(t, e, engine.Request{Prompt: "Once", AddSpecial: true, MaxTokens: 4})
	if st := e.Stats(); st.Preemptions != 0 {
		t.Fatalf("%d preemptions: nothing waiting has a better class than the running request", st.Preemptions)
	}
	blocker.Cancel()
	collect(t, blocker)
	// One slot: each was admitted after the one before had finished.
	var prev time.Time
	order := []*engine.Stream{high, low1, low2}
	for i, s := range order {
		_, res := collect(t, s)
		admitted := res.Timings.Submitted.Add(res.Timings.Queued)
		if i > 0 && !admitted.After(prev) {
			t.Fatalf("request %d was admitted before request %d: want priority, then arrival order", s.ID(), order[i-1].ID())
		}
		prev = admitted
	}
}

// TestPreemptAndResumeLoseNothing: a request of a better class preempts the
// only running one; that one resumes afterwards and generates all its
// tokens. With its history back from the host cache (the saved KV state)
// its output is exactly what it is without the preemption. Evaluated again
// instead, its generated tokens go through one batch where they first went
// through one pass each, and llama.cpp's kernels do not give the same bits
// for both (a matrix product over 80 rows takes another path than one over
// 1), so past the preemption a near tie may go the other way: there the
// output keeps, unchanged, everything generated before the preemption.
func TestPreemptAndResumeLoseNothing(t *testing.T) {
	model := testmodel.TinyStories656K
	low := engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 100, IgnoreEOS: true, Priority: 1}
	want := alone(t, model, low)
	before := low
	before.MaxTokens = 70
	wantBefore := alone(t, model, before)
	for _, host := range []int64{0, 64 << 20} {
		t.Run(fmt.Sprintf("host cache %d MiB", host>>20), func(t *testing.T) {
			e := newEngine(t, model, engine.Config{Parallel: 1, HostCacheBytes: host})
			l := submit(t, e, low)
			waitDecoding(t, e, l, 70) // past minHostSave tokens of history
			h := submit(t, e, engine.Request{Prompt: "Hello", AddSpecial: true, MaxTokens: 8})
			hText, hRes := collect(t, h)
			if hRes.FinishReason != engine.FinishLength || hText == "" {
				t.Fatalf("the better-class request: %q, %+v", hText, hRes)
			}
			got, res := collect(t, l)
			if res.Preemptions != 1 || res.Usage.CompletionTokens != low.MaxTokens {
				t.Errorf("preempted request: %d preemptions, %d tokens; want 1, %d tokens", res.Preemptions, res.Usage.CompletionTokens, low.MaxTokens)
			}
			if host > 0 && got != want {
				t.Errorf("output with a preemption:\n got %q\nwant %q", got, want)
			}
			if !strings.HasPrefix(got, wantBefore) {
				t.Errorf("output with a preemption:\n got %q\nwant it to start with the %d tokens before it: %q", got, before.MaxTokens, wantBefore)
			}
			st := settled(t, e, 2)
			if host > 0 && st.HostCacheRestored == 0 {
				t.Errorf("the preempted history was not restored from the host cache: %+v", st)
			}
			if st.Preemptions != 1 {
				t.Errorf("stats count %d preemptions, want 1", st.Preemptions)
			}
		})
	}
}

// TestHostCacheBringsBackAConversation: a conversation whose slot was
// taken by another one finds its history in host memory on its next turn.
func TestHostCacheBringsBackAConversation(t *testing.T) {
	model := testmodel.TinyStories656K
	e := newEngine(t, model, engine.Config{Parallel: 1, HostCacheBytes: 64 << 20})
	history := tokens(t, e, eogText) // the first turn: a long prompt
	collect(t, submit(t, e, engine.Request{Tokens: history, MaxTokens: 8, IgnoreEOS: true}))
	collect(t, submit(t, e, greedy("Hello", 8))) // takes the slot
	next := engine.Request{Tokens: append(append([]int32(nil), history...), tokens(t, e, " The end.")[1:]...), MaxTokens: 16, IgnoreEOS: true}
	got, res := collect(t, submit(t, e, next))
	if res.Usage.CachedTokens < len(history) {
		t.Errorf("second turn: %d of %d prompt tokens cached, want the first turn's %d from host memory (stats %+v)",
			res.Usage.CachedTokens, res.Usage.PromptTokens, len(history), e.Stats())
	}
	if want := alone(t, model, next); got != want {
		t.Errorf("second turn after a restore:\n got %q\nwant %q", got, want)
	}
}

// TestSharedPromptIsEvaluatedOnce: requests arriving together with one
// long system prompt evaluate it once between them (the others wait for
// its cells, or find them), and each output is what it is alone.
func TestSharedPromptIsEvaluatedOnce(t *testing.T) {
	model := testmodel.TinyStories656K
	e := newEngine(t, model, engine.Config{Parallel: 4, BatchSize: 32})
	system := tokens(t, e, eogText)
	var reqs []engine.Request
	var streams []*engine.Stream
	for _, user := range []string{" Tom", " The cat", " One day", " Sue"} {
		prompt := append(append([]int32(nil), system...), tokens(t, e, user)[1:]...)
		req := engine.Request{Tokens: prompt, MaxTokens: 8, IgnoreEOS: true}
		reqs = append(reqs, req)
		streams = append(streams, submit(t, e, req))
	}
	suffixes := 0
	for i, s := range streams {
		got, res := collect(t, s)
		suffixes += res.Usage.PromptTokens - len(system)
		if want := aloneAfter(t, model, 32, system, reqs[i]); got != want {
			t.Errorf("request %d:\n got %q\nwant %q (alone, the system prompt cached)", i, got, want)
		}
	}
	// A request arriving when fewer than 32 (minFollow) tokens of the
	// prompt are left to evaluate evaluates them itself rather than wait.
	const minFollow = 32
	limit := len(system) + suffixes + len(streams) + (len(streams)-1)*(minFollow-1)
	st := e.Stats()
	if evaluated := st.PromptTokens - st.CachedPromptTokens; evaluated > uint64(limit) {
		t.Errorf("evaluated %d prompt tokens; the %d-token system prompt once and the %d others allow at most %d",
			evaluated, len(system), suffixes, limit)
	}
}

// TestFollowerSharesEvaluatedCells: a request that waited for another
// slot's prompt shares only cells that hold evaluated tokens. Here the
// follower's prompt goes on with the leader's first generated token, which
// the leader evaluates in the step the follower starts: the follower
// evaluates it itself, since its prompt chunk may be evaluated in a pass
// before the leader's token (Context.DecodeSplit).
func TestFollowerSharesEvaluatedCells(t *testing.T) {
	model := testmodel.TinyStories656K
	cfg := engine.Config{Parallel: 2, BatchSize: 64, PrefillBudget: -1}
	e := newEngine(t, model, cfg)
	text := tokens(t, e, eogText)
	prompt := append([]int32(nil), text...) // 200 tokens or more: the leader's prefill takes 4 steps or more
	for len(prompt) < 200 {
		prompt = append(prompt, text[1:]...) // without BOS
	}
	first := newEngine(t, model, engine.Config{Parallel: 1})
	o := run(t, first, engine.Request{Tokens: prompt, MaxTokens: 1, IgnoreEOS: true, Logprobs: true})
	first.Close()
	if len(o.lps) == 0 {
		t.Fatal("no first token")
	}
	next := o.lps[0].Token // the leader's first generated token
	follow := append(append([]int32(nil), prompt...), next)
	for i := 0; len(follow) < len(prompt)+64; i++ {
		follow = append(follow, prompt[i])
	}
	leader := submit(t, e, engine.Request{Tokens: prompt, MaxTokens: 1000, IgnoreEOS: true})
	_, res := collect(t, submit(t, e, engine.Request{Tokens: follow, MaxTokens: 4, IgnoreEOS: true}))
	if res.Usage.CachedTokens > len(prompt) {
		t.Errorf("the follower shared %d cells; want at most the leader's %d-token prompt's, evaluated before its step", res.Usage.CachedTokens, len(prompt))
	}
	leader.Cancel()
	collect(t, leader)
}

// TestIdleCachesAreBounded: idle slots keep at most one slot's worth of
// cells of their own (every step scans the cells of the unified cache);
// the least recently used tail goes to host memory, and its conversation
// finds it there when it returns.
func TestIdleCachesAreBounded(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 3, CtxSize: 3 * 256, HostCacheBytes: 64 << 20})
	story := tokens(t, e, eogText+" "+eogText)
	first := story[:150]
	second := append([]int32{story[0]}, story[150:300]...)
	collect(t, submit(t, e, engine.Request{Tokens: first, MaxTokens: 8, IgnoreEOS: true}))
	collect(t, submit(t, e, engine.Request{Tokens: second, MaxTokens: 8, IgnoreEOS: true}))
	// The next admission trims the idle slots: 2x158 cells are more than
	// one slot's 256.
	collect(t, submit(t, e, greedy("Hello", 1)))
	if st := settled(t, e, 3); st.HostCacheSaved != 1 {
		t.Fatalf("%d states saved to host memory, want the first conversation's: %+v", st.HostCacheSaved, st)
	}
	infos, err := e.Slots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, in := range infos {
		held += in.CachedTokens
	}
	if share := e.Info().KVCells / len(infos); held > share {
		t.Fatalf("idle slots hold %d cells, more than an equal share's %d: %+v", held, share, infos)
	}
	again := append(append([]int32(nil), first...), story[300:310]...)
	_, res := collect(t, submit(t, e, engine.Request{Tokens: again, MaxTokens: 4, IgnoreEOS: true}))
	if res.Usage.CachedTokens < len(first) {
		t.Fatalf("the trimmed conversation: %d prompt tokens cached, want its %d from host memory (%+v)", res.Usage.CachedTokens, len(first), e.Stats())
	}
}
