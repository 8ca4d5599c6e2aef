package gguf

import (
	_ "embed"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
)

// ProjectorKinds are the multimodal projectors WriteSyntheticProjector
// writes, by clip.projector_type: "gemma3", Gemma 3's SigLIP vision
// encoder (an image becomes 16 tokens); "qwen2a", Qwen2-Audio's Whisper
// encoder (any audio under 30 s becomes 750 tokens); and
// "qwen2vl_merger", Qwen2-VL's vision encoder, whose model places an
// image's tokens with M-RoPE's 2-D positions (a 64 × 64 image becomes
// 4 × 4 tokens over 4 positions).
var ProjectorKinds = []string{"gemma3", "qwen2a", "qwen2vl_merger"}

// ProjectorText returns the synthetic text model a projector of kind
// goes with, as corral synth --mmproj writes it: its architecture (arch,
// one of ProjectorArchs(kind), or "" for the first); its shape,
// ArchShape's with a context of at least 2,048 (room for an audio clip's
// 750 tokens and a prompt); and its options, the chat template's control
// tokens and then the tokens llama.cpp's mtmd puts around a medium's
// embeddings in its vocabulary, and a chat template. It returns false
// for a kind WriteSyntheticProjector does not know, or an architecture
// the kind does not go with.
//
// No Gemma 3 template is at hand: the gemma3 model takes Gemma 2's, whose
// turns are the same (it takes text content only; mtmd's media markers
// are text).
func ProjectorText(kind, arch string) (_ string, shape Shape, opts SynthOptions, ok bool) {
	archs := ProjectorArchs(kind)
	if arch == "" && len(archs) > 0 {
		arch = archs[0]
	}
	if !slices.Contains(archs, arch) {
		return "", Shape{}, SynthOptions{}, false
	}
	switch kind {
	case "gemma3":
		opts = SynthOptions{Special: []string{"<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>"}, ChatTemplate: gemma2Template}
	case "qwen2a":
		opts = SynthOptions{Special: []string{"<|audio_bos|>", "<|audio_eos|>"}, ChatTemplate: qwen25Template}
		shape.ChatML = true
	case "qwen2vl_merger":
		opts = SynthOptions{Special: []string{"<|vision_start|>", "<|vision_end|>"}, ChatTemplate: qwen25Template}
		shape.ChatML = true
	}
	chatML := shape.ChatML
	shape = ArchShape(arch)
	shape.Ctx, shape.ChatML = max(shape.Ctx, 2048), chatML
	return arch, shape, opts, true
}

// ProjectorArchs are the text architectures a synthetic projector of
// kind goes with, its own first: a qwen2vl_merger projector also goes
// with Qwen3.5's hybrid model (recurrent layers, and M-RoPE as Qwen2-VL's).
func ProjectorArchs(kind string) []string {
	switch kind {
	case "gemma3":
		return []string{"gemma3"}
	case "qwen2a":
		return []string{"qwen2"}
	case "qwen2vl_merger":
		return []string{"qwen2vl", "qwen35"}
	}
	return nil
}

// The chat templates of ProjectorText's models, from ../shared/templates.
var (
	//go:embed templates/google-gemma-2-2b-it.jinja
	gemma2Template string
	//go:embed templates/Qwen-Qwen2.5-7B-Instruct.jinja
	qwen25Template string
)

// The synthetic encoders' sizes: small, and with a feed-forward width
// unlike the embedding width (clip.cpp swaps ffn_up and ffn_down of a
// Gemma 3 projector whose ffn_down rows are n_embd long).
const (
	projEmbd   = 64
	projFF     = 128
	projHeads  = 2
	projLayers = 2
	// gemma3: a 64×64 image in 8×8 patches, average-pooled 2×2: 16 tokens.
	projImageSize   = 64
	projPatchSize   = 8
	projScaleFactor = 2
	// qwen2a: 80 mel bins; 3000 frames (30 s) halve to 1500 positions.
	projMelBins   = 80
	projAudioPos  = 1500
	projConvWidth = 3
)

// WriteSyntheticProjector writes to path a multimodal projector (a
// general.architecture "clip" file, as llama.cpp's mtmd loads with
// --mmproj) of the given kind (see ProjectorKinds) with random weights,
// whose embeddings are textEmbd wide: the embedding width of the text
// model it goes with. Layer norm weights are 1; matrices and convolution
// kernels are drawn from N(0, 1/fan-in), biases and the rest from
// N(0, 0.02²). The metadata has the value types clip.cpp insists on (u32,
// f32, bool, string, f32 arrays). The same kind, width and seed give the
// same file.
func WriteSyntheticProjector(path, kind string, textEmbd int, seed int64) error {
	return WriteSyntheticProjectorShape(path, kind, textEmbd, seed, DefaultProjectorShape)
}

