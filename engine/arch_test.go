package engine_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
)

// memoryKinds are architectures whose synthetic models have each kind of
// memory the scheduler meets: a plain KV cache (llama), sliding-window
// attention beside global layers (gemma3, gpt-oss with experts),
// multi-head latent attention (deepseek2), a recurrent state alone
// (mamba, rwkv7) and recurrent layers beside attention (qwen35, lfm2).
var memoryKinds = []string{"llama", "gemma3", "gpt-oss", "deepseek2", "mamba", "rwkv7", "qwen35", "lfm2"}

// archTokens runs req on e and returns the generated token ids.
func archTokens(t *testing.T, e *engine.Engine, prompt string, n int) []int32 {
	t.Helper()
	req := greedy(prompt, n)
	req.Logprobs = true
	_, lps, res := collectLogprobs(t, submit(t, e, req))
	if res.FinishReason == engine.FinishError {
		t.Fatalf("%q: %v", prompt, res.Err)
	}
	toks := make([]int32, len(lps))
	for i, lp := range lps {
		toks[i] = lp.Token
	}
	return toks
}

// TestMemoryKinds: the engine's scheduler, on a synthetic model of each
// kind of memory, gives llama-server's greedy tokens
// (testmodel.ArchGoldens): one request at a time, all at once in the same
// steps, and once more after the first turns left their prompts in the
// cache (reused where the memory allows it, recomputed where not: the
// tokens are the same either way). Batched, the requests run in a fresh
// engine, all in the same steps.
func TestMemoryKinds(t *testing.T) {
	dir := t.TempDir()
	for _, arch := range memoryKinds {
		t.Run(arch, func(t *testing.T) {
			want, ok := testmodel.ArchGoldens[arch]
			if !ok {
				t.Fatalf("no golden for %s", arch)
			}
			newArchEngine := func() *engine.Engine {
				e, err := engine.New(context.Background(), engine.Config{
					ModelPath: testsynth.Arch(t, dir, arch), Parallel: 4, CtxSize: 4 * 256, Threads: testThreads,
				})
				if err != nil {
					t.Fatal(err)
				}
				return e
			}
			e := newArchEngine()
			for i, p := range testmodel.ArchPrompts {
				if got := archTokens(t, e, p.Prompt, p.N); !slices.Equal(got, want.Alone[i]) {
					t.Errorf("alone, %q: got %v, want %v", p.Prompt, got, want.Alone[i])
				}
			}
			p := testmodel.ArchPrompts[0]
			if again := archTokens(t, e, p.Prompt, p.N); !slices.Equal(again, want.Alone[0]) {
				t.Errorf("again, %q: got %v, want %v", p.Prompt, again, want.Alone[0])
			}
			e.Close()

			// Batched on a fresh engine: cells in position order (see
			// TestGoldenAloneAndBatched).
			e = newArchEngine()
			defer e.Close()
			got := make([][]int32, len(testmodel.ArchPrompts))
			var wg sync.WaitGroup
			for i, p := range testmodel.ArchPrompts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i] = archTokens(t, e, p.Prompt, p.N)
				}()
			}
			wg.Wait()
			for i, p := range testmodel.ArchPrompts {
				if !slices.Equal(got[i], want.Batched[i]) {
					t.Errorf("batched, %q: got %v, want %v", p.Prompt, got[i], want.Batched[i])
				}
			}
		})
	}
}

// secondTurn runs first then second (n tokens each) on an engine of cfg,
// and second alone on a fresh one: it checks that the second turn
// generates what the fresh engine does, and returns its result and the
// engine (closed with t).
func secondTurn(t *testing.T, cfg engine.Config, first, second string, n int) (engine.Result, *engine.Engine) {
	t.Helper()
	fresh, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := archTokens(t, fresh, second, n)
	fresh.Close()
	e, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	archTokens(t, e, first, n)
	req := greedy(second, n)
	req.Logprobs = true
	_, lps, res := collectLogprobs(t, submit(t, e, req))
	var got []int32
	for _, lp := range lps {
		got = append(got, lp.Token)
	}
	if !slices.Equal(got, want) {
		t.Errorf("second turn: got %v, want %v (a fresh engine's)", got, want)
	}
	return res, e
}

