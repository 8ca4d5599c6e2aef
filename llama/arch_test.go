package llama_test

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/llama"
)

// batchVariant are architectures whose synthetic model's tokens depend,
// in llama.cpp itself, on which sequences share a batch: llama-server's
// own batched run differs from its alone run (plamo2, cogvlm), or this
// test's batch (all prompts in one pass) rounds differently from
// llama-server's steps and a near-tie flips. Their batched tokens are
// logged, not compared; alone they must match.
var batchVariant = map[string]bool{
	"phimoe": true, "plamo2": true, "minicpm3": true, "deepseek32": true, "glm-dsa": true,
	"dots3note": true, "cogvlm": true, "minimax-m3": true,
}

// TestArchitectures loads a synthetic model (testsynth.Arch) of every
// architecture llama.cpp knows, but those gguf.ArchUnsupported gives a
// reason for, and checks its greedy tokens (end of generation banned, as
// llama-server's ignore_eos does) against llama-server's
// (testmodel.ArchGoldens), one prompt at a time and all of them in the
// same steps. Where llama-server itself fails (testmodel.ArchPeerErrors),
// the binding must still generate, the same tokens alone and batched.
// testmodel.ArchNotGenerative are loaded only.
func TestArchitectures(t *testing.T) {
	var prompts []string
	var n []int
	for _, p := range testmodel.ArchPrompts {
		prompts, n = append(prompts, p.Prompt), append(n, p.N)
	}
	archs := llama.Architectures()
	if len(archs) < 147 {
		t.Errorf("llama.cpp knows %d architectures, want at least b10573's 147", len(archs))
	}
	for _, arch := range archs {
		t.Run(arch, func(t *testing.T) {
			if why, ok := gguf.ArchUnsupported[arch]; ok {
				t.Skip(why)
			}
			m, err := llama.LoadModel(context.Background(), testsynth.Arch(t, archDir, arch))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if why, ok := testmodel.ArchNotGenerative[arch]; ok {
				t.Skipf("loads; not generated from: %s", why)
			}
			want, golden := testmodel.ArchGoldens[arch]
			peerErr, failed := testmodel.ArchPeerErrors[arch]
			if !golden && !failed {
				t.Fatalf("no golden for %s: run scripts/arch-goldens.sh", arch)
			}
			// llama-server's ignore_eos bans the end-of-generation tokens.
			noEOG := llama.SamplerParams{LogitBias: map[llama.Token]float32{}}
			for tok := range llama.Token(m.NVocab()) {
				if m.IsEOG(tok) {
					noEOG.LogitBias[tok] = float32(math.Inf(-1))
				}
			}
			var alone [][]int32
			for i, p := range prompts {
				alone = append(alone, greedyTokensWith(t, m, noEOG, []string{p}, []int{n[i]})[0])
			}
			batched := greedyTokensWith(t, m, noEOG, prompts, n)
			if !golden {
				t.Logf("llama-server fails on it (%s); the engine's alone and batched tokens are compared", peerErr)
				want = testmodel.ArchGolden{Alone: alone, Batched: alone}
			}
			for i, p := range prompts {
				if !slices.Equal(alone[i], want.Alone[i]) {
					t.Errorf("alone, %q: got %v, want %v", p, alone[i], want.Alone[i])
				}
				if batchVariant[arch] {
					t.Logf("batched, %q: %v, llama-server %v", p, batched[i], want.Batched[i])
				} else if !slices.Equal(batched[i], want.Batched[i]) {
					t.Errorf("batched, %q: got %v, want %v", p, batched[i], want.Batched[i])
				}
			}
		})
	}
}

// TestMemoryNeeds checks, for every architecture TestArchitectures loads,
// that llama.MemoryNeeds (llama.cpp's sizing without allocating) gives
// what a context then allocates: the context's memory (KV cells of every
// kind, recurrent states) and compute buffers to the byte, the weights
// within their alignment padding; with an F16 cache and, where the heads
// are whole blocks, a Q8_0 one (-ctk q8_0 -ctv q8_0). The context has
// more cells than the sliding windows, so that a sliding-window cache is
// smaller than a full one, and four sequences, so that recurrent states
// count four times.
func TestMemoryNeeds(t *testing.T) {
	p := llama.ContextParams{NCtx: 2048, NBatch: 64, NSeqMax: 4, Threads: 1, Unified: true}
	for _, arch := range llama.Architectures() {
		t.Run(arch, func(t *testing.T) {
			if why, ok := gguf.ArchUnsupported[arch]; ok {
				t.Skip(why)
			}
			path := testsynth.Arch(t, archDir, arch)
			m, err := llama.LoadModel(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			q8 := p
			q8.TypeK, q8.TypeV = llama.CacheQ8_0, llama.CacheQ8_0
			hk, hv := m.HeadSizes()
			for _, p := range []llama.ContextParams{p, q8} {
				if llama.CheckCacheTypes(p.TypeK, p.TypeV, true, hk, hv) != nil {
					continue // heads that are not whole blocks
				}
				// llama.cpp may refuse a quantized V where its automatic
				// flash attention turns itself off (grok): both alike.
				need, nerr := llama.MemoryNeeds(path, p)
				c, cerr := llama.NewContext(m, p)
				if nerr != nil || cerr != nil {
					if p == q8 && nerr != nil && cerr != nil {
						t.Logf("%s cache refused: %v", p.TypeK, nerr)
						continue
					}
					t.Fatalf("%s cache: MemoryNeeds: %v; NewContext: %v", p.TypeK, nerr, cerr)
				}
				got := c.Memory()
				c.Close()
				if need.Context != got.Context || need.Compute != got.Compute {
					t.Errorf("%s cache: MemoryNeeds %+v, allocated %+v", p.TypeK, need, got)
				}
				if d := need.Weights - got.Weights; d < -got.Weights/100 || d > got.Weights/100 {
					t.Errorf("weights: MemoryNeeds %d, allocated %d", need.Weights, got.Weights)
				}
				t.Logf("%s cache: context %d B, compute %d B, weights %d B", p.TypeK, got.Context, got.Compute, got.Weights)
			}
		})
	}
}

// TestFailuresSayWhy: a model llama.cpp cannot load, and a context it
// cannot create, fail with the first error llama.cpp logged, not a
// generic one: an architecture it does not know (a synthetic llama
// renamed), and a quantized V cache where its automatic flash attention
// turns itself off (grok).
func TestFailuresSayWhy(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(testsynth.Arch(t, archDir, "llama"))
	if err != nil {
		t.Fatal(err)
	}
	renamed := filepath.Join(dir, "renamed.gguf")
	if err := os.WriteFile(renamed, bytes.ReplaceAll(b, []byte("llama"), []byte("llamb")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := llama.LoadModel(context.Background(), renamed); err == nil || !strings.Contains(err.Error(), "unknown model architecture: 'llamb'") {
		t.Errorf("load a model of architecture llamb: %v, want llama.cpp's reason", err)
	}
	m, err := llama.LoadModel(context.Background(), testsynth.Arch(t, archDir, "grok"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	_, err = llama.NewContext(m, llama.ContextParams{NCtx: 512, NSeqMax: 1, Threads: 1, TypeK: llama.CacheQ8_0, TypeV: llama.CacheQ8_0})
	if err == nil || !strings.Contains(err.Error(), "quantized V cache requires flash_attn") {
		t.Errorf("a Q8_0 V cache on grok: %v, want llama.cpp's reason", err)
	}
}
