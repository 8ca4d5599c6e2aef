package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
)

// storyTokens is n prompt tokens of real text (the golden story, repeated)
// for the model of e.
func storyTokens(t *testing.T, e *engine.Engine, n int) []int32 {
	t.Helper()
	story := tokens(t, e, eogText)
	out := []int32{story[0]}
	for len(out) < n {
		out = append(out, story[1:]...)
	}
	return out[:n]
}

// TestLongRequestUsesIdleCells: with four slots sharing 2,048 cells, one
// request may use far more than a quarter of them while the other slots
// are idle, and its output is what it is alone.
func TestLongRequestUsesIdleCells(t *testing.T) {
	model := testmodel.Stories260K // trained on 2,048 tokens
	e := newEngine(t, model, engine.Config{Parallel: 4, CtxSize: 2048})
	if info := e.Info(); info.CtxPerRequest != 2048 || info.KVCells != 2048 {
		t.Fatalf("context per request %d, pool %d; want both 2048", info.CtxPerRequest, info.KVCells)
	}
	req := engine.Request{Tokens: storyTokens(t, e, 1400), MaxTokens: 200, IgnoreEOS: true}
	got, res := collect(t, submit(t, e, req))
	if res.Err != nil || res.FinishReason != engine.FinishLength || res.Usage.CompletionTokens != req.MaxTokens {
		t.Fatalf("a 1,600-token request on 4 slots of 2,048 cells: %+v", res)
	}
	if want := alone(t, model, req); got != want {
		t.Errorf("output:\n got %q\nwant %q (alone)", got, want)
	}
	if st := settled(t, e, 1); st.KVCellsUsed != 1400+200-1 || st.KVCellsActive != 0 {
		t.Errorf("after the request: %d cells used (%d active), want its %d cached and none active", st.KVCellsUsed, st.KVCellsActive, 1400+200-1)
	}
}

// inOrder is how many tokens of the requests in the pool-pressure tests
// are generated while every sequence's cells stay in position order
// (before the 512-cell pool first runs out, at about 250 tokens each):
// llama.cpp's attention visits a sequence's cells in cell order, so once
// a freed cell is reused for a later position, sums are taken in another
// order and a greedy choice between near-equal tokens may change.
const inOrder = 200

// agrees checks that got is the output of req, generated in its pool,
// over the tokens generated with its cells in position order: it starts
// with the first inOrder tokens' text alone, and it has all its tokens.
func agrees(t *testing.T, model, what, got string, res engine.Result, req engine.Request) {
	t.Helper()
	head := req
	head.MaxTokens = inOrder
	if want := alone(t, model, head); !strings.HasPrefix(got, want) {
		t.Errorf("%s: the first %d tokens differ from the request alone:\n got %q\nwant %q...", what, inOrder, got, want)
	}
	if res.Err != nil || res.Usage.CompletionTokens != req.MaxTokens {
		t.Errorf("%s: %d tokens (%v), want %d", what, res.Usage.CompletionTokens, res.Err, req.MaxTokens)
	}
}

// TestPoolPressurePreemptsTheLastArrival: two requests that together
// outgrow the pool both finish with all their tokens; the later arrival
// (of the same class) is the one preempted when the cells run out, and
// it resumes once the other is done, from host memory when there is
// some, with nothing evaluated twice.
func TestPoolPressurePreemptsTheLastArrival(t *testing.T) {
	model := testmodel.TinyStories656K
	first := engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 350, IgnoreEOS: true}
	second := engine.Request{Prompt: "Hello", AddSpecial: true, MaxTokens: 350, IgnoreEOS: true}
	for _, host := range []int64{0, 64 << 20} {
		t.Run(fmt.Sprintf("host cache %d MiB", host>>20), func(t *testing.T) {
			e := newEngine(t, model, engine.Config{Parallel: 2, CtxSize: 512, HostCacheBytes: host})
			a := submit(t, e, first)
			waitDecoding(t, e, a, 1)
			b := submit(t, e, second)
			gotA, resA := collect(t, a)
			gotB, resB := collect(t, b)
			if resA.Preemptions != 0 || resB.Preemptions != 1 {
				t.Errorf("preemptions: first %d, second %d; want 0 and 1", resA.Preemptions, resB.Preemptions)
			}
			agrees(t, model, "first", gotA, resA, first)
			agrees(t, model, "second, preempted", gotB, resB, second)
			st := settled(t, e, 2)
			if st.PoolPreemptions != 1 || st.Preemptions != 1 {
				t.Errorf("stats: %d preemptions, %d for cells; want 1 and 1", st.Preemptions, st.PoolPreemptions)
			}
			if host > 0 && (st.HostCacheRestored == 0 || resB.Usage.ReevaluatedTokens != 0) {
				t.Errorf("with a host cache the history comes back from it: %d restores, %d tokens evaluated again", st.HostCacheRestored, resB.Usage.ReevaluatedTokens)
			}
		})
	}
}

