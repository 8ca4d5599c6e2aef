package engine_test

import (
	"context"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

// kvShape is a synthetic model whose heads are 64 values wide (256 / 4),
// two blocks of a quantized cache type; the test models' heads (8 and 16
// wide) are not whole blocks.
var kvShape = gguf.Shape{Embd: 256, Layers: 4, Heads: 4, HeadsKV: 2, FF: 512, Vocab: 2048, Ctx: 1024, Type: "q8_0"}

// kvModel writes the kvShape model into a temporary directory.
func kvModel(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kv64.gguf")
	if err := gguf.WriteSynthetic(path, kvShape, 1); err != nil {
		t.Fatal(err)
	}
	return path
}

// greedyTokens generates n tokens greedily for prompt and returns their
// ids.
func greedyTokens(t testing.TB, e *engine.Engine, prompt string, n int) []int32 {
	t.Helper()
	req := greedy(prompt, n)
	req.Logprobs = true
	s := submit(t, e, req)
	var toks []int32
	for {
		c, err := s.Recv(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, lp := range c.Logprobs {
			toks = append(toks, lp.Token)
		}
	}
	if res := s.Result(); res.Err != nil {
		t.Fatalf("%q: %v", prompt, res.Err)
	}
	return toks
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// firstLogprobs returns the log-probabilities of the most likely tokens
// (up to 100) of the first token generated for prompt.
func firstLogprobs(t testing.TB, e *engine.Engine, prompt string) map[int32]float32 {
	t.Helper()
	req := greedy(prompt, 1)
	req.Logprobs, req.TopLogprobs = true, engine.MaxTopLogprobs
	s := submit(t, e, req)
	out := map[int32]float32{}
	for {
		c, err := s.Recv(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, lp := range c.Logprobs {
			for _, top := range lp.Top {
				out[top.Token] = top.Logprob
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%q: no logprobs", prompt)
	}
	return out
}

// logprobDeviation is the mean absolute difference of the log-
// probabilities of the tokens both a and b list.
func logprobDeviation(a, b map[int32]float32) float64 {
	var sum float64
	n := 0
	for tok, x := range a {
		if y, ok := b[tok]; ok {
			sum += math.Abs(float64(x - y))
			n++
		}
	}
	if n == 0 {
		return math.Inf(1)
	}
	return sum / float64(n)
}

// TestQuantizedKV: an engine with a Q8_0 (and a Q4_0) KV cache loads,
// reports its types and generates every token asked for. Its first
// token's distribution (the log-probabilities of the 100 most likely
// tokens, after a prompt whose attention read the quantized cache) moves
// away from F16's, less with Q8_0 than with Q4_0: the types reach
// llama.cpp, and Q8_0 keeps more of the values. The greedy outputs'
// agreement with F16's is logged (the random weights' distributions are
// flat, so that near ties flip early).
func TestQuantizedKV(t *testing.T) {
	path := kvModel(t)
	const n = 32
	prompts := []string{"Once upon a time", "Hello", "The little dog"}
	outputs := map[string][][]int32{}
	firsts := map[string][]map[int32]float32{}
	for _, types := range [][2]string{{"", ""}, {"q8_0", "q8_0"}, {"q4_0", "q4_0"}} {
		e, err := engine.New(context.Background(), engine.Config{
			ModelPath: path, CtxSize: 1024, Parallel: 1, Threads: testThreads,
			CacheTypeK: types[0], CacheTypeV: types[1],
		})
		if err != nil {
			t.Fatalf("-ctk %q -ctv %q: %v", types[0], types[1], err)
		}
		info := e.Info()
		typ := types[0]
		if typ == "" {
			typ = "f16"
		}
		if info.CacheTypeK != typ || info.CacheTypeV != typ {
			t.Errorf("Info's cache types %s/%s, want %s", info.CacheTypeK, info.CacheTypeV, typ)
		}
		for _, p := range prompts {
			toks := greedyTokens(t, e, p, n)
			if len(toks) != n {
				t.Errorf("%s %q: %d tokens, want %d", typ, p, len(toks), n)
			}
			outputs[typ] = append(outputs[typ], toks)
			firsts[typ] = append(firsts[typ], firstLogprobs(t, e, p))
		}
		e.Close()
	}
	dev := map[string]float64{}
	for _, typ := range []string{"q8_0", "q4_0"} {
		for i, p := range prompts {
			d := logprobDeviation(firsts["f16"][i], firsts[typ][i])
			dev[typ] += d / float64(len(prompts))
			m := commonPrefix(outputs["f16"][i], outputs[typ][i])
			t.Logf("%s vs f16, %q: the first %d of %d greedy tokens agree; first token's log-probabilities differ by %.4f on average", typ, p, m, n, d)
		}
	}
	if !(dev["q8_0"] > 0 && dev["q8_0"] < dev["q4_0"]) {
		t.Errorf("mean log-probability deviation from f16: q8_0 %.5f, q4_0 %.5f; want 0 < q8_0 < q4_0", dev["q8_0"], dev["q4_0"])
	}
}

// TestQuantizedKVRefused: what llama.cpp cannot run is refused by New
// with an error naming the flag and the reason, before llama.cpp
// refuses it with a generic failure (a quantized V without flash
// attention) or runs it wrongly (heads that are not whole blocks); an
// unknown type lists the names.
func TestQuantizedKVRefused(t *testing.T) {
	path := kvModel(t)
	stories := testmodel.Path(t, testmodel.Stories260K)
	for _, tc := range []struct {
		name string
		cfg  engine.Config
		want string
	}{
		{"quantized V without flash attention", engine.Config{ModelPath: path, CacheTypeK: "q8_0", CacheTypeV: "q8_0", NoFlashAttn: true},
			"--cache-type-v q8_0 needs flash attention"},
		{"heads of 8 values in q8_0 K", engine.Config{ModelPath: stories, CacheTypeK: "q8_0"},
			"--cache-type-k q8_0: the model's attention heads are 8 values wide (key), not a multiple of the type's block of 32"},
		{"heads of 8 values in q4_0 V", engine.Config{ModelPath: stories, CacheTypeV: "q4_0"},
			"--cache-type-v q4_0: the model's attention heads are 8 values wide (value)"},
	} {
		tc.cfg.CtxSize, tc.cfg.Parallel, tc.cfg.Threads = 256, 1, testThreads
		e, err := engine.New(context.Background(), tc.cfg)
		if err == nil {
			e.Close()
		}
		if !errors.Is(err, llama.ErrCacheType) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrCacheType saying %q", tc.name, err, tc.want)
		}
	}
	// A quantized K without flash attention runs.
	e, err := engine.New(context.Background(), engine.Config{ModelPath: path, CtxSize: 256, Parallel: 1, Threads: testThreads, CacheTypeK: "q8_0", NoFlashAttn: true})
	if err != nil {
		t.Fatalf("q8_0 K without flash attention: %v", err)
	}
	if toks := greedyTokens(t, e, "Hello", 8); len(toks) != 8 {
		t.Errorf("q8_0 K without flash attention: %d tokens, want 8", len(toks))
	}
	e.Close()
	_, err = engine.New(context.Background(), engine.Config{ModelPath: path, CacheTypeV: "q8"})
	if err == nil || !strings.Contains(err.Error(), `--cache-type-v: KV cache type "q8": want one of f16, f32, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1`) {
		t.Errorf("unknown type: %v", err)
	}
}

// TestKVCapacity measures what a quantized KV cache buys, on the model
// file $CORRAL_KV_CAPACITY names (such as the synthetic 135M model:
// corral synth --shape 135m -o FILE), with $CORRAL_BENCH_THREADS threads
// (default 2). It takes minutes: run it by hand.
//
// Capacity: a fixed memory budget, the KV bytes of 8 conversations of
// 4,096 tokens in F16 by EstimateMemory (plus 1 % for the cell headers
// of a saved state), holds floor(budget / a conversation's KV) of them
// by the estimator's arithmetic, for F16 and for Q8_0. The run confirms
// it with the host cache (Config.HostCacheBytes = the budget): one slot,
// 16 conversations of 4,095 distinct random tokens one after another,
// each pushing the one before out of the slot into the host cache, which
// keeps the most recent that fit; then the oldest of them but one is
// asked again, and must be found there.
//
// Agreement: greedy output of Q8_0 against F16 on the goldens' prompts,
// as the matching prefix in tokens (logged, not asserted).
func TestKVCapacity(t *testing.T) {
	path := os.Getenv("CORRAL_KV_CAPACITY")
	if path == "" {
		t.Skip("set CORRAL_KV_CAPACITY to a model file whose heads are whole blocks of 32 (corral synth --shape 135m)")
	}
	threads := benchThreads()
	md, err := gguf.ReadMetadata(path)
	if err != nil {
		t.Fatal(err)
	}
	const convTokens, convs = 4096, 16
	kvOf := func(typ string, n int) int64 {
		fp, err := engine.EstimateMemory(md, engine.Config{ModelPath: path, CtxSize: n * convTokens, Parallel: n, CacheTypeK: typ, CacheTypeV: typ})
		if err != nil {
			t.Fatal(err)
		}
		return fp.KV
	}
	budget := kvOf("f16", 8) * 101 / 100
	t.Logf("model %s, budget %d bytes (8 F16 conversations of %d tokens: %d, + 1%%)", filepath.Base(path), budget, convTokens, kvOf("f16", 8))
	fits := map[string]int{}
	for _, typ := range []string{"f16", "q8_0"} {
		perConv := kvOf(typ, 1) // 4,096 cells: a whole number of 256-cell pads
		want := int(budget / perConv)
		e, err := engine.New(context.Background(), engine.Config{
			ModelPath: path, CtxSize: convTokens, Parallel: 1, Threads: threads,
			CacheTypeK: typ, CacheTypeV: typ, HostCacheBytes: budget,
		})
		if err != nil {
			t.Fatal(err)
		}
		conv := func(i int) []int32 {
			toks := make([]int32, convTokens-1)
			for j := range toks {
				toks[j] = int32(3 + (i*7919+j*104729+j*j*31)%(e.Info().VocabSize-3))
			}
			return toks
		}
		start := time.Now()
		for i := range convs {
			if _, res := collect(t, submit(t, e, engine.Request{Tokens: conv(i), MaxTokens: 1, IgnoreEOS: true})); res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		st := e.Stats()
		// The last conversation is in the slot; the host cache holds
		// the ones before it that fit.
		held := st.HostCacheEntries
		fits[typ] = held
		t.Logf("%s: a conversation's KV %d bytes, estimator: %d fit; host cache after %d conversations: %d entries, %d bytes (%d a state); %.0f s",
			typ, perConv, want, convs, held, st.HostCacheBytes, st.HostCacheBytes/int64(max(held, 1)), time.Since(start).Seconds())
		if held < want-1 || held > want {
			t.Errorf("%s: the host cache holds %d conversations, the estimator says %d (at most one fewer: a state's cell headers)", typ, held, want)
		}
		// Asking again saves the slot's conversation first, which pushes
		// the oldest out; the next oldest then comes back from the host
		// cache, which so holds the last `held` conversations.
		before := e.Stats()
		if _, res := collect(t, submit(t, e, engine.Request{Tokens: conv(convs - held), MaxTokens: 1, IgnoreEOS: true})); res.Err != nil {
			t.Fatal(res.Err)
		}
		after := e.Stats()
		if after.HostCacheRestored != before.HostCacheRestored+1 || after.CachedPromptTokens-before.CachedPromptTokens < convTokens-64 {
			t.Errorf("%s: conversation %d was not restored from the host cache (restored %d → %d, cached prompt tokens +%d)",
				typ, convs-held, before.HostCacheRestored, after.HostCacheRestored, after.CachedPromptTokens-before.CachedPromptTokens)
		}
		e.Close()
	}
	t.Logf("capacity: q8_0 holds %d conversations, f16 %d: %.2f×", fits["q8_0"], fits["f16"], float64(fits["q8_0"])/float64(max(fits["f16"], 1)))
	if fits["q8_0"] < 2*fits["f16"]-2 {
		t.Errorf("q8_0 holds %d conversations, f16 %d: want about twice", fits["q8_0"], fits["f16"])
	}

	// Greedy agreement on the goldens' prompts, each at its longest n.
	lengths := map[string]int{}
	var prompts []string
	for _, g := range goldens {
		if _, ok := lengths[g.Prompt]; !ok {
			prompts = append(prompts, g.Prompt)
		}
		lengths[g.Prompt] = max(lengths[g.Prompt], g.N)
	}
	outs := map[string][][]int32{}
	for _, typ := range []string{"f16", "q8_0", "q4_0"} {
		e, err := engine.New(context.Background(), engine.Config{ModelPath: path, CtxSize: 1024, Parallel: 1, Threads: threads, CacheTypeK: typ, CacheTypeV: typ})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range prompts {
			outs[typ] = append(outs[typ], greedyTokens(t, e, p, lengths[p]))
		}
		e.Close()
	}
	for _, typ := range []string{"q8_0", "q4_0"} {
		for i, p := range prompts {
			t.Logf("greedy %s vs f16, %q: the first %d of %d tokens agree", typ, p, commonPrefix(outs["f16"][i], outs[typ][i]), lengths[p])
		}
	}
}
