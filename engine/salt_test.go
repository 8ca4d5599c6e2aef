package engine_test

import (
	"sync"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
)

func salted(prompt, salt string, n int) engine.Request {
	req := greedy(prompt, n)
	req.CacheSalt = salt
	return req
}

// TestCacheSaltKeepsTenantsApart: a prompt cached for one salt is not
// reused by a request of another salt, from the slot or from the host
// cache, while a request of the same salt reuses it exactly (all but the
// last token), after the other salt's request took the only slot; and
// the outputs are the same whichever the salt.
func TestCacheSaltKeepsTenantsApart(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, HostCacheBytes: 64 << 20})
	n := len(tokens(t, e, longPrompt))
	if n <= 64 {
		t.Fatalf("the prompt has %d tokens; it must have more than 64 to be saved to the host cache", n)
	}
	steps := []struct {
		salt   string
		cached int
		why    string
	}{
		{"a", 0, "an empty cache"},
		{"b", 0, "salt a's prompt in the slot"},
		{"a", n - 1, "its own prompt, saved to the host cache when salt b took the slot"},
		{"b", n - 1, "its own prompt, saved to the host cache when salt a took the slot back"},
		{"", 0, "the same prompt cached for salts a and b only"},
		{"a", n - 1, "its own prompt, still in the host cache"},
	}
	var first string
	for i, st := range steps {
		got, res := collect(t, submit(t, e, salted(longPrompt, st.salt, 8)))
		if res.Usage.CachedTokens != st.cached {
			t.Errorf("step %d (salt %q): %d cached tokens, want %d: %s", i, st.salt, res.Usage.CachedTokens, st.cached, st.why)
		}
		if i == 0 {
			first = got
		} else if got != first {
			t.Errorf("step %d (salt %q): output %q, want %q as at the first step", i, st.salt, got, first)
		}
	}
	if st := settled(t, e, uint64(len(steps))); st.HostCacheRestored != 3 {
		t.Errorf("%d restores from the host cache, want 3 (steps 2, 3 and 5)", st.HostCacheRestored)
	}
}

// TestCacheSaltAcrossBusySlots: requests of different salts with one
// prompt, submitted together, share no cells (neither copies the other's
// slot nor waits for it to evaluate the prompt), nor does one whose
// prompt starts with what a busy slot of another salt holds; a request of
// the busy slot's salt starts from its cells.
func TestCacheSaltAcrossBusySlots(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 3})
	var wg sync.WaitGroup
	results := make([]engine.Result, 2)
	streams := []*engine.Stream{submit(t, e, salted(longPrompt, "a", 8)), submit(t, e, salted(longPrompt, "b", 8))}
	for i, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, results[i] = collect(t, s)
		}()
	}
	wg.Wait()
	for i, res := range results {
		if res.Usage.CachedTokens != 0 {
			t.Errorf("request %d of two salts submitted together: %d cached tokens, want 0", i, res.Usage.CachedTokens)
		}
	}

	shared := tokens(t, e, "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog.")
	busy := engine.Request{Tokens: shared, MaxTokens: 1 << 20, IgnoreEOS: true, CacheSalt: "c"}
	a := submit(t, e, busy)
	waitDecoding(t, e, a, 2)
	tail := tokens(t, e, "One day")[1:] // without BOS
	req := engine.Request{Tokens: append(append([]int32(nil), shared...), tail...), MaxTokens: 4, IgnoreEOS: true, CacheSalt: "d"}
	if _, res := collect(t, submit(t, e, req)); res.Usage.CachedTokens != 0 {
		t.Errorf("salt d found %d tokens cached by a busy slot of salt c", res.Usage.CachedTokens)
	}
	req.CacheSalt = "c"
	if _, res := collect(t, submit(t, e, req)); res.Usage.CachedTokens < len(shared) {
		t.Errorf("salt c found %d tokens cached; its busy slot holds the first %d", res.Usage.CachedTokens, len(shared))
	}
	a.Cancel()
	collect(t, a)
}