// ProjectorShape sizes a synthetic projector's encoder: its width, its
// feed-forward width, heads and layers, and for an image encoder the
// side of the square image it takes and of its patches (a gemma3
// projector pools the patches 2 × 2: (ImageSize/PatchSize/2)² tokens).
type ProjectorShape struct {
	Embd, FF, Heads, Layers int
	ImageSize, PatchSize    int
}

// DefaultProjectorShape is WriteSyntheticProjector's: small, with a
// feed-forward width unlike the embedding width, a 64 × 64 image in 8 × 8
// patches (16 tokens).
var DefaultProjectorShape = ProjectorShape{Embd: projEmbd, FF: projFF, Heads: projHeads, Layers: projLayers, ImageSize: projImageSize, PatchSize: projPatchSize}

// WriteSyntheticProjectorShape is WriteSyntheticProjector with the
// encoder's shape: a larger one times the encoder (ViT-B is Embd 768, FF
// 3072, 12 heads, 12 layers).
func WriteSyntheticProjectorShape(path, kind string, textEmbd int, seed int64, shape ProjectorShape) error {
	kvs, tensors, err := projector(kind, textEmbd, shape)
	if err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	return writeRandom(path, kvs, tensors, seed, func(e *encoder, t TensorInfo, rng *rand.Rand) {
		if projectorOnes(t.Name) {
			writeOnes(e, t)
		} else {
			writeTensor(e, t, rng, projectorStdDev(t))
		}
	})
}

