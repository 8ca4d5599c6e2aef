package gguf

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A Layout lists the tensors, with their extents in ggml order, that
// llama.cpp creates for the model described by the metadata-only GGUF file
// at path. The llama package's Layout is one; gguf does not link llama.cpp.
type Layout func(path string) ([]TensorInfo, error)

// ArchShape returns the default shape of a synthetic model of architecture
// arch: a few MB of F32 weights that every architecture llama.cpp can
// build accepts, with the exceptions some architectures need (a
// hard-coded layer pattern needs more layers, multi-head latent attention
// a narrower model). Vocab is the synthetic vocabulary's size.
func ArchShape(arch string) Shape {
	s := Shape{Embd: 256, Layers: 2, Heads: 2, HeadsKV: 2, FF: 384, Vocab: 512, Ctx: 512, Type: "f32"}
	switch {
	case arch == "llama4":
		s.Layers = 4 // every 4th layer has no RoPE, hard-coded
	case arch == "gemma4":
		s.Embd, s.FF, s.Layers = 128, 192, 5 // every 5th layer attends globally
	case arch == "gemma3n":
		s.Embd, s.Heads, s.HeadsKV, s.FF, s.Layers = 64, 1, 1, 96, 22 // 20 layers own their KV, hard-coded
	case archMLA[arch]:
		s.Embd, s.Heads, s.HeadsKV, s.FF = 128, 1, 1, 192
	case arch == "nemotron_h" || arch == "nemotron_h_moe":
		s.Layers = 3 // two layers without a feed-forward, then one with
	}
	if archMoE[arch] {
		s.Experts, s.ExpertsUsed = 2, 1
	}
	return s
}

// archMoE are the architectures llama.cpp builds only with experts.
var archMoE = setOf("llama4", "cohere2moe", "grok", "qwen2moe", "qwen3moe", "qwen3next", "qwen3vlmoe",
	"qwen35moe", "phimoe", "dbrx", "olmoe", "arctic", "deepseek", "deepseek2", "deepseek32", "dots3note",
	"glm4moe", "glm-dsa", "exaone-moe", "bailingmoe", "bailingmoe2", "bailingmoe3", "dots1", "afmoe",
	"ernie4_5", "ernie4_5-moe", "hunyuan-moe", "hy_v3", "gpt-oss", "lfm2moe", "smallthinker", "llada-moe",
	"grovemoe", "minimax-01", "minimax-m2", "minimax-m3", "rnd1", "paddleocr", "mimo2", "kimi-linear",
	"kimi-k3", "step35", "mistral4", "mellum", "laguna", "deepseek4", "deepseek2-ocr")

// archMLA are the architectures with multi-head latent attention.
var archMLA = setOf("deepseek2", "deepseek32", "glm-dsa", "dots3note", "kimi-linear", "bailingmoe3",
	"kimi-k3", "mistral4")

// archHybrid are the architectures that mix attention and recurrent
// layers layer by layer: layer 1 of a synthetic one is recurrent (no
// attention heads), the others attend.
var archHybrid = setOf("plamo2", "jamba", "nemotron_h", "nemotron_h_moe", "granitehybrid", "lfm2",
	"lfm2moe", "kimi-linear", "bailingmoe3", "kimi-k3")

