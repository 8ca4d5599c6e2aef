package engine_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/kvevents"
)

// kvIndex replays an engine's KV events as a router's index would, and
// records what makes no sense: a block stored twice in one medium
// without a removal between (unless a subscriber joined: the engine
// then tells every block again), a block removed that was not stored, a
// stored block whose hash is not that of its parent and tokens. It is
// the engine's sink; joined indexes (join) get the batches too.
type kvIndex struct {
	mu      sync.Mutex
	held    map[string]map[kvevents.Hash]bool // by medium
	cleared bool
	wrong   []string
	joins   uint64
	joined  []*kvIndex
	// fresh: joined, no batch yet. The first batch's removals may name
	// blocks stored before the join.
	fresh bool
}

func newKVIndex() *kvIndex {
	return &kvIndex{held: map[string]map[kvevents.Hash]bool{"": {}, kvevents.MediumCPU: {}}}
}

// join subscribes a new index, empty, from the next batch on.
func (x *kvIndex) join() *kvIndex {
	y := newKVIndex()
	y.fresh = true
	x.mu.Lock()
	defer x.mu.Unlock()
	x.joins++
	x.joined = append(x.joined, y)
	return y
}

func (x *kvIndex) Joins() uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.joins
}

func (x *kvIndex) Publish(events []kvevents.Event) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, y := range x.joined {
		y.Publish(events)
	}
	defer func() { x.fresh = false }()
	for _, e := range events {
		held := x.held[e.Medium]
		switch e.Kind {
		case kvevents.Stored:
			if len(e.Tokens) != len(e.Hashes)*kvevents.BlockSize {
				x.wrong = append(x.wrong, fmt.Sprintf("%d blocks stored with %d tokens", len(e.Hashes), len(e.Tokens)))
				continue
			}
			for i, h := range e.Hashes {
				if held[h] && x.joins == 0 && !x.fresh {
					x.wrong = append(x.wrong, fmt.Sprintf("block %x stored twice in %q", h[:4], e.Medium))
				}
				held[h] = true
				if e.Parent == nil && i == 0 {
					continue // a first block: its salt is not in the event
				}
				parent := e.Parent
				if i > 0 {
					parent = &e.Hashes[i-1]
				}
				if want := kvevents.Sum(*parent, e.Tokens[i*kvevents.BlockSize:(i+1)*kvevents.BlockSize], nil); want != h {
					x.wrong = append(x.wrong, fmt.Sprintf("block %x is not the hash of its parent and tokens", h[:4]))
				}
			}
		case kvevents.Removed:
			for _, h := range e.Hashes {
				if !held[h] && !x.fresh {
					x.wrong = append(x.wrong, fmt.Sprintf("block %x removed from %q, not stored", h[:4], e.Medium))
				}
				delete(held, h)
			}
		case kvevents.Cleared:
			x.cleared = true
		}
	}
}

// has reports whether every whole block of tokens (salt "") is held in
// medium, and how many of them are.
func (x *kvIndex) has(medium string, tokens []int32) (all bool, n int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	parent := kvevents.Root("")
	blocks := len(tokens) / kvevents.BlockSize
	for i := range blocks {
		parent = kvevents.Sum(parent, tokens[i*kvevents.BlockSize:(i+1)*kvevents.BlockSize], nil)
		if x.held[medium][parent] {
			n++
		}
	}
	return n == blocks, n
}

func (x *kvIndex) count(medium string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.held[medium])
}

func (x *kvIndex) check(t *testing.T) {
	t.Helper()
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.wrong) > 0 {
		t.Fatalf("%d inconsistent events, the first: %s", len(x.wrong), strings.Join(x.wrong[:min(5, len(x.wrong))], "; "))
	}
}

// runIdle runs a greedy request of n tokens to its end, and waits until
// the engine is idle.
func runIdle(t *testing.T, e *engine.Engine, prompt string, n int) {
	t.Helper()
	s, err := e.Submit(context.Background(), greedy(prompt, n))
	if err != nil {
		t.Fatal(err)
	}
	collect(t, s)
	waitIdle(t, e)
}

func tokenize(t *testing.T, e *engine.Engine, text string) []int32 {
	t.Helper()
	toks, err := e.Tokenize(text, true, true)
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// TestKVEventsFollowTheCache: the blocks the events say a slot holds are
// those of its cache, chained from the root: a prompt's blocks are
// stored once evaluated, shared prefixes are told once, a slot taken by
// another prompt removes the blocks only it held, and Close removes
// everything and says so.
func TestKVEventsFollowTheCache(t *testing.T) {
	x := newKVIndex()
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 2, KVEvents: x})
	story := func(name string) string {
		return strings.Repeat("Once upon a time "+name+" went to the park to play with a red ball. ", 5)
	}
	a, b, c := story("Tom"), story("Lily"), story("Sam")
	ta, tb, tc := tokenize(t, e, a), tokenize(t, e, b), tokenize(t, e, c)
	run := func(prompt string) { runIdle(t, e, prompt, 20) }

	run(a)
	x.check(t)
	if all, _ := x.has("", ta); !all {
		t.Fatalf("after one request, the blocks of its prompt are not all stored")
	}
	// The cache holds the prompt and the generated tokens but the last.
	if n, want := x.count(""), (len(ta)+19)/kvevents.BlockSize; n != want {
		t.Errorf("%d blocks held after a %d-token prompt and 20 tokens; want %d", n, len(ta), want)
	}
	run(a) // the same prompt again: its prefix is reused, nothing new about it is told
	x.check(t)

	run(b)
	run(c) // two slots: c takes the least recently used, a's
	x.check(t)
	if _, n := x.has("", ta); n != 0 {
		t.Errorf("%d blocks of a prompt whose slot was taken are still held", n)
	}
	for _, toks := range [][]int32{tb, tc} {
		if all, _ := x.has("", toks); !all {
			t.Errorf("the blocks of a cached prompt are not all held")
		}
	}

	e.Close()
	x.check(t)
	if n := x.count(""); n != 0 || !x.cleared {
		t.Errorf("after Close: %d blocks held, cleared %v; want none and true", n, x.cleared)
	}
}

