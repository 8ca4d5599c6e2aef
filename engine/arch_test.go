package engine_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
)

// archTokens runs req on e and returns the generated token ids.
func archTokens(t *testing.T, e *engine.Engine, prompt string, n int) []int32 {
	t.Helper()
	req := greedy(prompt, n)
	req.Logprobs = true
	_, lps, res := collectLogprobs(t, submit(t, e, req))
	if res.FinishReason == engine.FinishError {
		t.Fatalf("%q: %v", prompt, res.Err)
	}
	return tokensOf(lps)
}

// tokensOf is the tokens of logprobs entries.
func tokensOf(lps []engine.TokenLogprobs) []int32 {
	toks := make([]int32, len(lps))
	for i, lp := range lps {
		toks[i] = lp.Token
	}
	return toks
}

// waitState waits until s is in a slot in the given state.
func waitState(t *testing.T, e *engine.Engine, s *engine.Stream, state string) {
	t.Helper()
	poll(t, fmt.Sprintf("waiting for request %d to be in state %s", s.ID(), state), func() (bool, string) {
		infos, _ := e.Slots(context.Background())
		for _, in := range infos {
			if in.RequestID == s.ID() && in.State == state {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", infos)
	})
}

// batchVariant are architectures whose synthetic model's tokens depend,
// in llama.cpp itself, on which sequences share a pass (see
// llama.TestArchitectures): on a fresh engine's first slot they must match
// llama-server's; on every other path (another slot's cells, a batch) they
// are logged, not compared.
var batchVariant = map[string]bool{
	"phimoe": true, "plamo2": true, "minicpm3": true, "deepseek32": true, "glm-dsa": true,
	"dots3note": true, "cogvlm": true, "minimax-m3": true,
}

// pathVariant are architectures whose tokens, in llama.cpp itself,
// depend on how a sequence's tokens were grouped into passes: on the
// paths named they are logged, not compared. Both have sliding-window
// layers and layers that reuse another layer's KV. Through the binding
// alone, with no scheduler, evaluating gemma3n's prompt and its first
// generated token in one pass (as a resume does) gives, from the 10th
// token on, exactly the tokens those paths give; gemma4's differ from
// the 15th. Plain sliding-window models (gemma3, gpt-oss) and a plain KV
// cache give the same tokens either way.
var pathVariant = map[string][]string{
	"gemma3n": {"from another slot", "preempted and resumed"},
	"gemma4":  {"preempted and resumed"},
}

// TestArchitectureTable: the engine's scheduler gives llama-server's
// greedy tokens (testmodel.ArchGoldens) on a synthetic model of every
// architecture llama-server generates from, through each path a request
// can take:
//
//   - alone: each prompt in turn, and the first again after the others
//     (its cells reused where the memory allows, else evaluated again);
//   - from another slot: the first prompt while another slot, paused
//     mid-answer, holds it (its cells copied, a checkpoint restored or
//     evaluated again, as the memory allows);
//   - preempted: paused mid-answer in the only slot, which another
//     request takes, then continued (its history back from the host
//     cache or evaluated again);
//   - batched: every prompt at once on a fresh engine, in the same steps;
//   - per slot, batched: the same with a buffer per slot
//     (Config.KVPerSlot), as llama-server's -np 4 has, and its memory
//     estimated.
//
// Its engine sizes match llama.cpp's allocation: EstimateMemory's KV is
// what the context allocated for every memory kind, its Compute at least
// the compute buffers.
func TestArchitectureTable(t *testing.T) {
	dir := t.TempDir()
	archs := slices.Sorted(maps.Keys(testmodel.ArchGoldens))
	if len(archs) < 100 {
		t.Fatalf("%d architectures with goldens", len(archs))
	}
	for _, arch := range archs {
		t.Run(arch, func(t *testing.T) {
			if why, ok := testmodel.ArchNotGenerative[arch]; ok {
				t.Skip(why)
			}
			want := testmodel.ArchGoldens[arch]
			cfg := engine.Config{ModelPath: testsynth.Arch(t, dir, arch), Parallel: 2, CtxSize: 2 * 256, Threads: testThreads, HostCacheBytes: 16 << 20}
			newArchEngine := func(parallel int, perSlot bool) *engine.Engine {
				c := cfg
				c.Parallel, c.CtxSize, c.KVPerSlot = parallel, parallel*256, perSlot
				e, err := engine.New(context.Background(), c)
				if errors.Is(err, engine.ErrUnservable) {
					t.Skip(err)
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { e.Close() })
				return e
			}
			// check compares the tokens of a path, or logs them where
			// the architecture varies on it.
			check := func(path, prompt string, got, want []int32) {
				t.Helper()
				switch {
				case slices.Equal(got, want):
				case batchVariant[arch] && path != "alone, first",
					slices.Contains(pathVariant[arch], path):
					t.Logf("%s, %q: %v, llama-server %v", path, prompt, got, want)
				default:
					t.Errorf("%s, %q: got %v, want %v", path, prompt, got, want)
				}
			}
			e := newArchEngine(2, false)
			checkArchMemory(t, e, cfg)
			ps := testmodel.ArchPrompts
			for i, p := range ps {
				path := "alone"
				if i == 0 {
					path = "alone, first"
				}
				check(path, p.Prompt, archTokens(t, e, p.Prompt, p.N), want.Alone[i])
			}
			check("again", ps[0].Prompt, archTokens(t, e, ps[0].Prompt, ps[0].N), want.Alone[0])

			// From another slot: the first prompt again, arriving while
			// another slot evaluates it, takes that slot's cells once they
			// are there (copied, from a checkpoint, or evaluated again, as
			// the memory allows); then both decode in the same steps.
			cpu := engine.NewCPU(1)
			c := cfg
			c.CPU = cpu
			e2, err := engine.New(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			defer e2.Close()
			hold := engine.HoldCPU(cpu)
			req := greedy(ps[0].Prompt, ps[0].N)
			req.Logprobs = true
			a := submit(t, e2, req)
			waitState(t, e2, a, "prefill")
			b := submit(t, e2, req)
			hold()
			for _, s := range []*engine.Stream{a, b} {
				_, lps, _ := collectLogprobs(t, s)
				check("from another slot", ps[0].Prompt, tokensOf(lps), want.Alone[0])
			}

			// Preempted: the first prompt runs in the only slot; the second,
			// of a better class, arrives before its first decoding step and
			// takes the slot; the first resumes after it.
			cpu = engine.NewCPU(1)
			c = cfg
			c.Parallel, c.CtxSize, c.CPU = 1, 256, cpu
			e1, err := engine.New(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			defer e1.Close()
			hold = engine.HoldCPU(cpu)
			low := greedy(ps[0].Prompt, ps[0].N)
			low.Logprobs, low.Priority = true, 1
			l := submit(t, e1, low)
			waitState(t, e1, l, "prefill")
			high := greedy(ps[1].Prompt, ps[1].N)
			high.Logprobs = true
			h := submit(t, e1, high)
			hold()
			_, lps, _ := collectLogprobs(t, h)
			check("preempting", ps[1].Prompt, tokensOf(lps), want.Alone[1])
			_, lps, res := collectLogprobs(t, l)
			check("preempted and resumed", ps[0].Prompt, tokensOf(lps), want.Alone[0])
			if res.Preemptions != 1 {
				t.Errorf("the first request was preempted %d times, want 1", res.Preemptions)
			}

			// Batched on a fresh engine: cells in position order (see
			// TestGoldenAloneAndBatched).
			for _, perSlot := range []bool{false, true} {
				path := "batched"
				if perSlot {
					path = "per slot, batched"
				}
				e4 := newArchEngine(4, perSlot)
				if perSlot {
					c := cfg
					c.Parallel, c.CtxSize, c.KVPerSlot = 4, 4*256, true
					checkArchMemory(t, e4, c)
				}
				got := make([][]int32, len(ps))
				var wg sync.WaitGroup
				for i, p := range ps {
					wg.Add(1)
					go func() {
						defer wg.Done()
						got[i] = archTokens(t, e4, p.Prompt, p.N)
					}()
				}
				wg.Wait()
				for i, p := range ps {
					check(path, p.Prompt, got[i], want.Batched[i])
				}
			}
		})
	}
}

// checkArchMemory checks e's EstimateMemory against what llama.cpp
// allocated for it.
func checkArchMemory(t *testing.T, e *engine.Engine, cfg engine.Config) {
	t.Helper()
	md, err := gguf.ReadMetadata(cfg.ModelPath)
	if err != nil {
		t.Fatal(err)
	}
	est, err := engine.EstimateMemory(md, cfg)
	if err != nil {
		t.Fatal(err)
	}
	info := e.Info()
	if est.KV != info.Memory.Context {
		t.Errorf("%s memory: EstimateMemory's KV %d B, llama.cpp allocated %d B", info.MemoryKind, est.KV, info.Memory.Context)
	}
	if est.Compute < info.Memory.Compute {
		t.Errorf("EstimateMemory's Compute %d B, below llama.cpp's compute buffers' %d B", est.Compute, info.Memory.Compute)
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

// TestCheckpointsShareTheHostBudget: checkpoints and the host cache's
// entries stay within one budget together, the least recently used of
// either going first. On a hybrid model with two slots, a long first
// prompt and a longer second one leave a checkpoint each; a third takes
// the first's slot (it loses less), pushing its history into the host cache (its checkpoint
// goes with the slot's cache), and leaves its own checkpoint. With room
// for the entry and one and a half checkpoints, the second prompt's
// checkpoint (the least recently used) goes.
func TestCheckpointsShareTheHostBudget(t *testing.T) {
	path := testsynth.Arch(t, t.TempDir(), "qwen35")
	long := strings.Repeat("Once upon a time there was a dog. ", 12)
	run := func(budget int64) engine.Stats {
		e, err := engine.New(context.Background(), engine.Config{ModelPath: path, Parallel: 2, CtxSize: 1024, Threads: testThreads, HostCacheBytes: budget})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		for _, p := range []string{long, strings.Repeat("The little cat sat on a mat. ", 16), "Hello"} {
			archTokens(t, e, p, 2)
		}
		return e.Stats()
	}
	roomy := run(64 << 20)
	if roomy.HostCacheEntries != 1 || roomy.Checkpoints != 2 {
		t.Fatalf("with room: %d host entries, %d checkpoints; want 1 and 2", roomy.HostCacheEntries, roomy.Checkpoints)
	}
	per := roomy.CheckpointBytes / 2
	budget := roomy.HostCacheBytes + per + per/2
	st := run(budget)
	if st.HostCacheBytes+st.CheckpointBytes > budget || st.HostCacheEntries != 1 || st.Checkpoints != 1 {
		t.Errorf("a budget of %d bytes (the entry and 1.5 checkpoints): %d host entries of %d bytes and %d checkpoints of %d bytes; want 1 and 1, within it",
			budget, st.HostCacheEntries, st.HostCacheBytes, st.Checkpoints, st.CheckpointBytes)
	}
}

// TestTiersKeepEveryMemoryKind: on a synthetic model of each memory kind,
// a conversation's history pushed out of its slot comes back from the
// host cache, and after a restart from the disk tier, and each next turn
// generates what a fresh engine generates for it.
func TestTiersKeepEveryMemoryKind(t *testing.T) {
	dir := t.TempDir()
	for _, arch := range []string{"llama", "gemma3", "deepseek2", "mamba", "qwen35"} {
		t.Run(arch, func(t *testing.T) {
			cfg := engine.Config{ModelPath: testsynth.Arch(t, dir, arch), Parallel: 1, CtxSize: 512, Threads: testThreads}
			first := greedy(strings.Repeat("Once upon a time there was a dog. ", 8), 8)
			turn := func(e *engine.Engine, r engine.Request) ([]int32, engine.Result) {
				t.Helper()
				r.Logprobs = true
				_, lps, res := collectLogprobs(t, submit(t, e, r))
				if res.FinishReason == engine.FinishError {
					t.Fatal(res.Err)
				}
				return tokensOf(lps), res
			}
			fresh, err := engine.New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			gen, _ := turn(fresh, first)
			// The next turn: the whole history, then more.
			history := append(tokens(t, fresh, first.Prompt), gen...)
			next := engine.Request{Tokens: append(slices.Clone(history), tokens(t, fresh, " The end.")[1:]...), MaxTokens: 8, IgnoreEOS: true}
			want, _ := turn(fresh, next)
			// The turn after, which a restarted engine finds on disk.
			after := engine.Request{Tokens: append(append(slices.Clone(next.Tokens), want...), tokens(t, fresh, " Then?")[1:]...), MaxTokens: 8, IgnoreEOS: true}
			wantAfter, _ := turn(fresh, after)
			fresh.Close()

			tiered := cfg
			tiered.HostCacheBytes, tiered.DiskCacheDir = 16<<20, filepath.Join(t.TempDir(), "disk")
			e, err := engine.New(context.Background(), tiered)
			if err != nil {
				t.Fatal(err)
			}
			turn(e, first)
			turn(e, greedy("Hello", 2)) // takes the slot: the history goes to the host cache
			got, res := turn(e, next)
			if !slices.Equal(got, want) {
				t.Errorf("from the host cache: got %v, want %v", got, want)
			}
			if st := e.Stats(); st.HostCacheRestored != 1 || res.Usage.CachedTokens < len(history)-1 {
				t.Errorf("from the host cache: %d restores, %d of %d prompt tokens cached; want 1 and the history's %d (but its last token, never evaluated)",
					st.HostCacheRestored, res.Usage.CachedTokens, res.Usage.PromptTokens, len(history)-1)
			}
			turn(e, greedy("Hello", 2))
			e.Close() // the host cache goes to disk

			e, err = engine.New(context.Background(), tiered)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if got, _ := turn(e, after); !slices.Equal(got, wantAfter) {
				t.Errorf("from the disk tier: got %v, want %v", got, wantAfter)
			}
			if st := e.Stats(); st.DiskCacheHits != 1 {
				t.Errorf("from the disk tier: %d hits, want 1", st.DiskCacheHits)
			}
		})
	}
}

// TestSharedSystemPromptCheckpoint: on hybrid models, whose memory cannot
// be cut back at will, a prompt that shares a long prefix (a system
// prompt) with another slot's cache pauses its prefill at the prefix's
// end for a checkpoint there, and a third prompt with the same system
// prompt, in a third slot, starts from it: the system prompt is evaluated
// twice, not three times. On sliding-window models slots share no cells
// (see TestSlidingWindowSlotsShareNoCells). Each answer is what a fresh
// engine gives.
func TestSharedSystemPromptCheckpoint(t *testing.T) {
	system := strings.Repeat("The system says hello to the agent. ", 12)
	users := []string{"\nUser: alpha beta", "\nUser: bravo delta", "\nUser: charlie echo"}
	for _, arch := range []string{"qwen35", "mamba"} {
		t.Run(arch, func(t *testing.T) {
			cfg := engine.Config{ModelPath: testsynth.Arch(t, t.TempDir(), arch), Parallel: 3, CtxSize: 3 * 512, BatchSize: 32, Threads: testThreads, HostCacheBytes: 16 << 20}
			var want [][]int32
			for _, u := range users {
				fresh, err := engine.New(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, archTokens(t, fresh, system+u, 4))
				fresh.Close()
			}
			e, err := engine.New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			var cached []int
			for i, u := range users {
				req := greedy(system+u, 4)
				req.Logprobs = true
				_, lps, res := collectLogprobs(t, submit(t, e, req))
				if got := tokensOf(lps); !slices.Equal(got, want[i]) || res.Err != nil {
					t.Errorf("prompt %d: got %v (%v), want %v (a fresh engine's)", i, got, res.Err, want[i])
				}
				cached = append(cached, res.Usage.CachedTokens)
			}
			system := len(tokens(t, e, system))
			if cached[1] != 0 || cached[2] < system {
				t.Errorf("cached prompt tokens %v: want none for the second prompt, the system prompt's %d for the third", cached, system)
			}
			if st := e.Stats(); st.CheckpointHits != 1 {
				t.Errorf("%d checkpoint hits, want 1", st.CheckpointHits)
			}
		})
	}
}

// TestSlidingWindowSlotsShareNoCells: on a sliding-window model, three
// prompts with one long system prompt (about 350 tokens: more than the
// window's cells, a 64-token window for 3 slots and a 32-token pass,
// padded to 256) in three slots each evaluate it: cells shared by two
// sequences would fill the window's cache, which llama.cpp then cannot
// place a batch in. Each answer is what a fresh engine gives.
func TestSlidingWindowSlotsShareNoCells(t *testing.T) {
	system := strings.Repeat("The system says hello to the agent. ", 12)
	cfg := engine.Config{ModelPath: testsynth.Arch(t, t.TempDir(), "gemma3"), Parallel: 3, CtxSize: 3 * 512, BatchSize: 32, Threads: testThreads, HostCacheBytes: 16 << 20}
	e, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for i, u := range []string{"\nUser: alpha beta", "\nUser: bravo delta", "\nUser: charlie echo"} {
		req := greedy(system+u, 4)
		req.Logprobs = true
		_, lps, res := collectLogprobs(t, submit(t, e, req))
		fresh, err := engine.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := archTokens(t, fresh, system+u, 4)
		fresh.Close()
		if got := tokensOf(lps); !slices.Equal(got, want) || res.Err != nil || res.Usage.CachedTokens != 0 {
			t.Errorf("prompt %d: got %v (%v, %d tokens cached), want %v (a fresh engine's), none cached", i, got, res.Err, res.Usage.CachedTokens, want)
		}
	}
}

// TestTiersKeepCheckpoints: a recurrent or hybrid conversation that lost
// its slot comes back on its next turn even when that turn shares only
// its last prompt, not its answer (the client sends the answer back in
// other tokens): from the host cache when another request took the slot,
// from the disk tier after a restart. The host entry, and the file the
// closing engine wrote, keep the slot's checkpoints, and the restore goes
// back to the one at the prompt's end. The answer is what a fresh engine
// gives.
func TestTiersKeepCheckpoints(t *testing.T) {
	first := strings.TrimSpace(strings.Repeat("Once upon a time there was a dog. ", 8))
	second := first + " The dog ran home."
	for _, arch := range []string{"qwen35", "mamba"} {
		for _, tier := range []string{"host", "disk"} {
			t.Run(arch+"/"+tier, func(t *testing.T) {
				cfg := engine.Config{ModelPath: testsynth.Arch(t, t.TempDir(), arch), Parallel: 1, CtxSize: 512, Threads: testThreads, HostCacheBytes: 16 << 20}
				fresh, err := engine.New(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				want := archTokens(t, fresh, second, 8)
				fresh.Close()
				if tier == "disk" {
					cfg.DiskCacheDir = t.TempDir()
				}
				e, err := engine.New(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				archTokens(t, e, first, 8)
				if tier == "host" {
					// Takes the slot, and holds more of the pool than is
					// free beside it: the restore counts the cells it frees.
					archTokens(t, e, strings.Repeat("Hello there. ", 30), 2)
				} else {
					e.Close() // the slot's cache goes to disk
					if e, err = engine.New(context.Background(), cfg); err != nil {
						t.Fatal(err)
					}
				}
				defer e.Close()
				req := greedy(second, 8)
				req.Logprobs = true
				_, lps, res := collectLogprobs(t, submit(t, e, req))
				if got := tokensOf(lps); !slices.Equal(got, want) {
					t.Errorf("second turn: got %v, want %v (a fresh engine's)", got, want)
				}
				n := len(tokens(t, e, first))
				st := e.Stats()
				restores := st.HostCacheRestored
				if tier == "disk" {
					restores = st.DiskCacheHits
				}
				if res.Usage.CachedTokens != n || restores != 1 || st.CheckpointHits != 1 {
					t.Errorf("second turn: %d prompt tokens cached, %d %s restores, %d checkpoint hits; want the first prompt's %d, 1, 1",
						res.Usage.CachedTokens, restores, tier, st.CheckpointHits, n)
				}
			})
		}
	}
}

// TestFollowerCheckpoint: on a hybrid model, two prompts with one long
// system prompt arriving together evaluate it once (the second follows
// the first and takes its cells), and the follower checkpoints where the
// prompts part, so that a third prompt with it, later and in a third
// slot, starts from there too.
func TestFollowerCheckpoint(t *testing.T) {
	system := strings.Repeat("The system says hello to the agent. ", 12)
	users := []string{"\nUser: alpha beta", "\nUser: bravo delta", "\nUser: charlie echo"}
	cpu := engine.NewCPU(1)
	cfg := engine.Config{ModelPath: testsynth.Arch(t, t.TempDir(), "qwen35"), Parallel: 3, CtxSize: 3 * 512, BatchSize: 32, Threads: testThreads, HostCacheBytes: 16 << 20, CPU: cpu}
	e, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var got [][]int32
	var cached []int
	run := func(ss ...*engine.Stream) {
		for _, s := range ss {
			_, lps, res := collectLogprobs(t, s)
			got, cached = append(got, tokensOf(lps)), append(cached, res.Usage.CachedTokens)
		}
	}
	req := func(i int) engine.Request {
		r := greedy(system+users[i], 4)
		r.Logprobs = true
		return r
	}
	hold := engine.HoldCPU(cpu)
	a := submit(t, e, req(0))
	waitState(t, e, a, "prefill")
	b := submit(t, e, req(1))
	hold()
	run(a, b)
	run(submit(t, e, req(2)))
	n := len(tokens(t, e, system))
	if cached[1] < n || cached[2] < n {
		t.Errorf("cached prompt tokens %v: want the system prompt's %d for the second and third", cached, n)
	}
	cfg.CPU = nil
	for i := range users {
		fresh, err := engine.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if want := archTokens(t, fresh, system+users[i], 4); !slices.Equal(got[i], want) {
			t.Errorf("prompt %d: got %v, want %v (a fresh engine's)", i, got[i], want)
		}
		fresh.Close()
	}
}

// TestRecurrentSlotsNeedNoCells: a recurrent model keeps one state per
// sequence, whatever its length, so its slots do not share a pool of
// cells: two prompts that together pass the context, each within it, run
// at once (on a KV cache the second would wait for the first's cells),
// each giving what it gives alone.
func TestRecurrentSlotsNeedNoCells(t *testing.T) {
	cpu := engine.NewCPU(1)
	cfg := engine.Config{ModelPath: testsynth.Arch(t, t.TempDir(), "mamba"), Parallel: 2, CtxSize: 512, CtxPerRequest: 512, Threads: testThreads, CPU: cpu}
	e, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if info := e.Info(); info.KVCells != 2*512 || info.MemoryKind != engine.MemoryRecurrent {
		t.Errorf("%s memory: a pool of %d cells, want 2 × 512", info.MemoryKind, info.KVCells)
	}
	prompts := []string{strings.Repeat("Once upon a time there was a dog. ", 11), strings.Repeat("The little cat sat on a mat. ", 12)}
	hold := engine.HoldCPU(cpu)
	req := func(p string) engine.Request {
		r := greedy(p, 4)
		r.Logprobs = true
		return r
	}
	a := submit(t, e, req(prompts[0]))
	waitState(t, e, a, "prefill")
	b := submit(t, e, req(prompts[1]))
	hold()
	var got [][]int32
	for _, s := range []*engine.Stream{a, b} {
		_, lps, res := collectLogprobs(t, s)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		got = append(got, tokensOf(lps))
	}
	// The second arrived during the first's first pass: in the steps
	// after it both had tokens in the batch.
	if st := e.Stats(); st.BusySlots <= st.Steps {
		t.Errorf("%d slots busy over %d steps: the prompts did not run at once", st.BusySlots, st.Steps)
	}
	cfg.CPU = nil
	for i, p := range prompts {
		fresh, err := engine.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if want := archTokens(t, fresh, p, 4); !slices.Equal(got[i], want) {
			t.Errorf("prompt %d: got %v, want %v (alone)", i, got[i], want)
		}
		fresh.Close()
	}
}