// archSWALayers are the architectures whose sliding-window layers are
// listed one by one (odd layers slide); the others take a period.
var archSWALayers = setOf("cohere2moe", "mimo2", "step35", "muse-glimmer", "granite_swa", "dots3note")

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// archKVs returns the hyperparameters of a synthetic model of architecture
// arch and shape s. llama.cpp reads the keys its architecture needs and
// ignores the others, so every architecture gets the same superset, with
// the few values that differ by architecture (heads per layer of a hybrid,
// the latent sizes of MLA, sliding-window patterns, experts).
func archKVs(arch string, s Shape, name string) []kv {
	u := func(n int) uint32 { return uint32(n) }
	perLayer := func(f func(il int) int) []uint32 {
		v := make([]uint32, s.Layers+s.MTP)
		for il := range v {
			v[il] = u(f(il))
		}
		return v
	}
	head := s.Embd / s.Heads
	window := max(s.Ctx/8, 1)
	kvs := []kv{
		{"general.architecture", arch},
		{"general.name", name},
		{"general.alignment", uint32(defaultAlignment)},
		{"general.file_type", s.fileType()},
	}
	add := func(key string, v any) { kvs = append(kvs, kv{arch + "." + key, v}) }
	add("vocab_size", u(s.Vocab))
	add("context_length", u(s.Ctx))
	add("embedding_length", u(s.Embd))
	add("features_length", u(s.Embd))
	add("block_count", u(s.Layers+s.MTP))
	if s.MTP > 0 {
		add("nextn_predict_layers", u(s.MTP))
	}
	add("leading_dense_block_count", uint32(1))
	if arch == "nemotron_h" || arch == "nemotron_h_moe" {
		add("feed_forward_length", perLayer(func(il int) int {
			if il <= 1 {
				return 0
			}
			return s.FF
		}))
	} else {
		add("feed_forward_length", u(s.FF))
	}
	add("use_parallel_residual", false)
	add("logit_scale", float32(1))
	add("time_mix_extra_dim", uint32(64))
	add("time_decay_extra_dim", uint32(128))
	add("full_attention_interval", uint32(2))
	if archHybrid[arch] {
		heads := func(n int) func(int) int {
			return func(il int) int {
				if il == 1 {
					return 0
				}
				return n
			}
		}
		add("attention.head_count", perLayer(heads(s.Heads)))
		add("attention.head_count_kv", perLayer(heads(s.HeadsKV)))
	} else {
		add("attention.head_count", u(s.Heads))
		add("attention.head_count_kv", u(s.HeadsKV))
	}
	add("attention.max_alibi_bias", float32(8))
	if archMLA[arch] {
		add("attention.key_length", uint32(576))
		add("attention.value_length", uint32(512))
		add("rope.dimension_count", uint32(64))
		add("attention.key_length_mla", uint32(192))
		add("attention.value_length_mla", uint32(128))
		if arch == "dots3note" {
			add("attention.kv_lora_rank_swa", uint32(512))
			add("attention.key_length_swa", uint32(576))
			add("attention.value_length_swa", uint32(512))
			add("attention.key_length_mla_swa", uint32(192))
			add("attention.value_length_mla_swa", uint32(128))
			add("rope.freq_base_swa", float32(10000))
			add("attention.indexer.types", perLayer(func(il int) int { return 1 - il%2 }))
		}
	} else if arch == "minimax-m3" {
		add("rope.dimension_count", uint32(64)) // at most the indexer's key length
	}
	add("attention.clamp_kqv", float32(1))
	add("attention.layer_norm_epsilon", float32(1e-5))
	add("attention.layer_norm_rms_epsilon", float32(1e-5))
	add("attention.group_norm_epsilon", float32(1e-5))
	add("attention.group_norm_groups", uint32(8))
	add("attention.q_lora_rank", uint32(512))
	add("attention.kv_lora_rank", uint32(512))
	add("attention.relative_buckets_count", uint32(8))
	add("attention.decay_lora_rank", uint32(64))
	add("attention.iclr_lora_rank", uint32(64))
	add("attention.value_residual_mix_lora_rank", uint32(32))
	add("attention.gate_lora_rank", uint32(64))
	add("attention.sliding_window", u(window))
	switch {
	case arch == "gemma4":
		add("embedding_length_per_layer_input", u(s.Embd/2))
		add("attention.shared_kv_layers", uint32(0))
		add("attention.key_length_swa", u(head))
		add("attention.value_length_swa", u(head))
		add("rope.freq_base_swa", float32(10000))
		add("attention.sliding_window_pattern", uint32(5))
	case archSWALayers[arch]:
		add("attention.sliding_window_pattern", perLayer(func(il int) int { return il % 2 }))
	default:
		add("attention.sliding_window_pattern", uint32(2))
	}
	indexerHeads := 1
	if arch == "minimax-m3" {
		indexerHeads = s.Heads // one indexer head per KV head
	}
	add("attention.indexer.head_count", u(indexerHeads))
	add("attention.indexer.key_length", uint32(64))
	add("attention.indexer.top_k", uint32(8))
	add("attention.indexer.block_size", uint32(4))
	add("attention.indexer.local_blocks", uint32(1))
	add("rope.dimension_sections", []uint32{u(head / 4), u(head / 4), u(head / 4), u(head / 4)})
	if s.Experts > 0 {
		add("expert_feed_forward_length", u(s.FF))
		add("expert_shared_feed_forward_length", u(s.FF/2))
		add("expert_latent_length", u(s.FF))
		add("interleave_moe_layer_step", uint32(2))
		add("expert_count", u(s.Experts))
		add("expert_used_count", u(s.ExpertsUsed))
		add("expert_shared_count", uint32(1))
		if arch == "deepseek4" {
			add("expert_gating_func", uint32(4)) // sqrt(softplus), the only one it takes
		} else {
			add("expert_gating_func", uint32(2)) // sigmoid
		}
		add("expert_weights_scale", float32(1))
		add("expert_weights_norm", true)
		add("expert_group_scale", float32(1))
		add("experts_per_group", uint32(1))
	}
	kvs = append(kvs,
		kv{"xielu.alpha_n", float32(1)}, kv{"xielu.alpha_p", float32(1)},
		kv{"xielu.beta", float32(1)}, kv{"xielu.eps", float32(1e-7)})
	ssmInner := 2 * s.Embd
	if arch == "qwen3next" || arch == "qwen35" || arch == "qwen35moe" {
		ssmInner = 128 * s.Heads // gated delta net: a 128-wide value head per time step rank
	}
	add("ssm.inner_size", u(ssmInner))
	add("ssm.conv_kernel", uint32(4))
	add("ssm.state_size", uint32(128))
	add("ssm.time_step_rank", u(s.Heads))
	if arch == "plamo2" {
		add("ssm.group_count", uint32(0))
	} else {
		add("ssm.group_count", uint32(2))
	}
	add("kda.head_dim", uint32(128))
	add("kda.safe_gate", true)
	add("kda.gate_lower_bound", float32(-5))
	if arch == "deepseek4" { // not enough yet: see ArchUnsupported
		add("swiglu_clamp_exp", float32(10))
		add("attention.output_group_count", uint32(2))
		add("attention.output_lora_rank", uint32(64))
		add("attention.compress_rope_freq_base", float32(160000))
		// Odd layers compress their KV by 4; the graph takes 4
		// hyper-connections only.
		add("attention.compress_ratios", perLayer(func(il int) int { return 4 * (il % 2) }))
		add("hyper_connection.count", uint32(4))
		add("hyper_connection.sinkhorn_iterations", uint32(3))
		add("hyper_connection.epsilon", float32(1e-6))
		add("hash_layer_count", uint32(0)) // hash routing needs expert ids, not random weights
	}
	if arch == "bailingmoe3" {
		add("swiglu_clamp_exp", []float32{0, 4})
		add("swiglu_clamp_shexp", []float32{0, 5})
	}
	add("wkv.head_size", u(head))
	add("shortconv.l_cache", uint32(3))
	add("residual_scale", float32(3.5565588))
	add("attn_res.block_size", uint32(12))
	add("activation.situ_beta", float32(4))
	add("activation.situ_linear_beta", float32(25))
	return kvs
}