// TestKVEventsRestateOnJoin: a subscriber that joins late (an indexer
// that restarts) learns every block the engine holds, in the slots and in
// the host cache, at the engine's next step: what it then holds is what
// a subscriber there from the start holds.
func TestKVEventsRestateOnJoin(t *testing.T) {
	x := newKVIndex()
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, HostCacheBytes: 64 << 20, KVEvents: x})
	run := func(prompt string) { runIdle(t, e, prompt, 8) }
	run(strings.Repeat("Once upon a time Tom went to the park to play with a red ball. ", 6))
	run(strings.Repeat("Lily liked to sing songs with her friends in the garden. ", 6)) // the first goes to the host cache
	late := x.join()
	run(strings.Repeat("The end of the story came when the sun went down. ", 3))
	x.check(t)
	late.check(t)
	for _, m := range []string{"", kvevents.MediumCPU} {
		x.mu.Lock()
		want := maps.Clone(x.held[m])
		x.mu.Unlock()
		late.mu.Lock()
		got := maps.Clone(late.held[m])
		late.mu.Unlock()
		if len(want) == 0 || !maps.Equal(got, want) {
			t.Errorf("medium %q: the late subscriber holds %d blocks, one there from the start %d", m, len(got), len(want))
		}
	}
}

// TestKVEventsHostTier: a prefix pushed out of its slot into the host
// cache is stored in the CPU medium, and removed from it at Close.
func TestKVEventsHostTier(t *testing.T) {
	x := newKVIndex()
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, HostCacheBytes: 64 << 20, KVEvents: x})
	a := strings.Repeat("Once upon a time Tom went to the park to play with a red ball. ", 6)
	ta := tokenize(t, e, a)
	for _, prompt := range []string{a, "Lily liked to sing songs with her friends in the garden."} {
		s, err := e.Submit(context.Background(), greedy(prompt, 8))
		if err != nil {
			t.Fatal(err)
		}
		collect(t, s)
	}
	waitIdle(t, e)
	x.check(t)
	if _, n := x.has("", ta); n != 0 {
		t.Errorf("%d blocks of the first prompt still held in the slot", n)
	}
	if all, _ := x.has(kvevents.MediumCPU, ta); !all {
		t.Errorf("the first prompt's blocks are not all stored in the host tier")
	}
	e.Close()
	x.check(t)
	if n := x.count(kvevents.MediumCPU); n != 0 {
		t.Errorf("after Close: %d blocks held in the host tier", n)
	}
}

// TestKVEventsSalt: a salted prompt's blocks have other names than the
// same prompt's without a salt, as vLLM's do (the salt is the first
// block's extra key).
func TestKVEventsSalt(t *testing.T) {
	x := newKVIndex()
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 2, KVEvents: x})
	a := strings.Repeat("Once upon a time Tom went to the park to play. ", 3)
	ta := tokenize(t, e, a)
	r := greedy(a, 4)
	r.CacheSalt = "tenant-1"
	s, err := e.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	collect(t, s)
	waitIdle(t, e)
	x.check(t)
	if _, n := x.has("", ta); n != 0 {
		t.Errorf("%d blocks of a salted prompt have its unsalted names", n)
	}
	first := kvevents.Sum(kvevents.Root(""), ta[:kvevents.BlockSize], []string{"tenant-1"})
	x.mu.Lock()
	salted := x.held[""][first]
	x.mu.Unlock()
	if !salted {
		t.Errorf("the salted prompt's first block is not named by its salt")
	}
}

// TestKVEventsUnderCancels: requests cancelled at random points, sharing
// prefixes in two slots, never make the events inconsistent, and Close
// leaves nothing held.
func TestKVEventsUnderCancels(t *testing.T) {
	x := newKVIndex()
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 2, MaxQueue: 256, HostCacheBytes: 8 << 20, KVEvents: x})
	prompts := []string{
		strings.Repeat("Once upon a time Tom went to the park. ", 4),
		strings.Repeat("Once upon a time Tom went to the park. ", 4) + "He saw a dog.",
		strings.Repeat("Lily had a little cat that liked milk. ", 5),
	}
	cancelAtRandom(t, e, rand.New(rand.NewPCG(3, 4)), 60, prompts, 10, 40, 8)
	waitIdle(t, e)
	e.Close()
	x.check(t)
	if n, m := x.count(""), x.count(kvevents.MediumCPU); n != 0 || m != 0 || !x.cleared {
		t.Errorf("after Close: %d and %d blocks held, cleared %v", n, m, x.cleared)
	}
}
