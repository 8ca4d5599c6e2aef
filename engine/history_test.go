package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

// answer is a greedy answer with the log-probabilities of its steps.
type answer struct {
	tokens []int32
	lps    []float32 // each step's chosen and top tokens' log-probabilities
	cached int       // prompt tokens found cached
}

// greedyAnswer runs prompt alone at temperature 0 with logprobs, under
// salt (so that it reuses nothing cached by requests of another salt).
func greedyAnswer(t *testing.T, e *engine.Engine, prompt, salt string, n int) answer {
	t.Helper()
	req := greedy(prompt, n)
	req.Logprobs, req.TopLogprobs, req.CacheSalt = true, 4, salt
	_, lps, res := collectLogprobs(t, submit(t, e, req))
	a := answer{cached: res.Usage.CachedTokens}
	for _, lp := range lps {
		a.tokens = append(a.tokens, lp.Token)
		a.lps = append(a.lps, lp.Logprob)
		for _, top := range lp.Top {
			a.lps = append(a.lps, top.Logprob)
		}
	}
	return a
}

// firstDifference is the first step where a and b differ, in the token
// or in any bit of a log-probability; -1 when they are identical.
func firstDifference(a, b answer) int {
	if len(a.tokens) != len(b.tokens) || len(a.lps) != len(b.lps) {
		return 0
	}
	per := len(a.lps) / max(len(a.tokens), 1)
	for i := range a.tokens {
		if a.tokens[i] != b.tokens[i] {
			return i
		}
		for j := i * per; j < (i+1)*per; j++ {
			if math.Float32bits(a.lps[j]) != math.Float32bits(b.lps[j]) {
				return i
			}
		}
	}
	return -1
}

// finite reports whether a's log-probabilities are all finite numbers.
func finite(a answer) bool {
	for _, lp := range a.lps {
		if math.IsNaN(float64(lp)) || math.IsInf(float64(lp), 1) {
			return false
		}
	}
	return true
}

// churn runs n requests of random prompts and lengths (in words, divided
// by div), four at a time,
// a third of them hung up part-way, as a server's history: slots are
// reused, prefixes cached, shared and evicted, cells freed out of order.
func churn(t *testing.T, e *engine.Engine, n, div int, seed uint64) {
	t.Helper()
	words := strings.Fields("once upon a time there was a little girl named Lily she loved to play outside in the park one day saw big red ball dog cat tree sun happy sad friend")
	rng := rand.New(rand.NewPCG(seed, 1))
	type job struct {
		prompt      string
		max, hangAt int
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				ctx, cancel := context.WithCancel(context.Background())
				s, err := e.Submit(ctx, greedy(j.prompt, j.max))
				if err != nil {
					cancel()
					t.Error(err)
					continue
				}
				for got := 0; ; got++ {
					if got == j.hangAt {
						cancel()
					}
					if _, err := s.Recv(context.Background()); err != nil {
						if !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) {
							t.Error(err)
						}
						break
					}
				}
				cancel()
			}
		}()
	}
	// A few system prompts shared by many requests, so that slots share
	// and extend each other's prefixes.
	systems := make([]string, 3)
	for i := range systems {
		systems[i] = sentence(rng, words, (40+rng.IntN(120))/div)
	}
	for range n {
		p := sentence(rng, words, 1+rng.IntN(200)/div)
		if rng.IntN(2) == 0 {
			p = systems[rng.IntN(len(systems))] + " " + p
		}
		hang := -1
		if rng.IntN(3) == 0 {
			hang = rng.IntN(20)
		}
		jobs <- job{p, 1 + rng.IntN(80), hang}
	}
	close(jobs)
	wg.Wait()
}

func sentence(rng *rand.Rand, words []string, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[rng.IntN(len(words))])
	}
	return b.String()
}

