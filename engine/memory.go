package engine

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/llama"
)

// Footprint is the memory an engine needs, estimated before loading (see
// EstimateMemory). Every field is in bytes.
type Footprint struct {
	// Weights is the tensor data. llama.cpp maps the file and populates
	// the mapping at load, so the data is resident (file-backed pages,
	// counted in the process's RSS) from the start.
	Weights int64
	// KV is the KV cache: every cell of the unified cache, allocated and
	// zeroed when the context is created.
	KV int64
	// Compute is what llama.cpp allocates to evaluate a batch: its
	// compute buffer, sized for the largest graph (n_ubatch tokens
	// attending to every cell, with every token's logits), the scratch
	// ggml converts matrix-product inputs in, and the logits output
	// buffer. Pages are resident once a forward pass writes them; the
	// engine asks for one token's logits per slot, so part of the logits
	// in the compute buffer is never written (see EstimateMemory).
	Compute int64
	// Overhead is host memory beside those buffers: the vocabulary and
	// tokenizer structures, the graph metadata and the sampler's
	// candidate array.
	Overhead int64
	// HostCache is Config.HostCacheBytes: the most the cache of evicted
	// prefixes holds, filled over time.
	HostCache int64
	// Projector is Config.MMProj's multimodal projector, on the host: its
	// weights, which clip.cpp reads into memory of its own at load (not
	// a mapping), and its encoders' compute buffers and graph metadata
	// (see EstimateProjector). 0 without one.
	Projector int64
	// Draft is the draft model's (Speculation.Model): its weights, its
	// context of as many cells as the slots' pool and a draft's worth
	// per slot, and their overhead (see draftmodel.go); or the MTP
	// head's context (Speculation.MTP, whose weights are the model's):
	// its layers' keys and values for as many cells, and its outputs
	// (see mtp.go). 0 without either.
	Draft int64
}

// Total is the sum of the parts.
func (f Footprint) Total() int64 {
	return f.Weights + f.KV + f.Compute + f.Overhead + f.HostCache + f.Projector + f.Draft
}

// ErrEstimate means EstimateMemory cannot estimate the model: a key it
// needs is missing or malformed, or the architecture keeps a state it does
// not model.
var ErrEstimate = errors.New("engine: cannot estimate memory")

// Constants of the estimate.
const (
	// ctxPad is llama.cpp's padding of n_ctx (llama_context's constructor).
	ctxPad = 256
)

// The overhead's terms: an upper envelope of the anonymous memory a load
// took beside llama.cpp's KV and output buffers (RSS growth on this
// build, glibc's mmap threshold fixed): 1.0-1.9 MiB for models of 512 to
// 8,192 tokens, 5.8, 7.9 and 15.6 MiB for 4-layer synthetic models of
// 32,768, 50,257 and 102,400 tokens (155-168 B a token), 10.6 MiB for the
// 30-layer synthetic 135M model (49,152 tokens, 2,184 graph nodes), and
// 7.8 and 11.6 MiB more with the GPT-2 (50,000 merges) and DeepSeek-LLM
// (99,757 merges) BPE tokenizers spliced into those synthetic models
// (122-164 B a merge). The formula gives 2.1-3.4, 7.6, 10.6, 19.6 and
// 11.6 MiB, and 7.2 and 14.3 MiB more.
const (
	// overheadBase: the backend, the context, the thread pool.
	overheadBase = 1 << 20
	// perGraphNode: llama.cpp's graph metadata (two graph results and
	// the scheduler's hash sets), sized for max(1024, 8 × tensors) nodes.
	perGraphNode = 1 << 10
	// perToken: the vocabulary, and 12 B for the sampler's candidate
	// array (llama/shim.cpp).
	perToken = 180
	// perMerge: the BPE merge table.
	perMerge = 150
)

