package engine_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/kvevents"
	"github.com/corral-llm/corral/kvevents/kvtest"
)

// kvIndex replays an engine's KV events as a router's index would, and
// records what makes no sense: a block stored twice in one medium
// without a removal or AllBlocksCleared between, a block removed that
// was not stored, a stored block whose hash is not that of its parent
// and tokens. It is the engine's sink; tapped indexes (tap) get the
// batches too. lose makes it ask the engine for the whole state again,
// as a publisher that dropped a batch does.
type kvIndex struct {
	mu      sync.Mutex
	held    map[string]map[kvevents.Hash]bool // by medium
	cleared bool
	wrong   []string
	lost    bool
	tapped  []*kvIndex
	// fresh: tapped, no batch yet. The first batch's removals may name
	// blocks stored before the tap.
	fresh bool
}

func newKVIndex() *kvIndex {
	return &kvIndex{held: map[string]map[kvevents.Hash]bool{"": {}, kvevents.MediumCPU: {}}}
}

// tap returns a new index, empty, that gets the batches from the next
// on.
func (x *kvIndex) tap() *kvIndex {
	y := newKVIndex()
	y.fresh = true
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tapped = append(x.tapped, y)
	return y
}

// lose makes Resync report a lost batch, once.
func (x *kvIndex) lose() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.lost = true
}

func (x *kvIndex) Resync() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	lost := x.lost
	x.lost = false
	return lost
}

func (x *kvIndex) Publish(events []kvevents.Event) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, y := range x.tapped {
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
				if held[h] {
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
			for _, m := range x.held {
				clear(m)
			}
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

// TestKVEventsResyncAfterLoss: when its sink has lost a batch, the
// engine tells at its next step that nothing is held, then every block
// it holds, in the slots and in the host cache: an index that starts
// then holds what one that missed nothing holds.
func TestKVEventsResyncAfterLoss(t *testing.T) {
	x := newKVIndex()
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, HostCacheBytes: 64 << 20, KVEvents: x})
	run := func(prompt string) { runIdle(t, e, prompt, 8) }
	run(strings.Repeat("Once upon a time Tom went to the park to play with a red ball. ", 6))
	run(strings.Repeat("Lily liked to sing songs with her friends in the garden. ", 6)) // the first goes to the host cache
	late := x.tap()
	x.lose()
	run(strings.Repeat("The end of the story came when the sun went down. ", 3))
	x.check(t)
	late.check(t)
	sameHeld(t, x, late)
}

// sameHeld fails t unless late holds, in each medium, the blocks x holds,
// and x holds some in each.
func sameHeld(t *testing.T, x, late *kvIndex) {
	t.Helper()
	for _, m := range []string{"", kvevents.MediumCPU} {
		x.mu.Lock()
		want := maps.Clone(x.held[m])
		x.mu.Unlock()
		late.mu.Lock()
		got := maps.Clone(late.held[m])
		late.mu.Unlock()
		if len(want) == 0 || !maps.Equal(got, want) {
			t.Errorf("medium %q: the late index holds %d blocks, one there from the start %d", m, len(got), len(want))
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

// teeSink is the engine's sink in the tests with a real publisher: its
// batches go to an index (to check them, and to know what the engine
// holds) and to the publisher's stream.
type teeSink struct {
	*kvevents.Stream
	x *kvIndex
}

func (s teeSink) Publish(events []kvevents.Event) {
	s.x.Publish(events)
	s.Stream.Publish(events)
}

// kvPatience bounds the waits on a publisher's subscribers.
const kvPatience = time.Minute

// publisher starts a KV event publisher on a free loopback port, closed
// after the test's engines (Cleanup runs last-in first-out: call it
// before newEngine).
func publisher(t testing.TB) *kvevents.Publisher {
	t.Helper()
	pub, err := kvevents.NewPublisher(kvevents.Endpoint{Bind: true, Host: "127.0.0.1"}, kvevents.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return pub
}

// join connects a raw subscriber to pub, subscribes it to every topic,
// and waits until the publisher has the subscription; it returns the
// messages that came meanwhile too.
func join(t testing.TB, pub *kvevents.Publisher) (*kvtest.Sub, []kvtest.Message) {
	t.Helper()
	sub, err := kvtest.Dial(pub.Addr().String(), kvPatience)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Subscribe(""); err != nil {
		t.Fatal(err)
	}
	sub.SetReadDeadline(time.Now().Add(kvPatience))
	defer sub.SetReadDeadline(time.Time{})
	msgs, err := sub.Sync()
	if err != nil {
		t.Fatal(err)
	}
	return sub, msgs
}

// TestKVEventsJoinFloodSkipsScheduler: subscribers joining the publisher
// cost the engine nothing: its next steps publish what changed, not
// every block it holds again (issue 31, finding 4: a connect loop made
// each step tell the whole cache).
func TestKVEventsJoinFloodSkipsScheduler(t *testing.T) {
	pub := publisher(t)
	x := newKVIndex()
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, HostCacheBytes: 64 << 20, KVEvents: teeSink{pub.Topic("kv@pod@m"), x}})
	runIdle(t, e, strings.Repeat("Once upon a time Tom went to the park to play with a red ball. ", 6), 8)
	runIdle(t, e, strings.Repeat("Lily liked to sing songs with her friends in the garden. ", 6), 8)
	for range 20 {
		sub, _ := join(t, pub)
		sub.Close()
	}
	runIdle(t, e, strings.Repeat("The end of the story came when the sun went down. ", 3), 8)
	x.check(t) // a block told again without a removal between is an error
}

// TestKVEventsLateSubscriber: a subscriber that joins the publisher while
// the engine is idle learns every block the engine holds, in the slots
// and in the host cache, from the publisher alone.
func TestKVEventsLateSubscriber(t *testing.T) {
	pub := publisher(t)
	x := newKVIndex()
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, HostCacheBytes: 64 << 20, KVEvents: teeSink{pub.Topic("kv@pod@m"), x}})
	// An early subscriber, there from the first batch, shows when the
	// publisher has sent every batch the engine gave it: Publish only
	// queues a batch, so one still queued when the late subscriber
	// joins would reach it live, before its restatement.
	early, _ := join(t, pub)
	defer early.Close()
	runIdle(t, e, strings.Repeat("Once upon a time Tom went to the park to play with a red ball. ", 6), 8)
	runIdle(t, e, strings.Repeat("Lily liked to sing songs with her friends in the garden. ", 6), 8)
	early.SetReadDeadline(time.Now().Add(kvPatience))
	for n := pub.Published(); n > 0; n-- {
		if _, err := early.Recv(); err != nil {
			t.Fatalf("the early subscriber waiting for %d more batches: %v", n, err)
		}
	}
	sub, msgs := join(t, pub)
	defer sub.Close()
	if len(msgs) == 0 {
		sub.SetReadDeadline(time.Now().Add(kvPatience))
		m, err := sub.Recv()
		if err != nil {
			t.Fatalf("no restatement for a subscriber that joined: %v", err)
		}
		msgs = append(msgs, m)
	}
	b, err := kvtest.Decode(msgs[0].Payload)
	if err != nil {
		t.Fatal(err)
	}
	late := newKVIndex()
	for _, ev := range b.Events {
		if ev.Kind != "BlockStored" {
			t.Fatalf("a %s event in a restatement", ev.Kind)
		}
		for _, h := range ev.Hashes {
			late.held[ev.Medium][kvevents.Hash(h)] = true
		}
	}
	sameHeld(t, x, late)
}

