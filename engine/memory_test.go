package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/llama"
)

const mib = 1 << 20

// TestEstimateMemory checks each term of the formula on hand-written
// metadata: per-layer KV heads, the context padding, the batch cap,
// flash attention on and off, tensors of types the gguf package does not
// size, and the defaults New applies.
func TestEstimateMemory(t *testing.T) {
	const iq4xs = gguf.TensorType(23) // 136 bytes per 256 values
	md := &gguf.Metadata{
		Architecture: "llama", ContextLength: 1000, EmbeddingLength: 512, BlockCount: 4, VocabSize: 1000,
		KV: map[string]any{
			"general.architecture":          "llama",
			"llama.attention.head_count":    uint32(8),           // heads of 64
			"llama.attention.head_count_kv": []int32{8, 2, 2, 4}, // per layer
			"llama.feed_forward_length":     []uint32{1024, 1536, 1536, 1024},
			"tokenizer.ggml.merges":         make([]string, 10),
		},
		// Out of file order. The IQ4_XS tensors have no size the gguf
		// package knows: the first ends where the next starts, the last
		// is taken at 2 bytes a value.
		Tensors: []gguf.TensorInfo{
			{Name: "blk.0.attn_k.weight", Dims: []uint64{512, 128}, Type: iq4xs, Offset: 685312},
			{Name: "token_embd.weight", Dims: []uint64{512, 1000}, Type: gguf.TypeQ8_0, Offset: 0}, // 544,000 B
			{Name: "output_norm.weight", Dims: []uint64{512}, Type: gguf.TypeF32, Offset: 683264},  // 2,048 B
			{Name: "blk.0.attn_q.weight", Dims: []uint64{512, 512}, Type: iq4xs, Offset: 544000},   // 139,264 B
		},
	}
	const (
		weights  = 685312 + 2*512*128                   // the last tensor's end
		overhead = 1<<20 + 1024<<10 + 180*1000 + 150*10 // base, 1,024 graph nodes, tokens, merges
	)
	// CtxSize 0: min(1000, 4096) × 2 slots = 2,000 tokens, padded to
	// 2,048 cells; a pass is min(2000, 512) = 512 tokens.
	cfg := engine.Config{Parallel: 2, HostCacheBytes: 1 << 30}
	got, err := engine.EstimateMemory(md, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const (
		cells, tokens = 2048, 512
		// The F16 mask, 2 MiB, held through the feed-forward's
		// (3·1536 + 3·512)·4 B a token.
		ffn     = cells*tokens*2 + (3*1536+3*512)*4*tokens
		scratch = 2 * 1536 * tokens
		outputs = 1000 * 4 * 2 // logits of one token per slot
	)
	want := engine.Footprint{
		Weights:   weights,
		KV:        cells * (8 + 2 + 2 + 4) * (64 + 64) * 2,
		Compute:   ffn + scratch + outputs,
		Overhead:  overhead,
		HostCache: 1 << 30,
	}
	if got != want {
		t.Errorf("flash attention:\n got %+v\nwant %+v", got, want)
	}
	if got.Total() != weights+want.KV+want.Compute+overhead+1<<30 {
		t.Errorf("Total %d is not the sum of %+v", got.Total(), got)
	}

	// Without flash attention V is transposed (every layer 8 heads wide)
	// and the attention scores (8 heads × 2,048 cells × 512 tokens × 4 B)
	// dominate; ggml converts their soft-max to F16 for the product with V.
	cfg.NoFlashAttn = true
	got, err = engine.EstimateMemory(md, cfg)
	if err != nil {
		t.Fatal(err)
	}
	scores := int64(cells * tokens * 8 * 4)
	attn := cells*tokens*4 + scores + (4*512+2*512)*4*tokens
	if wantKV := int64(cells * (16*64 + 4*8*64) * 2); got.KV != wantKV {
		t.Errorf("KV without flash attention = %d, want %d", got.KV, wantKV)
	}
	if wantC := attn + scores/2 + outputs; got.Compute != wantC {
		t.Errorf("Compute without flash attention = %d, want %d", got.Compute, wantC)
	}

	// Quantized types: a head of 64 values is 2 blocks, 68 bytes in Q8_0
	// (K) and 36 in Q4_0 (V), against 128 each in F16; V is not
	// transposed (flash attention), and the rest is as with F16. Without
	// flash attention a quantized K is allowed, V's 8-head width is F16.
	cfg.NoFlashAttn = false
	cfg.CacheTypeK, cfg.CacheTypeV = "q8_0", "q4_0"
	got, err = engine.EstimateMemory(md, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if wantKV := int64(cells * 16 * (68 + 36)); got.KV != wantKV || got.Compute != want.Compute {
		t.Errorf("KV q8_0/q4_0 = %d, Compute %d; want %d, %d", got.KV, got.Compute, wantKV, want.Compute)
	}
	cfg.NoFlashAttn, cfg.CacheTypeV = true, "f16"
	got, err = engine.EstimateMemory(md, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if wantKV := int64(cells * (16*68 + 4*8*64*2)); got.KV != wantKV {
		t.Errorf("KV q8_0/f16 without flash attention = %d, want %d", got.KV, wantKV)
	}
	// What llama.cpp cannot run is refused: a quantized V without flash
	// attention, heads of 64 values in a type of 32-value blocks whose
	// heads are made 48 wide; an unknown name lists the names.
	cfg.CacheTypeV = "q8_0"
	if _, err := engine.EstimateMemory(md, cfg); !errors.Is(err, llama.ErrCacheType) || !strings.Contains(err.Error(), "--cache-type-v q8_0 needs flash attention") {
		t.Errorf("quantized V without flash attention: %v", err)
	}
	cfg.NoFlashAttn = false
	md.KV["llama.attention.key_length"] = uint32(48)
	if _, err := engine.EstimateMemory(md, cfg); !errors.Is(err, llama.ErrCacheType) || !strings.Contains(err.Error(), "--cache-type-k q8_0: the model's attention heads are 48 values wide") {
		t.Errorf("heads of 48 in q8_0: %v", err)
	}
	delete(md.KV, "llama.attention.key_length")
	cfg.CacheTypeK = "q8"
	if _, err := engine.EstimateMemory(md, cfg); err == nil || !strings.Contains(err.Error(), "--cache-type-k: KV cache type \"q8\": want one of f16, f32, bf16, q8_0") {
		t.Errorf("unknown type: %v", err)
	}

	// An explicit context below the batch: 300 tokens take 512 cells,
	// and a pass takes at most 300 tokens.
	got, err = engine.EstimateMemory(md, engine.Config{CtxSize: 300, Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	if wantKV := int64(512 * 16 * 128 * 2); got.KV != wantKV {
		t.Errorf("KV at CtxSize 300 = %d, want %d", got.KV, wantKV)
	}
	ffn300 := int64(512*300*(4+2) + (3*1536+2*512)*4*300)
	if wantC := ffn300 + 2*1536*300 + 1000*4; got.Compute != wantC {
		t.Errorf("Compute at CtxSize 300 = %d, want %d", got.Compute, wantC)
	}
	// A vocabulary of 50,000 makes the logits of the 300 tokens the
	// largest part.
	md.VocabSize = 50000
	got, err = engine.EstimateMemory(md, engine.Config{CtxSize: 300, Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	if wantC := int64((50000+2*512)*4*300 + 2*1536*300 + 50000*4); got.Compute != wantC {
		t.Errorf("Compute with 50,000 tokens = %d, want %d", got.Compute, wantC)
	}

	// A mixture of experts: 8 experts of 512 a token make the widest
	// feed-forward activation 4,096, which sizes the scratch.
	md.KV["llama.expert_feed_forward_length"] = uint32(512)
	md.KV["llama.expert_used_count"] = uint32(8)
	got, err = engine.EstimateMemory(md, engine.Config{CtxSize: 300, Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	if wantC := int64((50000+2*512)*4*300 + 2*4096*300 + 50000*4); got.Compute != wantC {
		t.Errorf("Compute with experts = %d, want %d", got.Compute, wantC)
	}

	// New's defaults: 4 slots, batches of 512, a batch no smaller than
	// the slots.
	for _, tc := range [][2]engine.Config{
		{{}, {Parallel: 4, BatchSize: 512}},
		{{Parallel: 8, BatchSize: 2}, {Parallel: 8, BatchSize: 8}},
	} {
		a, errA := engine.EstimateMemory(md, tc[0])
		b, errB := engine.EstimateMemory(md, tc[1])
		if errA != nil || errB != nil || a != b {
			t.Errorf("%+v: %+v (%v), want as %+v: %+v (%v)", tc[0], a, errA, tc[1], b, errB)
		}
	}
}

// TestEstimateMemoryErrors: metadata the estimate cannot use is refused
// with ErrEstimate, naming what is missing.
func TestEstimateMemoryErrors(t *testing.T) {
	base := func() *gguf.Metadata {
		return &gguf.Metadata{
			Architecture: "llama", ContextLength: 256, EmbeddingLength: 64, BlockCount: 2, VocabSize: 300,
			KV: map[string]any{"llama.attention.head_count": uint32(4)},
			Tensors: []gguf.TensorInfo{
				{Name: "token_embd.weight", Dims: []uint64{64, 300}, Type: gguf.TypeF32},
			},
		}
	}
	if _, err := engine.EstimateMemory(base(), engine.Config{}); err != nil {
		t.Fatalf("base metadata: %v", err)
	}
	for _, tc := range []struct {
		name, want string
		edit       func(*gguf.Metadata)
	}{
		{"no architecture", "general.architecture", func(m *gguf.Metadata) { m.Architecture = "" }},
		{"no layers", "llama.block_count", func(m *gguf.Metadata) { m.BlockCount = 0 }},
		{"too many layers", "llama.block_count", func(m *gguf.Metadata) { m.BlockCount = 1 << 30 }},
		{"huge key length", "llama.attention.key_length", func(m *gguf.Metadata) {
			m.KV["llama.attention.key_length"] = uint64(1) << 40
		}},
		{"huge head count", "llama.attention.head_count", func(m *gguf.Metadata) {
			m.KV["llama.attention.head_count"] = uint64(1) << 40
		}},
		{"no embedding", "llama.embedding_length", func(m *gguf.Metadata) { m.EmbeddingLength = 0 }},
		{"recurrent", "llama.attention.head_count", func(m *gguf.Metadata) { delete(m.KV, "llama.attention.head_count") }},
		{"kv heads per layer, wrong count", "3 values for 2 layers", func(m *gguf.Metadata) {
			m.KV["llama.attention.head_count_kv"] = []uint32{4, 4, 4}
		}},
		{"kv heads not counts", "llama.attention.head_count_kv", func(m *gguf.Metadata) {
			m.KV["llama.attention.head_count_kv"] = []float32{4, 4}
		}},
		{"no vocabulary", "llama.vocab_size", func(m *gguf.Metadata) { m.VocabSize = 0 }},
		{"no context", "llama.context_length", func(m *gguf.Metadata) { m.ContextLength = 0 }},
		{"no tensors", "no tensors", func(m *gguf.Metadata) { m.Tensors = nil }},
	} {
		md := base()
		tc.edit(md)
		_, err := engine.EstimateMemory(md, engine.Config{})
		if !errors.Is(err, engine.ErrEstimate) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrEstimate naming %q", tc.name, err, tc.want)
		}
	}
	// An explicit context needs no training context.
	md := base()
	md.ContextLength = 0
	if _, err := engine.EstimateMemory(md, engine.Config{CtxSize: 512}); err != nil {
		t.Errorf("CtxSize without context_length: %v", err)
	}
}

// memCase is one engine configuration to load and measure.
type memCase struct {
	Name string
	Cfg  engine.Config
}

// memReport is what a child process measured (see TestMemoryChild), with
// the buffer sizes llama.cpp logged while creating the engine.
type memReport struct {
	Loaded int64 // RSS growth right after New
	Growth int64 // RSS growth after the workload: the measurement
	Anon   int64 // of Growth: anonymous memory
	File   int64 // of Growth: the model file's mapped pages

	LogWeights, LogKV, LogCompute, LogOutput int64 // from llama.cpp's log
}

const childEnv = "CORRAL_MEMORY_CHILD"

// TestEstimateMemoryMeasured loads each model in a fresh process, drives
// the engine through its largest forward pass, and compares the estimate
// with the buffers llama.cpp reports allocating and with the RSS growth
// (see checkEstimate for the bounds). The cases make each term matter
// somewhere: the attention mask (tinystories at 4,096 cells, stories260K
// at 2,048), the attention scores and their F16 scratch (flash attention
// off), the logits of 512 tokens (the synthetic model's 8,192-token
// vocabulary: 16 of its 16.25 MiB compute buffer) and the KV cache (the
// synthetic model at -b 64, where it is 8 of about 17 MiB). The test then
// checks that estimates with the KV cache off by 2× either way, or
// without the logits, the compute buffer or the weights, fail the bounds.
func TestEstimateMemoryMeasured(t *testing.T) {
	if testing.Short() {
		t.Skip("loads models in child processes")
	}
	synth := filepath.Join(t.TempDir(), "synth.gguf")
	shape := gguf.Shape{Embd: 128, Layers: 4, Heads: 4, HeadsKV: 4, FF: 384, Vocab: 8192, Ctx: 1024, Type: "q8_0"}
	if err := gguf.WriteSynthetic(synth, shape, 1); err != nil {
		t.Fatal(err)
	}
	tiny := testmodel.Path(t, testmodel.TinyStories656K)
	stories := testmodel.Path(t, testmodel.Stories260K)
	cases := []memCase{
		{"tinystories-656k", engine.Config{ModelPath: tiny, CtxSize: 4096, Parallel: 4}},
		{"tinystories-656k", engine.Config{ModelPath: tiny, CtxSize: 4096, Parallel: 4, NoFlashAttn: true}},
		// Half the cells: its attention (heads 8 wide) over 4,096 cells
		// takes 3 s under -race.
		{"stories260K", engine.Config{ModelPath: stories, CtxSize: 2048, Parallel: 4}},
		{"synthetic 3 MB", engine.Config{ModelPath: synth, CtxSize: 4096, Parallel: 4}},
		{"synthetic 3 MB", engine.Config{ModelPath: synth, CtxSize: 4096, Parallel: 4, BatchSize: 64}},
		// Quantized KV (heads of 32 values: one block): 8.5 and 4.5 MiB
		// of KV against 16, and a Q8_0 K without flash attention.
		{"synthetic 3 MB", engine.Config{ModelPath: synth, CtxSize: 4096, Parallel: 4, BatchSize: 64, CacheTypeK: "q8_0", CacheTypeV: "q8_0"}},
		{"synthetic 3 MB", engine.Config{ModelPath: synth, CtxSize: 4096, Parallel: 4, BatchSize: 64, CacheTypeK: "q4_0", CacheTypeV: "q4_0"}},
		{"synthetic 3 MB", engine.Config{ModelPath: synth, CtxSize: 4096, Parallel: 4, BatchSize: 64, CacheTypeK: "q8_0", NoFlashAttn: true}},
	}
	var ms []memMeasurement
	for _, c := range cases {
		m := measureMemory(t, c)
		for _, p := range checkEstimate(m.est, m) {
			t.Errorf("%s %s: %s", m.c.Name, m.config(), p)
		}
		ms = append(ms, m)
	}
	t.Logf("synthetic 3 MB: %v\n%s", shape, memTable(ms))

	// Wrong formulas must fail.
	for _, wrong := range []struct {
		name string
		edit func(*engine.Footprint, memMeasurement)
	}{
		{"KV ×2", func(f *engine.Footprint, _ memMeasurement) { f.KV *= 2 }},
		{"KV ÷2", func(f *engine.Footprint, _ memMeasurement) { f.KV /= 2 }},
		{"KV in F16 whatever the types", func(f *engine.Footprint, m memMeasurement) {
			cfg := m.c.Cfg
			cfg.CacheTypeK, cfg.CacheTypeV = "", ""
			md, err := gguf.ReadMetadata(cfg.ModelPath)
			if err != nil {
				t.Fatal(err)
			}
			f16, err := engine.EstimateMemory(md, cfg)
			if err != nil {
				t.Fatal(err)
			}
			f.KV = f16.KV
		}},
		{"no logits", func(f *engine.Footprint, m memMeasurement) { f.Compute -= m.vocab * m.passTokens() * 4 }},
		{"no compute", func(f *engine.Footprint, _ memMeasurement) { f.Compute = 0 }},
		{"no weights", func(f *engine.Footprint, _ memMeasurement) { f.Weights = 0 }},
	} {
		var caught []string
		for _, m := range ms {
			est := m.est
			wrong.edit(&est, m)
			if p := checkEstimate(est, m); len(p) > 0 {
				caught = append(caught, fmt.Sprintf("%s %s: %s", m.c.Name, m.config(), strings.Join(p, "; ")))
			}
		}
		if len(caught) == 0 {
			t.Errorf("an estimate with %s passes every case", wrong.name)
		}
		t.Logf("with %s:\n\t%s", wrong.name, strings.Join(caught, "\n\t"))
	}
}

// TestEstimateMemory135M measures the synthetic 135M model (corral synth
// --shape 135m) with corral serve's defaults (-np 4, -c 0, -b 512) when
// CORRAL_ESTIMATE_135M names its file. It takes about 2 minutes on 2
// cores, filling 8,192 cells.
func TestEstimateMemory135M(t *testing.T) {
	path := os.Getenv("CORRAL_ESTIMATE_135M")
	if path == "" {
		t.Skip("set CORRAL_ESTIMATE_135M to the synthetic 135M model's file")
	}
	m := measureMemory(t, memCase{"synthetic 135m", engine.Config{ModelPath: path}})
	t.Log("\n" + memTable([]memMeasurement{m}))
	for _, p := range checkEstimate(m.est, m) {
		t.Errorf("%s: %s", m.c.Name, p)
	}
}

// checkEstimate returns how est fails the bounds for a measurement:
//
// Against llama.cpp's report: Weights and KV must match it (it rounds to
// 0.01 MiB). Compute must be at least its compute and output buffers,
// and at most 1.5 times them: the estimate adds ggml's scratch, which
// llama.cpp does not report (with flash attention off, the 64 MiB of
// soft-maxed scores converted to F16: 32 MiB, so that case is at 1.44;
// otherwise 1.01-1.05).
//
// Against the RSS growth: growth - slack <= estimate, and the estimate
// less the logits rows the engine never writes <= 1.3 × growth + slack,
// where slack is 2 MiB, for the overhead term fitted on a few models, and
// 3 MiB more under -race, whose runtime grows with the Go heap (the
// growth is 1.5-2.6 MiB larger there). The compute buffer holds logits
// rows for every token of a batch; the engine asks for one token's logits
// per slot, and the other rows' pages are never touched (for the
// synthetic 3 MB model's 8,192-token vocabulary at -b 512, 16 MiB of the
// 31 MiB estimate). On llama.cpp b10573 the estimate is 0.99-1.49 times
// the growth, and 1.18 for the 135M model at serve's defaults.
func checkEstimate(est engine.Footprint, m memMeasurement) []string {
	rep := m.rep
	const logRounding = mib / 100
	var p []string
	if d := est.Weights - rep.LogWeights; d < -logRounding || d > logRounding {
		p = append(p, fmt.Sprintf("Weights %s, llama.cpp's model buffer %s", mibs(est.Weights), mibs(rep.LogWeights)))
	}
	if d := est.KV - rep.LogKV; d < -logRounding || d > logRounding {
		p = append(p, fmt.Sprintf("KV %s, llama.cpp's KV buffer %s", mibs(est.KV), mibs(rep.LogKV)))
	}
	logged := rep.LogCompute + rep.LogOutput
	if est.Compute < logged-logRounding || float64(est.Compute) > 1.5*float64(logged) {
		p = append(p, fmt.Sprintf("Compute %s, llama.cpp's compute + output buffers %s: want 1 to 1.5 times",
			mibs(est.Compute), mibs(logged)))
	}
	slack := int64(2 * mib)
	if raceEnabled() {
		slack += 3 * mib
	}
	total := est.Total() - est.HostCache
	unwritten := m.vocab * 4 * max(m.passTokens()-int64(m.c.Cfg.Parallel), 0)
	if total < rep.Growth-slack || float64(total-unwritten) > 1.3*float64(rep.Growth)+float64(slack) {
		p = append(p, fmt.Sprintf("estimate %s (%s without the logits rows never written), RSS growth %s: want growth - %s MiB <= estimate, and that <= 1.3 × growth + %[4]s MiB",
			mibs(total), mibs(total-unwritten), mibs(rep.Growth), mibs(slack)))
	}
	return p
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// memMeasurement is one case: its estimate, what a child process
// measured, and the model's vocabulary size.
type memMeasurement struct {
	c     memCase
	est   engine.Footprint
	rep   memReport
	vocab int64
}

// passTokens is the most tokens a forward pass of the case takes
// (n_ubatch), for a case with an explicit CtxSize.
func (m memMeasurement) passTokens() int64 {
	b := m.c.Cfg.BatchSize
	if b == 0 {
		b = 512
	}
	return int64(min(b, m.c.Cfg.CtxSize))
}

// config formats the case's engine settings as corral serve's flags.
func (m memMeasurement) config() string {
	c := m.c.Cfg
	if c.CtxSize == 0 && c.Parallel == 0 && c.BatchSize == 0 && !c.NoFlashAttn && c.CacheTypeK == "" && c.CacheTypeV == "" {
		return "(serve defaults)"
	}
	s := fmt.Sprintf("-c %d -np %d", c.CtxSize, c.Parallel)
	if c.BatchSize != 0 {
		s += fmt.Sprintf(" -b %d", c.BatchSize)
	}
	if c.NoFlashAttn {
		s += " -fa off"
	}
	if c.CacheTypeK != "" {
		s += " -ctk " + c.CacheTypeK
	}
	if c.CacheTypeV != "" {
		s += " -ctv " + c.CacheTypeV
	}
	return s
}

// measureMemory estimates c's footprint and measures it in a child
// process (TestMemoryChild): the test binary run again, so that each
// load starts from a fresh heap whatever ran before, with llama.cpp's log
// on (its buffer sizes) and glibc's mmap threshold fixed at 128 KiB, so
// that every large block comes from, and returns to, the kernel rather
// than a heap that earlier frees left resident (glibc otherwise raises
// the threshold to the largest block freed).
func measureMemory(t *testing.T, c memCase) memMeasurement {
	t.Helper()
	md, err := gguf.ReadMetadata(c.Cfg.ModelPath)
	if err != nil {
		t.Fatal(err)
	}
	est, err := engine.EstimateMemory(md, c.Cfg)
	if err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	spec, err := json.Marshal(c.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryChild$")
	// Under -race, the child would sleep a second before exiting.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec), "CORRAL_LLAMA_LOG=1", "GORACE="+gorace,
		"GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072:glibc.malloc.trim_threshold=131072")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: child: %v\n%s\n%s", c.Name, err, stdout.Bytes(), lastLines(stderr.String(), 20))
	}
	var rep memReport
	_, js, ok := strings.Cut(stdout.String(), "memory-child: ")
	if !ok {
		t.Fatalf("%s: no report from the child:\n%s", c.Name, stdout.Bytes())
	}
	js, _, _ = strings.Cut(js, "\n")
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("%s: child report %q: %v", c.Name, js, err)
	}
	// The child's warm-up engine logs first; the measured one last.
	for _, f := range []struct {
		dst  *int64
		what string
	}{
		{&rep.LogWeights, "CPU_Mapped model buffer size"},
		{&rep.LogKV, "KV buffer size"},
		{&rep.LogCompute, "compute buffer size"},
		{&rep.LogOutput, "output buffer size"},
	} {
		if *f.dst, ok = lastLoggedMiB(stderr.String(), f.what); !ok {
			t.Fatalf("%s: no %q in llama.cpp's log:\n%s", c.Name, f.what, lastLines(stderr.String(), 20))
		}
	}
	return memMeasurement{c: c, est: est, rep: rep, vocab: int64(md.VocabSize)}
}

// lastLoggedMiB finds the last "<what> = N MiB" of a llama.cpp log.
func lastLoggedMiB(log, what string) (int64, bool) {
	re := regexp.MustCompile(regexp.QuoteMeta(what) + ` = +([0-9.]+) MiB`)
	m := re.FindAllStringSubmatch(log, -1)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[len(m)-1][1], 64)
	return int64(math.Round(v * mib)), err == nil
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestMemoryChild is the child side of measureMemory; it does nothing
// unless CORRAL_MEMORY_CHILD holds the engine.Config to measure.
//
// It first runs stories260K with a tiny context for a few tokens, so
// that llama.cpp's one-time tables are made (another model, so that the
// measured one's vocabulary is not allocated in memory its own warm-up
// freed), and then measures the growth of anonymous memory plus the
// model file's mapped pages (see rss) from before New to after the
// engine's largest forward pass: every slot but one decoding with its
// cache nearly full, and the last slot's prompt evaluated in batches of
// the whole BatchSize over the whole cache (see fillEngine).
func TestMemoryChild(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		t.Skip("run by TestEstimateMemoryMeasured")
	}
	var cfg engine.Config
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	warm, err := engine.New(ctx, engine.Config{
		ModelPath: testmodel.Path(t, testmodel.Stories260K), CtxSize: 256, Parallel: 1, BatchSize: 32,
	})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, submit(t, warm, engine.Request{Tokens: []int32{1, 5, 6, 7, 8, 9, 10, 11}, MaxTokens: 4, IgnoreEOS: true}))
	warm.Close()

	anon0, _ := rss(t, cfg.ModelPath)
	// The prefill budget orders the work, it allocates nothing; nor does
	// the context one request may use, which fillEngine needs to be an
	// equal share of the cache.
	cfg.PrefillBudget = -1
	if cfg.CtxSize > 0 && cfg.Parallel > 0 {
		cfg.CtxPerRequest = cfg.CtxSize / cfg.Parallel
	}
	e, err := engine.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	anon1, file1 := rss(t, cfg.ModelPath)
	fillEngine(t, e)
	anon2, file2 := rss(t, cfg.ModelPath)
	rep := memReport{Loaded: anon1 - anon0 + file1, Growth: anon2 - anon0 + file2, Anon: anon2 - anon0, File: file2}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("memory-child: %s\n", js)
}

// fillEngine drives e, whose Config.PrefillBudget is negative, through
// its largest forward pass: a batch of BatchSize tokens over every cell.
// All slots but one get a prompt that nearly fills their share of the
// cache and keep decoding; a 4-token request takes the last slot, and
// the last prompt waits for that slot, so that its evaluation starts
// with a pass of its own once everything else is in the cache, and its
// last whole pass ends at the top of the cache. Without a prefill budget
// every pass with prompt tokens is a whole batch, and the decoding
// requests gain a token a pass, so the schedule is the same however
// fast the steps run.
func fillEngine(t *testing.T, e *engine.Engine) {
	t.Helper()
	info := e.Info()
	slots := e.Stats().SlotsTotal
	prompt := func(i, n int) []int32 {
		toks := make([]int32, n)
		for j := range toks {
			toks[j] = int32(3 + (i*97+j*7)%(min(info.VocabSize, 512)-3))
		}
		return toks
	}
	var running []*engine.Stream
	for i := range slots - 1 {
		running = append(running, submit(t, e, engine.Request{
			Tokens: prompt(i, info.CtxPerRequest-66), MaxTokens: 64, IgnoreEOS: true,
		}))
	}
	short := submit(t, e, engine.Request{Tokens: prompt(slots, 4), MaxTokens: 1})
	last := submit(t, e, engine.Request{Tokens: prompt(slots+1, info.CtxPerRequest-2), MaxTokens: 1})
	collect(t, short)
	if _, res := collect(t, last); res.Err != nil {
		t.Fatal(res.Err)
	}
	var st engine.Stats
	poll(t, "the stats after the last request", func() (bool, string) {
		st = e.Stats()
		return st.Requests >= 2, fmt.Sprintf("%+v", st)
	})
	if st.KVCellsUsed <= st.KVCellsTotal-256 {
		t.Fatalf("the workload filled %d of %d cells: the last passes did not span the cache", st.KVCellsUsed, st.KVCellsTotal)
	}
	for _, s := range running {
		if s.Done() {
			t.Fatalf("a decoding request ended early (%s)", s.Result().FinishReason)
		}
		s.Cancel()
	}
	for _, s := range running {
		collect(t, s)
	}
}

// rss returns the process's resident anonymous memory and the resident
// pages of its mappings of the file model, after a garbage collection
// that returns freed Go memory to the kernel. Other file-backed pages,
// the test binary's code, are left out: they are paged in once per
// process, not per model.
func rss(t *testing.T, model string) (anon, mapped int64) {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	model, err := filepath.Abs(model)
	if err == nil {
		model, err = filepath.EvalSymlinks(model)
	}
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for line := range strings.Lines(string(status)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "RssAnon:" {
			anon = kiB(f[1])
		}
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	// Each mapping is a header line ("start-end perms offset dev inode
	// path") followed by "Key: value" lines.
	inModel := false
	for line := range strings.Lines(string(smaps)) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && !strings.HasSuffix(f[0], ":"):
			inModel = strings.HasSuffix(strings.TrimRight(line, "\n"), " "+model)
		case inModel && len(f) >= 2 && f[0] == "Rss:":
			mapped += kiB(f[1])
		}
	}
	return anon, mapped
}

// kiB converts a /proc count of kB to bytes.
func kiB(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n << 10
}

// memTable lays measurements out in columns, sizes in MiB.
func memTable(ms []memMeasurement) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "model\tconfig\tweights\tKV\tcompute\toverhead\testimate\tllama.cpp: weights/KV/compute+output\tRSS growth: at load\tafter the passes (anon+file)\testimate/growth")
	for _, m := range ms {
		total := m.est.Total() - m.est.HostCache
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s/%s/%s+%s\t%s\t%s (%s+%s)\t%.2f\n",
			m.c.Name, m.config(), mibs(m.est.Weights), mibs(m.est.KV), mibs(m.est.Compute), mibs(m.est.Overhead), mibs(total),
			mibs(m.rep.LogWeights), mibs(m.rep.LogKV), mibs(m.rep.LogCompute), mibs(m.rep.LogOutput),
			mibs(m.rep.Loaded), mibs(m.rep.Growth), mibs(m.rep.Anon), mibs(m.rep.File), float64(total)/float64(m.rep.Growth))
	}
	w.Flush()
	return b.String()
}

// mibs formats n bytes in MiB.
func mibs(n int64) string { return fmt.Sprintf("%.2f", float64(n)/mib) }

// projectorSpan is the span of md's tensor data: the weights of a
// projector as EstimateProjector counts them.
func projectorSpan(t *testing.T, md *gguf.Metadata) int64 {
	t.Helper()
	var lo, hi uint64 = math.MaxUint64, 0
	for _, ti := range md.Tensors {
		size, ok := ti.Size()
		if !ok {
			t.Fatalf("%s: no size", ti.Name)
		}
		lo, hi = min(lo, ti.Offset), max(hi, ti.Offset+size)
	}
	return int64(hi - lo)
}

// TestEstimateProjector: a projector's estimate is its weights, and for
// each encoder (F + 3E) × T F32 activations (T its position embeddings'
// rows), its input and 3 MiB of graph metadata; EstimateMemory adds it
// to a model's footprint as Footprint.Projector. Without position
// embeddings T is (image_size/patch_size)², or 1,500 for audio: for the
// SigLIP encoder of Gemma 3 (896 px, 14 px patches, E 1152, F 4304) the
// activations are the 121.25 MiB libmtmd b10573 reports.
func TestEstimateProjector(t *testing.T) {
	dir := t.TempDir()
	const meta = 3 << 20
	for _, tc := range []struct {
		kind    string
		compute int64
	}{
		// E 64, F 128: 64 patches of a 64×64 RGB image; 1,500 positions
		// of 80 mel bins × 3,000 frames.
		{"gemma3", (128+3*64)*64*4 + 3*64*64*4 + meta},
		{"qwen2a", (128+3*64)*1500*4 + 80*3000*4 + meta},
	} {
		model, proj := testsynth.Projector(t, dir, tc.kind)
		pmd, err := gguf.ReadMetadata(proj)
		if err != nil {
			t.Fatal(err)
		}
		got, err := engine.EstimateProjector(pmd)
		if err != nil {
			t.Fatal(err)
		}
		if want := projectorSpan(t, pmd) + tc.compute; got != want {
			t.Errorf("%s projector: %d bytes, want %d (weights %d)", tc.kind, got, want, projectorSpan(t, pmd))
		}
		md, err := gguf.ReadMetadata(model)
		if err != nil {
			t.Fatal(err)
		}
		cfg := engine.Config{ModelPath: model}
		without, err := engine.EstimateMemory(md, cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MMProj = proj
		with, err := engine.EstimateMemory(md, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if with.Projector != got || without.Projector != 0 || with.Total()-without.Total() != got {
			t.Errorf("%s: footprint with the projector %+v (total %d), without %+v (total %d); want %d more, in Projector", tc.kind, with, with.Total(), without, without.Total(), got)
		}
	}

	// Gemma 3's SigLIP encoder, and a Whisper encoder beside it in one
	// file (Qwen2.5-Omni's layout), without position embeddings.
	weights := []gguf.TensorInfo{{Name: "v.patch_embd.weight", Dims: []uint64{1000}, Type: gguf.TypeF32}}
	md := &gguf.Metadata{Architecture: "clip", Tensors: weights, KV: map[string]any{
		"clip.has_vision_encoder":         true,
		"clip.vision.embedding_length":    uint32(1152),
		"clip.vision.feed_forward_length": uint32(4304),
		"clip.vision.image_size":          uint32(896),
		"clip.vision.patch_size":          uint32(14),
	}}
	siglip := int64(4000) + 121.25*mib + 3*896*896*4 + meta
	if got, err := engine.EstimateProjector(md); err != nil || got != siglip {
		t.Errorf("SigLIP: %d, %v; want %d", got, err, siglip)
	}
	md.KV["clip.has_audio_encoder"] = true
	md.KV["clip.audio.embedding_length"] = uint32(1280)
	md.KV["clip.audio.feed_forward_length"] = uint32(5120)
	md.KV["clip.audio.num_mel_bins"] = uint32(128)
	whisper := int64((5120+3*1280)*1500*4 + 128*3000*4 + meta) // 51.27 MiB reported
	if got, err := engine.EstimateProjector(md); err != nil || got != siglip+whisper {
		t.Errorf("SigLIP and Whisper: %d, %v; want %d", got, err, siglip+whisper)
	}

	for _, tc := range []struct {
		name, want string
		md         *gguf.Metadata
	}{
		{"a model", `general.architecture "llama"`, &gguf.Metadata{Architecture: "llama", Tensors: weights}},
		{"no width", "clip.vision.embedding_length", &gguf.Metadata{Architecture: "clip", Tensors: weights, KV: map[string]any{"clip.has_vision_encoder": true}}},
		{"no tensors", "no tensors", &gguf.Metadata{Architecture: "clip"}},
	} {
		if _, err := engine.EstimateProjector(tc.md); !errors.Is(err, engine.ErrEstimate) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrEstimate naming %q", tc.name, err, tc.want)
		}
	}
	model, _ := testsynth.Projector(t, dir, "gemma3")
	mmd, err := gguf.ReadMetadata(model)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.EstimateMemory(mmd, engine.Config{ModelPath: model, MMProj: filepath.Join(dir, "none.gguf")}); !errors.Is(err, engine.ErrEstimate) || !strings.Contains(err.Error(), "projector") {
		t.Errorf("a missing projector: %v, want ErrEstimate naming it", err)
	}
}