// EstimateMemory estimates the memory an engine of cfg takes for the model
// md describes, before loading it: what engine.New would make llama.cpp
// allocate, with Config's defaults applied as New applies them.
//
// When cfg.ModelPath names md's file, KV and the compute buffer are
// llama.cpp's own sizing of the context New creates (llama.MemoryNeeds:
// exact for every architecture and memory kind, sliding windows,
// recurrent states and compressed keys included), and Compute adds
// ggml's scratch and the output buffer below. From a header alone
// (no ModelPath), KV and Compute follow the formulas below, which model
// plain attention only: a model with a recurrent state, a sliding window
// or compressed keys gets ErrEstimate.
//
// The parts, with T the tokens of a forward pass (n_ubatch: BatchSize,
// at most the context), C the KV cells (the context padded to 256), E,
// F, V the embedding, feed-forward and vocabulary sizes, H the attention
// heads, and a = 4 bytes (an F32 activation):
//
//   - Weights: the span of tensor data in the file, as llama.cpp maps it.
//     This build of ggml has no repacked (CPU_REPACK) weight buffers, so
//     no weight is copied out of the mapping.
//   - KV: C × Σ over layers of n_embd_k_gqa values of CacheTypeK and
//     n_embd_v_gqa of CacheTypeV (2 bytes a value for F16, the default;
//     34 bytes a block of 32 for Q8_0, 18 for Q4_0: see
//     llama.CacheType.RowBytes), with the head counts per layer when the
//     file gives an array. Without flash attention V is stored
//     transposed and every layer takes the widest layer's V width, as
//     llama.cpp does.
//   - Compute: the largest of three moments of the graph llama.cpp
//     reserves for T tokens over all C cells with T outputs, plus ggml's
//     scratch and the output buffer (V×a per slot: the engine asks for
//     one token's logits per slot and step).
//     Attention: with flash attention the F16 mask (C×T×2), else the
//     F32 mask (C×T×a) and the attention scores (C×T×H×a, soft-maxed in
//     place), with (4E + 2·n_embd_kv_gqa)×T×a of activations.
//     Feed-forward: what the attention left held (the mask) and, without
//     flash attention, freed (the scores), with (3F + 3E)×T×a more unless
//     it fits in the freed part.
//     Output: the logits (V + 2E)×T×a.
//     The scratch is the largest matrix-product input converted to the
//     weights' dot type (at most 2 bytes a value: max(E, F)×T×2) or,
//     without flash attention, the soft-maxed scores converted to F16
//     (C×T×H×2), which is larger.
//   - Embeddings (Config.Pooling resolving to mean, cls or last): C
//     counts BatchSize more cells (the embedding passes' reserve), and
//     the output buffer is the larger of V×a for each of the slots and
//     embedding lanes and (V + E)×T×a (a pass outputs every token), plus
//     (E×T + T×L + E×L)×a for the pooling nodes, L the embedding lanes.
//   - Overhead: 1 MiB, 1 KiB a graph node, 180 B a vocabulary token and
//     150 B a BPE merge (see the constants), and with n-gram speculation
//     the shared n-gram pool's table (2 MiB).
//   - HostCache: cfg.HostCacheBytes.
//   - Projector: cfg.MMProj's, from its header (see EstimateProjector).
//
// Weights and KV match what llama.cpp reports allocating to the byte. On
// llama.cpp b10573 (its flash-attention graph keeps only an F16 mask) the
// estimate of Compute is 1-3 % above the compute and output buffers it
// reports with flash attention and 37-43 % above without, the F16 copy
// of the scores that it does not report (TestEstimateMemoryMeasured's
// eight cases). The resident memory is lower than the estimate: of the
// logits rows the compute buffer holds for T tokens the engine writes one
// per slot, and the others' pages are never touched. For the synthetic
// 135M model at corral serve's defaults (on the December 2025 llama.cpp)
// the estimate was 457 MiB and the RSS growth after passes over the full
// cache 388 MiB, the difference being most of its 96 MiB of logits rows.
//
// Cache types llama.cpp cannot run with the model (see
// llama.CheckCacheTypes) get an error wrapping llama.ErrCacheType, an
// unknown type name a plain error.
//
// Models missing a dimension llama.cpp requires get ErrEstimate, as does
// a file llama.cpp cannot build a context of. A missing feed-forward
// width is taken as 4E.
func EstimateMemory(md *gguf.Metadata, cfg Config) (Footprint, error) {
	h, err := readHParams(md)
	if err != nil {
		return Footprint{}, err
	}
	cfg = cfg.withDefaults()
	if cfg.CtxSize <= 0 && h.ctxTrain <= 0 {
		return Footprint{}, fmt.Errorf("%w: no %s.context_length and no CtxSize", ErrEstimate, md.Architecture)
	}
	declared, ok := md.Uint(md.Architecture + poolingKey)
	pooling, err := resolvePooling(cfg.Pooling, declared, ok)
	if err != nil {
		return Footprint{}, fmt.Errorf("%w: %w", ErrEstimate, err)
	}
	nctx := cfg.ctxSize(h.ctxTrain) + cfg.embedReserve(pooling)
	fa := !cfg.NoFlashAttn
	typeK, typeV, err := cfg.cacheTypes()
	if err != nil {
		return Footprint{}, err
	}
	if h.heads > 0 {
		if err := llama.CheckCacheTypes(typeK, typeV, fa, int(h.headK), int(h.headV)); err != nil {
			return Footprint{}, fmt.Errorf("engine: %w", err)
		}
	}
	cells := int64(alignTo(nctx, ctxPad))
	// llama.cpp caps n_batch at the context asked for, before padding it,
	// and the engine sets n_ubatch = n_batch.
	tokens := int64(min(nctx, cfg.BatchSize))

	weights, err := weightBytes(md)
	if err != nil {
		return Footprint{}, err
	}
	if !cfg.Speculate.MTP {
		weights -= headBytes(md) // llama.cpp skips the head's layers
	}
	var kv, graph int64
	if cfg.ModelPath != "" {
		// llama.cpp's own sizing of the context New creates.
		need, err := llama.MemoryNeeds(cfg.ModelPath, cfg.contextParams(h.ctxTrain, pooling, typeK, typeV))
		if err != nil {
			return Footprint{}, fmt.Errorf("%w: %w", ErrEstimate, err)
		}
		kv, graph = need.Context, need.Compute+h.scratch(cells, tokens, fa)
	} else {
		if err := h.plainAttention(md); err != nil {
			return Footprint{}, err
		}
		kv, graph = cells*h.kvPerCell(fa, typeK, typeV), h.compute(cells, tokens, fa)
	}
	// The output buffer: one token's logits per sequence, and for an
	// engine that embeds, after its first embedding pass, the logits and
	// embeddings of a whole batch (llama.cpp outputs every token of a
	// pooled sequence, and keeps the buffer at its largest).
	compute := graph + h.vocab*4*int64(cfg.Parallel)
	if lanes := int64(cfg.lanes(pooling)); lanes > 0 {
		out := max(h.vocab*4*(int64(cfg.Parallel)+lanes), (h.vocab+h.embd)*4*tokens)
		// The pooling nodes: the transposed embeddings, the mean matrix
		// (or row ids) and the pooled vectors.
		pool := (h.embd*tokens + tokens*lanes + h.embd*lanes) * 4
		compute = graph + out + pool
	}
	var proj int64
	if cfg.MMProj != "" {
		pmd, err := gguf.ReadMetadata(cfg.MMProj)
		if err != nil {
			return Footprint{}, fmt.Errorf("%w: projector: %w", ErrEstimate, err)
		}
		if proj, err = EstimateProjector(pmd); err != nil {
			return Footprint{}, err
		}
	}
	var draft int64
	if sp := cfg.Speculate; sp.Model != "" {
		dmd, err := gguf.ReadMetadata(sp.Model)
		if err != nil {
			return Footprint{}, fmt.Errorf("%w: draft model: %w", ErrEstimate, err)
		}
		fp, err := EstimateMemory(dmd, cfg.draftConfig(int(cells)))
		if err != nil {
			return Footprint{}, fmt.Errorf("draft model: %w", err)
		}
		draft = fp.Total()
	}
	if heads, _ := md.Uint(md.Architecture + ".nextn_predict_layers"); cfg.Speculate.MTP && heads > 0 && len(h.headsKV) > 0 {
		// F16 keys and values of the head's layers (attention with the
		// last layer's heads), and a logits row and a hidden row per slot.
		perCell := int64(heads) * h.headsKV[len(h.headsKV)-1] * (h.headK + h.headV) * 2
		draft = (cells+int64(cfg.Parallel*(maxDraft+1)))*perCell + (h.vocab+h.embd)*4*int64(cfg.Parallel)
	}
	return Footprint{
		Weights:   weights,
		KV:        kv,
		Compute:   compute,
		Overhead:  overheadBase + perGraphNode*int64(max(1024, 8*len(md.Tensors))) + perToken*h.vocab + perMerge*h.merges + cfg.Speculate.poolBytes(),
		HostCache: max(cfg.HostCacheBytes, 0),
		Projector: proj,
		Draft:     draft,
	}, nil
}