// tokenUnused is llama_token_type's LLAMA_TOKEN_TYPE_UNUSED: llama.cpp
// spells such a token as no text.
const tokenUnused int32 = 5

// textVocab marks the byte tokens 0x80-0xFF of a synthetic vocabulary
// unused, so that whatever a model generates is UTF-8 text (llama-server
// b10573 fails a completion whose bytes are not, and the goldens of other
// architectures come from it). Prompts of ASCII text tokenize as before.
func textVocab(v vocab) vocab {
	for b := 0x80; b <= 0xff; b++ {
		v.types[3+b] = tokenUnused
	}
	return v
}

// WriteSyntheticArch writes to path a model of architecture arch (as
// general.architecture names it) and shape s with random weights, as
// WriteSyntheticOptions does for llama: layout, given the model's
// metadata, says which tensors llama.cpp wants and their extents, so the
// file has exactly the tensors of that architecture. Matrices that only
// multiply (attention and feed-forward projections, experts, embeddings)
// have the shape's type where their rows allow it; every other tensor is
// F32. Norm weights are 1; weight matrices are drawn from N(0, 1/row) (so
// that every layer, not only the embeddings, decides the next token), the
// rest (biases, vectors) from N(0, 0.02²). Without a
// Tokenizer the vocabulary is the synthetic one, its high byte tokens
// unused (textVocab), with ChatML's tokens and o.Special as for llama.
// The same architecture, shape, seed and options give the same file.
func WriteSyntheticArch(path, arch string, s Shape, seed int64, o SynthOptions, layout Layout) (err error) {
	if why, ok := ArchUnsupported[arch]; ok && (arch != "phi3" || o.Tokenizer == nil) {
		return fmt.Errorf("gguf: write %s: architecture %s: %s", path, arch, why)
	}
	var tokenizer []kv
	if o.Tokenizer != nil {
		if tokenizer, s.Vocab, err = tokenizerKVs(o.Tokenizer); err != nil {
			return fmt.Errorf("gguf: write %s: %w", path, err)
		}
	}
	if err := o.checkTemplates(); err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	if err := s.validateArch(o.Tokenizer == nil); err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	if s.Copy {
		return fmt.Errorf("gguf: write %s: shape %v: a model that copies is a llama (synth without --arch)", path, s)
	}
	if len(o.Special) > 0 || s.ChatML {
		if tokenizer != nil {
			return fmt.Errorf("gguf: write %s: special tokens and chatml are added to the synthetic vocabulary and cannot go with a vocabulary from a file", path)
		}
		if tokenizer, err = specialKVs(textVocab(synthVocab(s.Vocab, s.ChatML)), o.Special); err != nil {
			return fmt.Errorf("gguf: write %s: %w", path, err)
		}
		s.Vocab += len(o.Special)
		if err := s.validateArch(false); err != nil {
			return fmt.Errorf("gguf: write %s: %w", path, err)
		}
	}
	if tokenizer == nil {
		tokenizer = vocabKVs(textVocab(synthVocab(s.Vocab, false)))
	}
	name := "corral synthetic " + arch + " " + s.String()
	if o.Tokenizer != nil && o.Tokenizer.Name != "" {
		name = o.Tokenizer.Name + " (" + name + ")"
	}
	kvs := o.setTemplates(append(archKVs(arch, s, name), tokenizer...))
	if s.tensorType() != TypeF32 {
		kvs = append(kvs, kv{"general.quantization_version", uint32(2)})
	}
	tensors, err := archTensors(path, kvs, s, layout)
	if err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	return writeRandom(path, kvs, tensors, seed, func(e *encoder, t TensorInfo, rng *rand.Rand) {
		std := weightStdDev
		if len(t.Dims) > 1 && strings.HasSuffix(t.Name, ".weight") {
			std = 1 / math.Sqrt(float64(t.Dims[0]))
		}
		writeTensor(e, t, rng, std)
	})
}