// TestSameAnswerWhateverRanBefore: with a cache per slot
// (Config.KVPerSlot), a prompt at temperature 0 gives the same tokens,
// with log-probabilities equal to the bit, on a fresh engine and on one
// that has served a few hundred requests before, for every memory kind:
// each sequence's cells lie at the start of its slot's buffer in
// position order, wherever its history left the others, so llama.cpp's
// attention sums the same terms in the same order. Prompts long enough
// for every attention path of ggml's CPU kernel: a prompt chunk of at
// least 64 rows takes the tiled path (tiles of 64 cells at fixed
// offsets), a lone decode token over 512 cells or more the split path
// (one chunk of cells per thread). With one buffer for all slots the
// answers differ from the first step on.
func TestSameAnswerWhateverRanBefore(t *testing.T) {
	dir := t.TempDir()
	synth := func(arch string) string {
		p := filepath.Join(dir, arch+".gguf")
		s := gguf.ArchShape(arch)
		s.Ctx = 2048
		if err := gguf.WriteSyntheticArch(p, arch, s, 1, gguf.SynthOptions{}, llama.Layout); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		kind   engine.MemoryKind
		model  func() string
		div    int // the synthetic vocabulary spells a word in about 3 tokens
		rounds int
	}{
		{engine.MemoryAttention, func() string { return testmodel.Path(t, testmodel.Stories260K) }, 1, 2},
		{engine.MemorySlidingWindow, func() string { return synth("gemma3") }, 2, 1},
		{engine.MemoryHybrid, func() string { return synth("qwen35") }, 2, 1},
		// Shorter for mamba: its random state grows without bound, and
		// past about 500 tokens turns to NaN (see finite).
		{engine.MemoryRecurrent, func() string { return synth("mamba") }, 4, 1},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			words := strings.Fields("the little dog ran to the park and saw a big red ball under a tree")
			rng := rand.New(rand.NewPCG(7, 7))
			prompts := []string{"Once upon a time", sentence(rng, words, 300/tc.div), sentence(rng, words, 450/tc.div)}
			e, err := engine.New(context.Background(), engine.Config{ModelPath: tc.model(), Parallel: 4, CtxSize: 4 * 1024, Threads: testThreads, KVPerSlot: true})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if k := e.Info().MemoryKind; k != tc.kind {
				t.Fatalf("memory %s, want %s", k, tc.kind)
			}
			fresh := make([]answer, len(prompts))
			for i, p := range prompts {
				fresh[i] = greedyAnswer(t, e, p, "fresh", 100)
				if !finite(fresh[i]) {
					t.Fatalf("prompt %d: the model's log-probabilities are not all finite", i)
				}
			}
			for round := range tc.rounds {
				churn(t, e, 40, tc.div, uint64(round))
				for i, p := range prompts {
					got := greedyAnswer(t, e, p, fmt.Sprint("after ", round), 100)
					if d := firstDifference(fresh[i], got); d >= 0 {
						t.Errorf("round %d, prompt %d (%d words): the answer differs from a fresh engine's from step %d on", round, i, len(strings.Fields(p)), d)
					}
				}
			}
		})
	}
}

// TestPerSlotKeepsBusySlotsTogether: with a buffer per slot, a new
// conversation takes the free slot beside a busy one, though that slot's
// cache is lost and another slot is empty: llama.cpp evaluates a step's
// decoding tokens in a pass of the weights for each run of consecutive
// slots (llama.Context.Decode). Slot 1 holds an earlier answer, slot 0
// decodes; the new request goes to slot 1, not to the empty slot 2.
func TestPerSlotKeepsBusySlotsTogether(t *testing.T) {
	cpu := engine.NewCPU(1)
	e := startEngine(t, engine.Config{ModelPath: testmodel.Path(t, testmodel.Stories260K), Parallel: 4, CtxSize: 4 * 1024, CPU: cpu, KVPerSlot: true})
	earlier := greedy("Once upon a time", 4)
	earlier.PinSlot, earlier.SlotID = true, 1
	collect(t, submit(t, e, earlier))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	busy := greedy("Tom went to the park", 300)
	busy.PinSlot = true // slot 0
	a, err := e.Submit(ctx, busy)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, e, a, "decode")
	// Slot 0 decodes at most one more token before the new request is
	// placed: the engine waits for the cores before each pass.
	hold := engine.HoldCPU(cpu)
	d, err := e.Submit(ctx, greedy("The dog ran", 300))
	if err != nil {
		t.Fatal(err)
	}
	hold()
	poll(t, "the new request in a slot", func() (bool, string) {
		infos, _ := e.Slots(context.Background())
		for _, in := range infos {
			if in.RequestID == d.ID() {
				if in.ID != 1 {
					t.Fatalf("the new request took slot %d, want 1 (beside slot 0's): %+v", in.ID, infos)
				}
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", infos)
	})
	cancel()
	collect(t, a)
	collect(t, d)
}

// TestPerSlotCopiesAPrefix: with a buffer per slot, a request whose
// prompt starts with what another slot holds takes that prefix as a copy
// of the slot's buffer, not evaluated again, and answers to the bit as
// when its own slot held the prefix.
func TestPerSlotCopiesAPrefix(t *testing.T) {
	words := strings.Fields("the little dog ran to the park and saw a big red ball under a tree")
	system := sentence(rand.New(rand.NewPCG(3, 3)), words, 200)
	a, b := system+" so the cat sat", system+" and then the dog ran"
	run := func(parallel int) answer {
		e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: parallel, CtxSize: parallel * 1024, KVPerSlot: true})
		greedyAnswer(t, e, a, "", 20)
		// With one slot, b finds the prefix in its own slot; with two, in
		// the other one: its own is empty, and loses nothing.
		return greedyAnswer(t, e, b, "", 40)
	}
	want, got := run(1), run(2)
	if got.cached < 200 || got.cached != want.cached {
		t.Fatalf("%d prompt tokens found cached from another slot, want %d (over 200)", got.cached, want.cached)
	}
	if d := firstDifference(want, got); d >= 0 {
		t.Errorf("with the prefix copied from another slot the answer differs from step %d on", d)
	}
}