// The projector estimate's terms.
const (
	// projectorMeta is the graph metadata clip.cpp allocates for each
	// encoder: 8,192 nodes (its max_nodes) of ggml_tensor_overhead(),
	// 368 bytes, and the graph's own.
	projectorMeta = 3 << 20
	// whisperPositions is the positions of a Whisper-style audio
	// encoder: clip.cpp's warmup takes 3,000 mel frames (30 s), which
	// its stride-2 convolution halves.
	whisperPositions = 1500
	// whisperFrames is those mel frames.
	whisperFrames = 3000
)

// EstimateProjector estimates the host memory of the multimodal
// projector md describes (an mmproj GGUF, general.architecture "clip")
// once libmtmd has loaded it on the CPU (Config.MMProj):
//
//   - its weights: the span of tensor data in the file, as for a model
//     (clip.cpp reads them into a buffer of their own);
//   - for each encoder (vision, audio), its compute buffer as clip.cpp's
//     warmup sizes it, with flash attention (on for the CPU): for T
//     positions through its E-wide layers with F-wide feed-forwards,
//     (F + 3E)×T F32 activations, plus its input (3×S² values for an
//     S×S image, mel bins × 3,000 frames for audio);
//   - 3 MiB of graph metadata per encoder.
//
// T is the rows of the encoder's position embeddings
// ({v,a}.position_embd.weight), else (image_size/patch_size)² for vision
// and 1,500 for audio. The (F + 3E)×T term is what libmtmd b10573
// reported to the byte for Gemma 3 SigLIP encoders (896 px in 14 px
// patches, E 1152, F 4304: 121.25 MiB; 448 px, E 768, F 3072: 21.00 MiB)
// and Whisper encoders (E 1280, F 5120: 51.27 MiB; E 512, F 2048: 20.51
// MiB), whatever their layer count; the input term is a margin for the
// convolutions, pooling and projection around the layers, which outweigh
// them in tiny encoders: for corral synth --mmproj's (E 64, F 128)
// libmtmd reported 0.14 MiB (gemma3; 0.125 estimated, short by the
// projection to the text model's width) and 2.29 MiB (qwen2a; 2.75
// estimated), the metadata allowance covering the difference.
// Projectors whose images grow past image_size (dynamic resolution:
// Qwen2-VL, Pixtral) warm up at a fixed size and take more when a larger
// image comes: the estimate is their warmup's.
//
// A file that is no projector, or whose encoder lacks a width, gets
// ErrEstimate.
func EstimateProjector(md *gguf.Metadata) (int64, error) {
	if !md.IsProjector() {
		return 0, fmt.Errorf("%w: projector: general.architecture %q, not %q", ErrEstimate, md.Architecture, gguf.ProjectorArchitecture)
	}
	total, err := weightBytes(md)
	if err != nil {
		return 0, err
	}
	vision, audio := md.ProjectorInputs()
	for _, enc := range []struct {
		on            bool
		modality, pfx string
	}{{vision, "vision", "v"}, {audio, "audio", "a"}} {
		if !enc.on {
			continue
		}
		key := func(k string) string { return "clip." + enc.modality + "." + k }
		e, err := count(md, key("embedding_length"), 0)
		if err != nil {
			return 0, err
		}
		if e <= 0 {
			return 0, fmt.Errorf("%w: projector: no %s", ErrEstimate, key("embedding_length"))
		}
		ff, err := count(md, key("feed_forward_length"), 4*e)
		if err != nil {
			return 0, err
		}
		var positions, input int64
		if i := slices.IndexFunc(md.Tensors, func(t gguf.TensorInfo) bool { return t.Name == enc.pfx+".position_embd.weight" }); i >= 0 {
			if d := md.Tensors[i].Dims; len(d) >= 2 && d[1] <= maxCount {
				positions = int64(d[1])
			}
		}
		if enc.modality == "vision" {
			size, err := count(md, key("image_size"), 0)
			if err != nil {
				return 0, err
			}
			patch, err := count(md, key("patch_size"), 0)
			if err != nil {
				return 0, err
			}
			if positions == 0 && size > 0 && patch > 0 {
				positions = (size / patch) * (size / patch)
			}
			input = 3 * size * size * 4
		} else {
			mels, err := count(md, key("num_mel_bins"), 128)
			if err != nil {
				return 0, err
			}
			if positions == 0 {
				positions = whisperPositions
			}
			input = mels * whisperFrames * 4
		}
		total += (ff+3*e)*positions*4 + input + projectorMeta
	}
	return total, nil
}