// writeRandom writes the GGUF file of kvs and tensors to path, each
// tensor's data written by fill, which draws from one generator seeded
// with seed, tensor after tensor: the same arguments, the same file.
func writeRandom(path string, kvs []kv, tensors []TensorInfo, seed int64, fill func(e *encoder, t TensorInfo, rng *rand.Rand)) error {
	return writeFile(path, func(w *bufio.Writer) error {
		e := &encoder{w: w}
		e.header(kvs, tensors, defaultAlignment)
		rng := rand.New(rand.NewPCG(uint64(seed), 0x636f7272616c)) // "corral"
		for _, t := range tensors {
			if e.err != nil {
				break
			}
			fill(e, t, rng)
			e.pad(defaultAlignment)
		}
		return e.err
	})
}

// archTensors asks layout for the tensors of the model kvs describes (by
// way of a metadata-only file beside path) and returns them in a fixed
// order, typed and laid out back to back.
func archTensors(path string, kvs []kv, s Shape, layout Layout) ([]TensorInfo, error) {
	meta, err := os.CreateTemp(filepath.Dir(path), ".synth-*.gguf")
	if err != nil {
		return nil, err
	}
	defer os.Remove(meta.Name())
	bw := bufio.NewWriter(meta)
	e := &encoder{w: bw}
	e.header(kvs, nil, defaultAlignment)
	err = errors.Join(e.err, bw.Flush(), meta.Close())
	if err != nil {
		return nil, err
	}
	ts, err := layout(meta.Name())
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 || len(ts) > maxTensors {
		return nil, fmt.Errorf("llama.cpp lists %d tensors", len(ts))
	}
	ts = withoutScales(ts)
	slices.SortFunc(ts, func(a, b TensorInfo) int {
		ba, bb := blockOf(a.Name), blockOf(b.Name)
		return cmp.Or(cmp.Compare(ba, bb), strings.Compare(a.Name, b.Name))
	})
	var off uint64
	for i := range ts {
		ts[i].Type = TypeF32
		if multiplies(ts[i].Name) && s.tensorType() == TypeQ8_0 && ts[i].Dims[0]%q8Block == 0 {
			ts[i].Type = TypeQ8_0
		}
		ts[i].Offset = off
		size, ok := ts[i].Size()
		if !ok {
			return nil, fmt.Errorf("tensor %s of %v is too large", ts[i].Name, ts[i].Dims)
		}
		off += alignUp(size, defaultAlignment)
	}
	return ts, nil
}