// TestCheckpoints: on recurrent and hybrid models a second turn that
// shares only the first turn's prompt (not its answer) continues from
// the checkpoint taken at that prompt's end, instead of evaluating
// everything again, and generates what a fresh engine generates for it.
// On a plain KV cache no checkpoint is taken.
func TestCheckpoints(t *testing.T) {
	dir := t.TempDir()
	const first, second = "Once upon a time", "Once upon a time the little dog"
	for _, arch := range []string{"mamba", "rwkv7", "qwen35", "lfm2", "llama"} {
		t.Run(arch, func(t *testing.T) {
			cfg := engine.Config{ModelPath: testsynth.Arch(t, dir, arch), Parallel: 1, CtxSize: 256, Threads: testThreads, HostCacheBytes: 64 << 20}
			res, e := secondTurn(t, cfg, first, second, 8)
			st := e.Stats()
			prompt := len(tokenize(t, e, first))
			if arch == "llama" {
				if st.CheckpointsSaved != 0 {
					t.Errorf("%d checkpoints on a plain KV cache", st.CheckpointsSaved)
				}
				return
			}
			if res.Usage.CachedTokens != prompt || st.CheckpointHits != 1 || st.CheckpointsSaved != 2 || st.Checkpoints != 2 || st.CheckpointBytes <= 0 {
				t.Errorf("second turn: %d cached prompt tokens, want the first prompt's %d; stats %d hits, %d saved, %d held (%d bytes)",
					res.Usage.CachedTokens, prompt, st.CheckpointHits, st.CheckpointsSaved, st.Checkpoints, st.CheckpointBytes)
			}
		})
	}
}

// TestSlidingWindowReuse: on sliding-window models (a 64-token window)
// whose cache has dropped the positions behind the window, a prompt that
// shares only the start of a long cached one is evaluated again (cutting
// the cache back would leave its window empty), and one that continues
// the cached prompt continues from the checkpoint at its end; both
// generate what a fresh engine does.
func TestSlidingWindowReuse(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("The little dog ran. ", 30)
	for _, tc := range []struct {
		name, second string
		cached       bool
	}{
		{"shares the start", strings.Repeat("The little dog ran. ", 10) + "Once upon a time", false},
		{"continues", long + "Once upon a time", true},
	} {
		for _, arch := range []string{"gemma3", "gpt-oss"} {
			t.Run(tc.name+"/"+arch, func(t *testing.T) {
				cfg := engine.Config{ModelPath: testsynth.Arch(t, dir, arch), Parallel: 1, CtxSize: 2048, BatchSize: 32, Threads: testThreads, HostCacheBytes: 64 << 20}
				res, e := secondTurn(t, cfg, long, tc.second, 8)
				n := len(tokenize(t, e, long))
				if tc.cached && (res.Usage.CachedTokens != n || e.Stats().CheckpointHits != 1) {
					t.Errorf("%d cached tokens, %d checkpoint hits; want the first prompt's %d from its checkpoint", res.Usage.CachedTokens, e.Stats().CheckpointHits, n)
				}
				if !tc.cached && res.Usage.CachedTokens != 0 {
					t.Errorf("%d cached tokens, want none (the window before them is gone)", res.Usage.CachedTokens)
				}
			})
		}
	}
}

// TestUnservable: the engine refuses, with a reason, the models it cannot
// run token by token: diffusion models and models with an encoder.
func TestUnservable(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ arch, want string }{
		{"dream", "diffusion"},
		{"llada", "diffusion"},
		{"t5encoder", "encoder"},
	} {
		_, err := engine.New(context.Background(), engine.Config{ModelPath: testsynth.Arch(t, dir, tc.arch), Threads: testThreads})
		if !errors.Is(err, engine.ErrUnservable) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrUnservable saying %q", tc.arch, err, tc.want)
		}
	}
}

// TestCheckpointBudget: checkpoints stay within the host cache's budget,
// the oldest going first, and none is kept without one.
func TestCheckpointBudget(t *testing.T) {
	path := testsynth.Arch(t, t.TempDir(), "mamba")
	run := func(budget int64) engine.Stats {
		e, err := engine.New(context.Background(), engine.Config{ModelPath: path, Parallel: 4, CtxSize: 1024, Threads: testThreads, HostCacheBytes: budget})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		for _, p := range []string{"Once upon a time", "Hello", "The little dog", "A cat sat"} {
			archTokens(t, e, p, 2)
		}
		return e.Stats()
	}
	one := run(64 << 20)
	if one.Checkpoints != 4 || one.CheckpointBytes <= 0 {
		t.Fatalf("with room: %d checkpoints of %d bytes, want 4", one.Checkpoints, one.CheckpointBytes)
	}
	per := one.CheckpointBytes / 4
	if st := run(2*per + per/2); st.CheckpointsSaved != 4 || st.Checkpoints != 2 || st.CheckpointBytes != 2*per {
		t.Errorf("a budget of 2.5 checkpoints: %d taken, %d held (%d bytes), want 4 taken, 2 held (%d bytes)", st.CheckpointsSaved, st.Checkpoints, st.CheckpointBytes, 2*per)
	}
	if st := run(0); st.CheckpointsSaved != 0 || st.Checkpoints != 0 {
		t.Errorf("no host budget: %d checkpoints taken", st.CheckpointsSaved)
	}
}