// hparams are the dimensions the estimate needs, as llama.cpp reads them.
type hparams struct {
	ctxTrain      int
	embd          int64
	ff            int64   // widest feed-forward activation of a token
	heads         int64   // most attention heads of a layer
	headK, headV  int64   // key and value width of a head
	headsKV       []int64 // key-value heads of each layer
	vocab, merges int64
}

// readHParams reads the dimensions from md's architecture keys.
func readHParams(md *gguf.Metadata) (*hparams, error) {
	arch := md.Architecture
	if arch == "" {
		return nil, fmt.Errorf("%w: no general.architecture", ErrEstimate)
	}
	key := func(k string) string { return arch + "." + k }
	layers := md.BlockCount
	if layers <= 0 || layers > maxLayers {
		return nil, fmt.Errorf("%w: %s = %d", ErrEstimate, key("block_count"), layers)
	}
	h := &hparams{ctxTrain: md.ContextLength, embd: int64(md.EmbeddingLength)}
	if h.embd <= 0 {
		return nil, fmt.Errorf("%w: no %s", ErrEstimate, key("embedding_length"))
	}
	heads, err := perLayer(md, key("attention.head_count"), layers)
	if err != nil {
		return nil, err
	}
	if h.headsKV, err = perLayer(md, key("attention.head_count_kv"), layers); err != nil {
		return nil, err
	}
	if heads != nil && heads[0] > 0 {
		h.heads = slices.Max(heads)
		if h.headsKV == nil {
			h.headsKV = heads
		}
		// llama.cpp derives the head width from the first layer's head
		// count.
		h.headK, h.headV = h.embd/heads[0], h.embd/heads[0]
	}
	for _, d := range []struct {
		dst *int64
		key string
	}{{&h.headK, "attention.key_length"}, {&h.headV, "attention.value_length"}} {
		if *d.dst, err = count(md, key(d.key), *d.dst); err != nil {
			return nil, err
		}
	}
	ff, err := perLayer(md, key("feed_forward_length"), layers)
	if err != nil {
		return nil, err
	}
	if ff != nil {
		h.ff = slices.Max(ff)
	}
	// A mixture of experts activates expert_used_count experts of
	// expert_feed_forward_length each per token.
	expertFF, err := count(md, key("expert_feed_forward_length"), 0)
	if err != nil {
		return nil, err
	}
	expertsUsed, err := count(md, key("expert_used_count"), 0)
	if err != nil {
		return nil, err
	}
	h.ff = max(h.ff, expertFF*expertsUsed)
	if h.ff <= 0 {
		h.ff = 4 * h.embd
	}
	h.vocab = int64(md.VocabSize)
	if h.vocab <= 0 {
		if h.vocab, err = count(md, key("vocab_size"), 0); err != nil {
			return nil, err
		}
	}
	if h.vocab <= 0 {
		return nil, fmt.Errorf("%w: no tokenizer.ggml.tokens nor %s", ErrEstimate, key("vocab_size"))
	}
	if m, ok := md.KV["tokenizer.ggml.merges"].([]string); ok {
		h.merges = int64(len(m))
	}
	return h, nil
}