// withoutScales drops the optional per-tensor scales of quantized
// checkpoints (NVFP4, FP8) that llama.cpp creates beside a weight
// (X.scale, X.input_scale for X.weight) when it lays out a model from
// metadata alone: a model without them multiplies by its weights as they
// are, as converted checkpoints of other types do.
func withoutScales(ts []TensorInfo) []TensorInfo {
	weights := make(map[string]bool, len(ts))
	for _, t := range ts {
		if base, ok := strings.CutSuffix(t.Name, ".weight"); ok {
			weights[base] = true
		}
	}
	return slices.DeleteFunc(ts, func(t TensorInfo) bool {
		base, ok := strings.CutSuffix(t.Name, ".input_scale")
		if !ok {
			base, ok = strings.CutSuffix(t.Name, ".scale")
		}
		return ok && weights[base]
	})
}

// blockOf returns the layer of a tensor named blk.N.*, and -1 for the
// others (embeddings, output), which come first.
func blockOf(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '.'), 0)])
	if err != nil {
		return -1
	}
	return n
}

// multiplied are the tensors that only take part in matrix products (or
// row lookups, for embeddings), by the part of their name after the
// layer: those a q8_0 file quantizes.
var multiplied = setOf("token_embd", "output", "attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output",
	"attn_gate", "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
	"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp", "ssm_in", "ssm_out",
	"eh_proj", "embed_tokens", "shared_head_head") // a multi-token prediction head's (blk.N.nextn.*)

func multiplies(name string) bool {
	base, ok := strings.CutSuffix(name, ".weight")
	if !ok {
		return false
	}
	if i := strings.LastIndexByte(base, '.'); i >= 0 {
		base = base[i+1:]
	}
	return multiplied[base]
}

// ArchUnsupported are the architectures llama.cpp b10573 knows that
// WriteSyntheticArch does not write, each with why: models that are not
// generated from token by token, or that llama.cpp cannot build (or run)
// from synthetic hyperparameters.
var ArchUnsupported = map[string]string{
	"clip":             "a vision encoder, loaded as a multimodal projector beside a text model",
	"gptj":             "llama.cpp b10573 has no graph for it (unsupported model architecture)",
	"bert":             "an encoder for embeddings (token types), not a generator",
	"nomic-bert":       "an encoder for embeddings (token types), not a generator",
	"nomic-bert-moe":   "an encoder for embeddings (token types), not a generator",
	"jina-bert-v2":     "an encoder for embeddings (token types), not a generator",
	"jina-bert-v3":     "an encoder for embeddings (token types), not a generator",
	"t5":               "an encoder-decoder: its decoder needs llama_encode first",
	"gemma4-assistant": "a draft head for speculative decoding, loaded beside its target model",
	"eagle3":           "a draft head for speculative decoding, loaded beside its target model",
	"dflash":           "a draft head for speculative decoding, loaded beside its target model",
	"graniteswitch":    "needs LoRA adapters (adapters.*), as upstream's test-llama-archs says",
	"chameleon":        "half-implemented in llama.cpp, left out by upstream's test-llama-archs",
	"plm":              "llama.cpp's tensor shapes do not match its graph, as upstream's test-llama-archs says",
	"wavtokenizer-dec": "an audio decoder (posnet, convnext), not a text model",
	"qwen3tts":         "a speech generator with a fixed codec head, not a text model",
	"deepseek4":        "its graph asserts on the synthetic hyperparameters (ggml.c:3942 a->ne[0] == b->ne[0]); upstream's test-llama-archs leaves it out too",
	"rwkv6qwen2":       "its graph asserts n_embd == n_embd_r() on the synthetic shape",
	"arwkv7":           "its graph asserts n_embd == n_embd_r() on the synthetic shape",
	"phi3":             "llama.cpp's vocabulary code looks up Phi-3's own special tokens: write it with --vocab ggml-vocab-phi-3.gguf",
}