// projector returns the metadata and the tensors, laid out back to back,
// of a synthetic projector of kind for a text model textEmbd wide.
func projector(kind string, textEmbd int, shape ProjectorShape) ([]kv, []TensorInfo, error) {
	if !slices.Contains(ProjectorKinds, kind) {
		return nil, nil, fmt.Errorf("unknown projector kind %q; known: %s", kind, strings.Join(ProjectorKinds, ", "))
	}
	if textEmbd <= 0 || textEmbd > maxProjectorEmbd {
		return nil, nil, fmt.Errorf("projector for a text model %d wide: want 1 to %d", textEmbd, maxProjectorEmbd)
	}
	sh := shape
	if sh.Embd <= 0 || sh.Embd > maxProjectorEmbd || sh.FF <= 0 || sh.FF > maxProjectorEmbd || sh.Heads <= 0 || sh.Embd%sh.Heads != 0 ||
		sh.Layers <= 0 || sh.Layers > 256 || sh.PatchSize <= 0 || sh.ImageSize < 2*sh.PatchSize || sh.ImageSize > 4096 || sh.ImageSize%(2*sh.PatchSize) != 0 {
		return nil, nil, fmt.Errorf("projector shape %+v: want widths of 1 to %d, heads dividing the width, 1 to 256 layers, and an image side of 2 to 4096 patches' worth, a multiple of 2 patches", sh, maxProjectorEmbd)
	}
	modality, prefix, eps := "vision", "v", float32(1e-6)
	if kind == "qwen2a" {
		modality, prefix, eps = "audio", "a", 1e-5
	}
	u := func(n int) uint32 { return uint32(n) }
	kvs := []kv{
		{"general.architecture", "clip"},
		{"general.name", "corral synthetic " + kind + " projector"},
		{"general.alignment", uint32(defaultAlignment)},
		{"general.file_type", uint32(0)}, // LLAMA_FTYPE_ALL_F32
		{"clip.has_vision_encoder", modality == "vision"},
		{"clip.has_audio_encoder", modality == "audio"},
		{"clip.projector_type", kind},
	}
	add := func(key string, v any) { kvs = append(kvs, kv{"clip." + modality + "." + key, v}) }
	add("embedding_length", u(sh.Embd))
	add("feed_forward_length", u(sh.FF))
	add("block_count", u(sh.Layers))
	add("attention.head_count", u(sh.Heads))
	add("projection_dim", u(textEmbd)) // required, though neither kind uses it
	add("attention.layer_norm_epsilon", eps)

	e, ff, n := uint64(sh.Embd), uint64(sh.FF), uint64(textEmbd)
	var ts []TensorInfo
	t := func(name string, dims ...uint64) { ts = append(ts, TensorInfo{Name: name, Dims: dims, Type: TypeF32}) }
	switch kind {
	case "gemma3":
		add("image_size", u(sh.ImageSize))
		add("patch_size", u(sh.PatchSize))
		add("projector.scale_factor", u(projScaleFactor))
		add("image_mean", []float32{0.5, 0.5, 0.5})
		add("image_std", []float32{0.5, 0.5, 0.5})
		kvs = append(kvs, kv{"clip.use_gelu", true})
		p := uint64(sh.PatchSize)
		patches := uint64(sh.ImageSize/sh.PatchSize) * uint64(sh.ImageSize/sh.PatchSize)
		t("v.patch_embd.weight", p, p, 3, e)
		t("v.patch_embd.bias", e)
		t("v.position_embd.weight", e, patches)
	case "qwen2vl_merger":
		// Patches merged 2 × 2 after the encoder; no patch bias nor
		// position embedding (M-RoPE places the patches); two patch
		// kernels (a video's two frames; an image takes both).
		add("image_size", u(sh.ImageSize))
		add("patch_size", u(sh.PatchSize))
		add("image_mean", []float32{0.5, 0.5, 0.5})
		add("image_std", []float32{0.5, 0.5, 0.5})
		kvs = append(kvs, kv{"clip.use_gelu", true})
		p := uint64(sh.PatchSize)
		t("v.patch_embd.weight", p, p, 3, e)
		t("v.patch_embd.weight.1", p, p, 3, e)
	default:
		add("num_mel_bins", u(projMelBins))
		t("a.conv1d.1.weight", projConvWidth, projMelBins, e)
		t("a.conv1d.1.bias", 1, e)
		t("a.conv1d.2.weight", projConvWidth, e, e)
		t("a.conv1d.2.bias", 1, e)
		t("a.position_embd.weight", e, projAudioPos)
	}
	for il := range sh.Layers {
		b := fmt.Sprintf("%s.blk.%d.", prefix, il)
		t(b+"ln1.weight", e)
		t(b+"ln1.bias", e)
		for _, m := range []string{"attn_q", "attn_k", "attn_v", "attn_out"} {
			t(b+m+".weight", e, e)
			if kind != "qwen2a" || m != "attn_k" { // whisper's keys have no bias (asserted)
				t(b+m+".bias", e)
			}
		}
		t(b+"ln2.weight", e)
		t(b+"ln2.bias", e)
		t(b+"ffn_up.weight", e, ff)
		t(b+"ffn_up.bias", ff)
		t(b+"ffn_down.weight", ff, e)
		t(b+"ffn_down.bias", e)
	}
	t(prefix+".post_ln.weight", e)
	t(prefix+".post_ln.bias", e)
	switch kind {
	case "gemma3":
		t("mm.soft_emb_norm.weight", e)
		t("mm.input_projection.weight", n, e) // applied transposed: ne[0] is the text width
	case "qwen2vl_merger":
		t("mm.0.weight", 4*e, 4*e) // over 2 × 2 merged patches
		t("mm.0.bias", 4*e)
		t("mm.2.weight", 4*e, n)
		t("mm.2.bias", n)
	default:
		t("mm.a.fc.weight", e, n)
		t("mm.a.fc.bias", n)
	}
	var off uint64
	for i := range ts {
		ts[i].Offset = off
		size, _ := ts[i].Size()
		off += alignUp(size, defaultAlignment)
	}
	return kvs, ts, nil
}

// maxProjectorEmbd bounds the text width of a synthetic projector.
const maxProjectorEmbd = 1 << 16

// projectorOnes reports whether the tensor named name is a norm weight,
// which is 1.
func projectorOnes(name string) bool {
	base, ok := strings.CutSuffix(name, ".weight")
	if !ok {
		return false
	}
	last := base[strings.LastIndexByte(base, '.')+1:]
	return slices.Contains([]string{"ln1", "ln2", "post_ln", "soft_emb_norm"}, last) || strings.HasPrefix(last, "norm_")
}

// projectorStdDev is the standard deviation of the values of t: 1/√fan-in
// for a weight of two or more dimensions (a row, or a convolution kernel
// across its input channels), weightStdDev for the rest.
func projectorStdDev(t TensorInfo) float64 {
	if len(t.Dims) < 2 || !strings.HasSuffix(t.Name, ".weight") {
		return weightStdDev
	}
	n, _ := t.Elements()
	return 1 / math.Sqrt(float64(n/t.Dims[len(t.Dims)-1]))
}

// writeOnes writes the data of t, an F32 tensor, as ones.
func writeOnes(e *encoder, t TensorInfo) {
	n, _ := t.Elements()
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = 1
	}
	out := make([]byte, 4*n)
	putF32(out, vals)
	e.write(out)
}