// kvPerCell is the KV cache's bytes per cell over all layers, with keys
// of type k and values of type v: a row of each layer's K and V tensors
// (ggml_row_size).
func (h *hparams) kvPerCell(fa bool, k, v llama.CacheType) int64 {
	maxKV := slices.Max(h.headsKV)
	var n int64
	for _, kv := range h.headsKV {
		vw := kv * h.headV
		if !fa {
			vw = maxKV * h.headV // transposed V: every layer the widest
		}
		n += k.RowBytes(kv*h.headK) + v.RowBytes(vw)
	}
	return n
}

// plainAttention returns ErrEstimate unless md's model keeps nothing but
// a KV cache of every layer's key and value heads, the memory
// kvPerCell and compute model: no recurrent state, sliding window or
// compressed (MLA) keys. Those are estimated from the file only (see
// EstimateMemory).
func (h *hparams) plainAttention(md *gguf.Metadata) error {
	if h.heads <= 0 {
		return fmt.Errorf("%w: %s has no %s.attention.head_count (a recurrent architecture?): estimate it from its file", ErrEstimate, md.Architecture, md.Architecture)
	}
	for _, k := range []string{"attention.sliding_window", "attention.kv_lora_rank", "ssm.state_size", "wkv.head_size", "shortconv.l_cache"} {
		if _, ok := md.KV[md.Architecture+"."+k]; ok {
			return fmt.Errorf("%w: %s declares %s.%s, a memory the header-only estimate does not model: estimate it from its file", ErrEstimate, md.Architecture, md.Architecture, k)
		}
	}
	return nil
}