// countingSink counts the blocks an engine tells stored.
type countingSink struct {
	*kvevents.Stream
	stored *atomic.Int64
}

func (c countingSink) Publish(events []kvevents.Event) {
	for _, e := range events {
		if e.Kind == kvevents.Stored {
			c.stored.Add(int64(len(e.Hashes)))
		}
	}
	c.Stream.Publish(events)
}

// BenchmarkKVEventsJoinFlood times a 1,000-token generation with a
// publisher whose engine holds many host-cache entries, quiet, and while
// three subscribers that never read sit on it and a loop connects,
// subscribes and closes as fast as it can (issue 31, finding 4). It
// reports the blocks the engine told stored per generation (stored/op):
// the work the scheduler did for the stream. The flood's own cost (its
// connections, in this process, on these cores) shows in ns/op and B/op.
//
//	go test -run '^$' -bench KVEventsJoinFlood -benchtime 5x -count 5 ./engine/
func BenchmarkKVEventsJoinFlood(b *testing.B) {
	const entries, tokens = 168, 1000
	for _, flood := range []bool{false, true} {
		b.Run(map[bool]string{false: "quiet", true: "flood"}[flood], func(b *testing.B) {
			pub := publisher(b)
			var stored atomic.Int64
			e, err := engine.New(context.Background(), engine.Config{
				ModelPath: testmodel.Path(b, testmodel.TinyStories656K), Threads: testThreads,
				Parallel: 1, CtxSize: 2048, HostCacheBytes: 1 << 30, KVEvents: countingSink{pub.Topic("kv@bench@m"), &stored},
			})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			for i := range entries { // each prompt pushes the one before into the host cache
				s, err := e.Submit(context.Background(), greedy(fmt.Sprintf("Story %d. ", i)+strings.Repeat("Once upon a time Tom went to the park to play with a red ball. ", 10), 1))
				if err != nil {
					b.Fatal(err)
				}
				collect(b, s)
			}
			b.Logf("%d host cache entries, %d MiB", e.Stats().HostCacheEntries, e.Stats().HostCacheBytes>>20)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			if flood {
				for range 3 {
					sub, _ := join(b, pub)
					defer sub.Close() // never reads
				}
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						sub, err := kvtest.Dial(pub.Addr().String(), kvPatience)
						if err != nil {
							continue // refused past the publisher's cap
						}
						sub.Subscribe("")
						sub.Close()
					}
				})
			}
			b.ResetTimer()
			stored.Store(0)
			for range b.N {
				s, err := e.Submit(context.Background(), greedy("Once upon a time", tokens))
				if err != nil {
					b.Fatal(err)
				}
				collect(b, s)
			}
			b.StopTimer()
			b.ReportMetric(float64(stored.Load())/float64(b.N), "stored/op")
			close(stop)
			wg.Wait()
		})
	}
}