// TestPoolPressurePreemptsTheWorseClass: when the cells run out, the
// request of the worse priority class gives them up, though it arrived
// first; a prompt of a better class that does not fit beside it takes
// its cells at admission.
func TestPoolPressurePreemptsTheWorseClass(t *testing.T) {
	model := testmodel.TinyStories656K
	low := engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 350, IgnoreEOS: true, Priority: 1}
	t.Run("decoding", func(t *testing.T) {
		high := engine.Request{Prompt: "Hello", AddSpecial: true, MaxTokens: 350, IgnoreEOS: true}
		e := newEngine(t, model, engine.Config{Parallel: 2, CtxSize: 512})
		l := submit(t, e, low)
		waitDecoding(t, e, l, 1)
		h := submit(t, e, high)
		gotH, resH := collect(t, h)
		gotL, resL := collect(t, l)
		if resH.Preemptions != 0 || resL.Preemptions != 1 {
			t.Errorf("preemptions: better class %d, worse class %d; want 0 and 1", resH.Preemptions, resL.Preemptions)
		}
		agrees(t, model, "better class", gotH, resH, high)
		agrees(t, model, "worse class", gotL, resL, low)
	})
	t.Run("admission", func(t *testing.T) {
		e := newEngine(t, model, engine.Config{Parallel: 2, CtxSize: 512})
		l := submit(t, e, low)
		waitDecoding(t, e, l, inOrder)
		high := engine.Request{Tokens: storyTokens(t, e, 400), MaxTokens: 8, IgnoreEOS: true}
		_, resH := collect(t, submit(t, e, high))
		if resH.Err != nil || resH.Usage.CompletionTokens != 8 || resH.Preemptions != 0 {
			t.Fatalf("better-class prompt: %+v", resH)
		}
		if l.Done() {
			t.Fatal("the worse-class request finished before the better-class prompt: it was not preempted")
		}
		gotL, resL := collect(t, l)
		if resL.Preemptions != 1 {
			t.Errorf("worse class: %d preemptions, want 1", resL.Preemptions)
		}
		agrees(t, model, "worse class", gotL, resL, low)
	})
}

// TestSharedPrefixTakesItsCellsOnce: a prompt found in another slot
// shares that slot's cells, and the pool counts them once.
func TestSharedPrefixTakesItsCellsOnce(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 2, CtxSize: 1024})
	prompt := storyTokens(t, e, 300)
	collect(t, submit(t, e, engine.Request{Tokens: prompt, MaxTokens: 4, IgnoreEOS: true}))
	// The empty slot loses nothing: the next request takes it, and the
	// prompt's cells from the other.
	_, res := collect(t, submit(t, e, engine.Request{Tokens: append(prompt[:300:300], prompt[1:11]...), MaxTokens: 4, IgnoreEOS: true}))
	st := settled(t, e, 2)
	infos := slotsOf(t, e)
	if res.Usage.CachedTokens != 300 || infos[0].CachedTokens != 303 || infos[1].CachedTokens != 313 || st.KVCellsUsed != 303+313-300 {
		t.Errorf("%d cells used, slots %+v, %d prompt tokens cached; want the shared 300 counted once", st.KVCellsUsed, infos, res.Usage.CachedTokens)
	}
}

// slotsOf returns the engine's slots as of its last step.
func slotsOf(t *testing.T, e *engine.Engine) []engine.SlotInfo {
	t.Helper()
	infos, err := e.Slots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return infos
}

// TestIdleCachesGoLeastRecentlyUsedFirst: a prompt that needs more cells
// than are free takes them from the idle cache used least recently, and
// leaves a newer one whole. Its answer is paced, so that it holds its
// slot, paused, while the slots are read.
func TestIdleCachesGoLeastRecentlyUsedFirst(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 4, CtxSize: 2048})
	story := storyTokens(t, e, 2150)
	older, newer, long := story[1:151], story[200:320], story[400:2150]
	if older[0] == newer[0] || older[0] == long[0] || newer[0] == long[0] {
		t.Fatal("the prompts share a first token")
	}
	// Each cache holds its prompt and all but the last of its 8 tokens.
	const out = 8
	for _, p := range [][]int32{older, newer} {
		collect(t, submit(t, e, engine.Request{Tokens: p, MaxTokens: out, IgnoreEOS: true}))
	}
	// 2,048 cells less the idle caches' 157 and 127 leave 1,764 free: too
	// few for the long prompt and admission's margin (1,750 + 21).
	s := submit(t, e, engine.Request{Tokens: long, MaxTokens: 100, IgnoreEOS: true, Chunking: &engine.Chunking{}})
	defer s.Cancel()
	if c, err := s.Recv(context.Background()); err != nil || !c.Held {
		t.Fatalf("the paced answer's first chunk %+v (%v): want it held", c, err)
	}
	held := map[int]bool{}
	for _, in := range slotsOf(t, e) {
		if in.State == "idle" {
			held[in.CachedTokens] = true
		}
	}
	if !held[len(newer)+out-1] || held[len(older)+out-1] {
		t.Errorf("idle slots hold %v tokens: want the newer cache's %d whole, the older's %d freed", held, len(newer)+out-1, len(older)+out-1)
	}
}