// compute is the compute buffer plus ggml's scratch for a pass of tokens
// tokens over cells cells (see EstimateMemory).
func (h *hparams) compute(cells, tokens int64, fa bool) int64 {
	const a = 4 // bytes of an F32 activation
	kvEmbd := slices.Max(h.headsKV) * max(h.headK, h.headV)
	mask := cells * tokens * a
	// live: held through every layer; hole: freed early, reusable by
	// whatever fits in it.
	live, hole := cells*tokens*2, int64(0) // the F16 mask
	if !fa {
		live, hole = mask, cells*tokens*h.heads*a // the mask; the scores
	}
	attn := live + hole + (4*h.embd+2*kvEmbd)*a*tokens
	ffn := (3*h.ff + 3*h.embd) * a * tokens
	if ffn <= hole {
		ffn = 0
	}
	ffn += live + hole
	out := (h.vocab + 2*h.embd) * a * tokens
	return max(attn, ffn, out) + h.scratch(cells, tokens, fa)
}

// scratch is what ggml's CPU backend converts matrix-product inputs in,
// beside the compute buffer: the largest input converted to the weights'
// dot type (at most 2 bytes a value) or, without flash attention, the
// soft-maxed scores converted to F16.
func (h *hparams) scratch(cells, tokens int64, fa bool) int64 {
	s := 2 * max(h.embd, h.ff) * tokens
	if !fa {
		s = max(s, cells*tokens*h.heads*2)
	}
	return s
}

// Bounds on what a file may say, so that no product of a few dimensions
// overflows and no per-layer table is huge.
const (
	maxCount  = 1 << 24
	maxLayers = 1 << 16
)

// count reads key as a scalar count, or returns def when it is absent.
func count(md *gguf.Metadata, key string, def int64) (int64, error) {
	if _, ok := md.KV[key]; !ok {
		return def, nil
	}
	n, ok := md.Uint(key)
	if !ok || n > maxCount {
		return 0, fmt.Errorf("%w: %s = %v", ErrEstimate, key, md.KV[key])
	}
	return int64(n), nil
}

