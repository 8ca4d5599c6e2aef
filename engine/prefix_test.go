package engine

import (
	"testing"
	"time"
)

func TestHostCacheKeepsTheLongestWithinBudget(t *testing.T) {
	c := hostCache{budget: 100}
	c.add([]int32{1, 2, 3}, "", make([]byte, 30), nil)
	c.add([]int32{1, 2, 3, 4, 5}, "", make([]byte, 50), nil) // makes the first redundant
	if len(c.entries) != 1 || c.size != 50 {
		t.Fatalf("after a longer save of the same prefix: %d entries, %d bytes; want 1, 50", len(c.entries), c.size)
	}
	if e, n := c.longest([]int32{1, 2, 3, 9}, ""); e == nil || n != 3 {
		t.Fatalf("longest prefix of 1 2 3 9: %v, %d; want the entry, 3", e, n)
	}
	c.add([]int32{7, 8}, "", make([]byte, 40), nil)
	c.touch(c.entries[0]) // 1..5 is now the most recently used
	c.add([]int32{9}, "", make([]byte, 40), nil)
	if c.size > c.budget {
		t.Fatalf("%d bytes kept, budget %d", c.size, c.budget)
	}
	if !c.covers([]int32{1, 2, 3, 4, 5}, "") || c.covers([]int32{7, 8}, "") {
		t.Fatalf("eviction dropped the wrong entry: %d entries", len(c.entries))
	}
	c.add([]int32{5}, "", make([]byte, 101), nil)
	if c.covers([]int32{5}, "") {
		t.Fatal("kept a state larger than the whole budget")
	}
}

// TestHostCacheKeepsSaltsApart: an entry serves only lookups of its
// salt, and a save makes only entries of its own salt redundant.
func TestHostCacheKeepsSaltsApart(t *testing.T) {
	c := hostCache{budget: 1000}
	c.add([]int32{1, 2, 3}, "a", make([]byte, 10), nil)
	if e, n := c.longest([]int32{1, 2, 3, 4}, "b"); e != nil || n != 0 {
		t.Fatalf("salt b found salt a's entry: %v, %d", e, n)
	}
	if c.covers([]int32{1, 2, 3}, "") {
		t.Fatal("the empty salt found salt a's entry")
	}
	c.add([]int32{1, 2, 3, 4}, "b", make([]byte, 10), nil) // not a's successor
	if len(c.entries) != 2 {
		t.Fatalf("%d entries after saves of two salts, want 2", len(c.entries))
	}
	if e, n := c.longest([]int32{1, 2, 3, 4, 5}, "a"); e == nil || e.salt != "a" || n != 3 {
		t.Fatalf("salt a: %+v, %d; want its own entry, 3 tokens", e, n)
	}
}

func TestPrefillBudgetFollowsStepCosts(t *testing.T) {
	b := prefillBudget{max: 64}
	if got := b.tokens(1); got != 64 {
		t.Fatalf("before any measurement: %d, want the cap 64", got)
	}
	ms := time.Millisecond
	for range 50 {
		b.observe(16, 0, 100*ms)          // a decode step: 100 ms
		b.observe(16, 20, 100*ms+20*4*ms) // 4 ms a prompt token
		b.observe(0, 300, 900*ms)         // prompt only: no stream waits, ignored
	}
	if got := b.tokens(1); got < 24 || got > 26 {
		t.Fatalf("decode step 100 ms, 4 ms a prompt token: budget %d, want about 25 (a step at most twice a decode step)", got)
	}
	if got := b.tokens(3); got < 24+128 || got > 26+128 {
		t.Fatalf("three prompts waiting: budget %d, want about 25 and the cap for each prompt after the first (153)", got)
	}
	for range 50 {
		b.observe(16, 0, 100*ms)
		b.observe(16, 20, 100*ms+20*100*ms)
	}
	if got := b.tokens(1); got != minPrefillBudget {
		t.Fatalf("very dear prompt tokens: budget %d, want the floor %d", got, minPrefillBudget)
	}
}

// BenchmarkPrefixSearch is the scan place does for one admission at a
// large scale: 16 slots of 4,096 cached tokens and 64 host entries of
// 4,096, all sharing a 1,000-token system prompt with a 4,096-token
// prompt (so each comparison runs 1,000 tokens deep).
func BenchmarkPrefixSearch(b *testing.B) {
	const n, system = 4096, 1000
	seq := func(tag int32) []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(i)
			if i >= system {
				s[i] = tag
			}
		}
		return s
	}
	var slots [][]int32
	for i := range 16 {
		slots = append(slots, seq(int32(1_000_000+i))) // not negative: those mark media
	}
	c := hostCache{budget: 1 << 40}
	for i := range 64 {
		c.add(seq(int32(2_000_000+i)), "", make([]byte, 1), nil)
	}
	prompt := seq(7)
	for b.Loop() {
		best := 0
		for _, s := range slots {
			best = max(best, commonPrefix(s, prompt))
		}
		if _, m := c.longest(prompt, ""); m < best || best != system {
			b.Fatal(m, best)
		}
	}
}