// perLayer reads key as one value per layer: an array of layers values,
// or a scalar for every layer. It returns nil when the key is absent.
func perLayer(md *gguf.Metadata, key string, layers int) ([]int64, error) {
	v, ok := md.KV[key]
	if !ok {
		return nil, nil
	}
	if n, ok := md.Uint(key); ok {
		if n > maxCount {
			return nil, fmt.Errorf("%w: %s = %d", ErrEstimate, key, n)
		}
		out := make([]int64, layers)
		for i := range out {
			out[i] = int64(n)
		}
		return out, nil
	}
	var out []int64
	switch s := v.(type) {
	case []uint8:
		out = toInt64(s)
	case []int8:
		out = toInt64(s)
	case []uint16:
		out = toInt64(s)
	case []int16:
		out = toInt64(s)
	case []uint32:
		out = toInt64(s)
	case []int32:
		out = toInt64(s)
	case []uint64:
		out = toInt64(s)
	case []int64:
		out = s
	default:
		return nil, fmt.Errorf("%w: %s is a %T, not a count", ErrEstimate, key, v)
	}
	if len(out) != layers {
		return nil, fmt.Errorf("%w: %s has %d values for %d layers", ErrEstimate, key, len(out), layers)
	}
	for i, n := range out {
		if n < 0 || n > maxCount {
			return nil, fmt.Errorf("%w: %s[%d] = %d", ErrEstimate, key, i, n)
		}
	}
	return out, nil
}

// toInt64 converts integer values.
func toInt64[T uint8 | int8 | uint16 | int16 | uint32 | int32 | uint64](s []T) []int64 {
	out := make([]int64, len(s))
	for i, v := range s {
		out[i] = int64(v)
	}
	return out
}

// byOffset is md's tensors in the order of their data in the file.
func byOffset(md *gguf.Metadata) []gguf.TensorInfo {
	return slices.SortedFunc(slices.Values(md.Tensors), func(a, b gguf.TensorInfo) int { return cmp.Compare(a.Offset, b.Offset) })
}

// weightBytes is the span of tensor data llama.cpp maps: from the first
// tensor's data to the end of the last. A tensor of a type the gguf
// package does not size (IQ quants, say) ends where the next one starts;
// the last one in the file, if unsized, is counted at 2 bytes an element,
// more than any quantized type takes.
func weightBytes(md *gguf.Metadata) (int64, error) {
	if len(md.Tensors) == 0 {
		return 0, fmt.Errorf("%w: no tensors", ErrEstimate)
	}
	ts := byOffset(md)
	var end uint64
	for i, t := range ts {
		size, ok := t.Size()
		if !ok {
			if i+1 < len(ts) {
				size = ts[i+1].Offset - t.Offset
			} else if n, ok := t.Elements(); ok && n < 1<<61 {
				size = 2 * n
			} else {
				return 0, fmt.Errorf("%w: tensor %q: size overflows", ErrEstimate, t.Name)
			}
		}
		end = max(end, t.Offset+size)
	}
	span := end - ts[0].Offset
	if span > 1<<62 {
		return 0, fmt.Errorf("%w: tensor data of %d bytes", ErrEstimate, span)
	}
	return int64(span), nil
}

// headBytes is the size of the tensors of md's multi-token prediction
// head: its last nextn_predict_layers blocks, which llama.cpp loads only
// for a context that drafts with them (llama.Offload.MTP).
func headBytes(md *gguf.Metadata) int64 {
	heads, _ := md.Uint(md.Architecture + ".nextn_predict_layers")
	if heads == 0 || heads > uint64(md.BlockCount) {
		return 0
	}
	first := md.BlockCount - int(heads)
	var n int64
	for _, t := range md.Tensors {
		rest, ok := strings.CutPrefix(t.Name, "blk.")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		if b, err := strconv.Atoi(num); err != nil || b < first {
			continue
		}
		if size, ok := t.Size(); ok {
			n += int64(size)
		}
	}
	return n
}

// alignTo rounds n up to a multiple of m.
func alignTo(n, m int) int {
	return (n + m - 1) / m * m
}
