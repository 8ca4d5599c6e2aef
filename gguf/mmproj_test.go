package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeProjector writes a synthetic projector of kind for a text model
// textEmbd wide and returns its path.
func writeProjector(t *testing.T, kind string, textEmbd int, seed int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), kind+".mmproj.gguf")
	if err := WriteSyntheticProjector(p, kind, textEmbd, seed); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWriteSyntheticProjectorKVs reads a projector of each kind back:
// every key has the value and the type clip.cpp's get_u32, get_f32,
// get_bool, get_string and get_arr_f32 want (they assert it: clip.cpp in
// llama.cpp b10573's tools/mtmd, clip_model_loader).
func TestWriteSyntheticProjectorKVs(t *testing.T) {
	common := func(kind, mod string, eps float32) map[string]any {
		return map[string]any{
			"general.architecture":                          "clip",
			"general.name":                                  "corral synthetic " + kind + " projector",
			"general.alignment":                             uint32(32),
			"general.file_type":                             uint32(0),
			"clip.has_vision_encoder":                       mod == "vision",
			"clip.has_audio_encoder":                        mod == "audio",
			"clip.projector_type":                           kind,
			"clip." + mod + ".embedding_length":             uint32(64),
			"clip." + mod + ".feed_forward_length":          uint32(128),
			"clip." + mod + ".block_count":                  uint32(2),
			"clip." + mod + ".attention.head_count":         uint32(2),
			"clip." + mod + ".projection_dim":               uint32(320),
			"clip." + mod + ".attention.layer_norm_epsilon": eps,
		}
	}
	gemma3 := common("gemma3", "vision", 1e-6)
	gemma3["clip.vision.image_size"] = uint32(64)
	gemma3["clip.vision.patch_size"] = uint32(8)
	gemma3["clip.vision.projector.scale_factor"] = uint32(2)
	gemma3["clip.vision.image_mean"] = []float32{0.5, 0.5, 0.5}
	gemma3["clip.vision.image_std"] = []float32{0.5, 0.5, 0.5}
	gemma3["clip.use_gelu"] = true
	qwen2a := common("qwen2a", "audio", 1e-5)
	qwen2a["clip.audio.num_mel_bins"] = uint32(80)
	qwen2vl := common("qwen2vl_merger", "vision", 1e-6)
	qwen2vl["clip.vision.image_size"] = uint32(64)
	qwen2vl["clip.vision.patch_size"] = uint32(8)
	qwen2vl["clip.vision.image_mean"] = []float32{0.5, 0.5, 0.5}
	qwen2vl["clip.vision.image_std"] = []float32{0.5, 0.5, 0.5}
	qwen2vl["clip.use_gelu"] = true
	for kind, want := range map[string]map[string]any{"gemma3": gemma3, "qwen2a": qwen2a, "qwen2vl_merger": qwen2vl} {
		t.Run(kind, func(t *testing.T) {
			m, err := ReadMetadata(writeProjector(t, kind, 320, 1))
			if err != nil {
				t.Fatal(err)
			}
			if m.Architecture != "clip" || m.Alignment != 32 || m.FileType != 0 {
				t.Errorf("architecture %q, alignment %d, file type %d; want clip, 32, 0", m.Architecture, m.Alignment, m.FileType)
			}
			for k, v := range want {
				if got, ok := m.KV[k]; !ok {
					t.Errorf("%s missing", k)
				} else if !reflect.DeepEqual(got, v) {
					t.Errorf("%s = %#v (%T), want %#v (%T)", k, got, got, v, v)
				}
			}
			for k := range m.KV {
				if _, ok := want[k]; !ok {
					t.Errorf("unexpected key %s", k)
				}
			}
		})
	}
}

// TestWriteSyntheticProjectorTensors checks every tensor's name, type and
// extents (ggml order) against the plan's tables, and the values: norm
// weights are 1, the rest are drawn at the scale of their fan-in.
func TestWriteSyntheticProjectorTensors(t *testing.T) {
	const n = 320 // text width
	block := func(prefix string, kBias bool) map[string][]uint64 {
		ts := map[string][]uint64{}
		for il := range 2 {
			b := fmt.Sprintf("%s.blk.%d.", prefix, il)
			for _, v := range []string{"ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "attn_q.bias", "attn_v.bias", "attn_out.bias", "ffn_down.bias"} {
				ts[b+v] = []uint64{64}
			}
			if kBias {
				ts[b+"attn_k.bias"] = []uint64{64}
			}
			for _, w := range []string{"attn_q", "attn_k", "attn_v", "attn_out"} {
				ts[b+w+".weight"] = []uint64{64, 64}
			}
			ts[b+"ffn_up.weight"] = []uint64{64, 128}
			ts[b+"ffn_up.bias"] = []uint64{128}
			ts[b+"ffn_down.weight"] = []uint64{128, 64}
		}
		ts[prefix+".post_ln.weight"] = []uint64{64}
		ts[prefix+".post_ln.bias"] = []uint64{64}
		return ts
	}
	gemma3 := block("v", true)
	gemma3["v.patch_embd.weight"] = []uint64{8, 8, 3, 64}
	gemma3["v.patch_embd.bias"] = []uint64{64}
	gemma3["v.position_embd.weight"] = []uint64{64, 64}
	gemma3["mm.soft_emb_norm.weight"] = []uint64{64}
	gemma3["mm.input_projection.weight"] = []uint64{n, 64}
	qwen2a := block("a", false)
	qwen2a["a.conv1d.1.weight"] = []uint64{3, 80, 64}
	qwen2a["a.conv1d.1.bias"] = []uint64{1, 64}
	qwen2a["a.conv1d.2.weight"] = []uint64{3, 64, 64}
	qwen2a["a.conv1d.2.bias"] = []uint64{1, 64}
	qwen2a["a.position_embd.weight"] = []uint64{64, 1500}
	qwen2a["mm.a.fc.weight"] = []uint64{64, n}
	qwen2a["mm.a.fc.bias"] = []uint64{n}
	qwen2vl := block("v", true)
	qwen2vl["v.patch_embd.weight"] = []uint64{8, 8, 3, 64}
	qwen2vl["v.patch_embd.weight.1"] = []uint64{8, 8, 3, 64}
	qwen2vl["mm.0.weight"] = []uint64{256, 256}
	qwen2vl["mm.0.bias"] = []uint64{256}
	qwen2vl["mm.2.weight"] = []uint64{256, n}
	qwen2vl["mm.2.bias"] = []uint64{n}
	for kind, want := range map[string]map[string][]uint64{"gemma3": gemma3, "qwen2a": qwen2a, "qwen2vl_merger": qwen2vl} {
		t.Run(kind, func(t *testing.T) {
			p := writeProjector(t, kind, n, 3)
			m, err := ReadMetadata(p)
			if err != nil {
				t.Fatal(err)
			}
			file, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Tensors) != len(want) {
				t.Errorf("%d tensors, want %d", len(m.Tensors), len(want))
			}
			for _, ti := range m.Tensors {
				dims, ok := want[ti.Name]
				if !ok {
					t.Errorf("unexpected tensor %s", ti.Name)
					continue
				}
				if ti.Type != TypeF32 || !reflect.DeepEqual(ti.Dims, dims) {
					t.Errorf("%s: %v %v, want F32 %v", ti.Name, ti.Type, ti.Dims, dims)
					continue
				}
				checkProjectorValues(t, ti, file[m.DataOffset+int64(ti.Offset):])
			}
		})
	}
}

// checkProjectorValues checks the data of ti: ones for a norm weight,
// else a mean near 0 and a deviation near 1/√fan-in (weights) or 0.02.
func checkProjectorValues(t *testing.T, ti TensorInfo, data []byte) {
	t.Helper()
	count, _ := ti.Elements()
	vals := make([]float64, count)
	for i := range vals {
		vals[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
	}
	base := strings.TrimSuffix(ti.Name, ".weight")
	if last := base[strings.LastIndexByte(base, '.')+1:]; base != ti.Name && (last == "ln1" || last == "ln2" || last == "post_ln" || last == "soft_emb_norm") {
		for i, v := range vals {
			if v != 1 {
				t.Fatalf("%s[%d] = %v, want 1", ti.Name, i, v)
			}
		}
		return
	}
	want := 0.02
	if base != ti.Name && len(ti.Dims) > 1 {
		want = 1 / math.Sqrt(float64(count/ti.Dims[len(ti.Dims)-1]))
	}
	var sum, sq float64
	for _, v := range vals {
		sum += v
		sq += v * v
	}
	nf := float64(len(vals))
	mean, std := sum/nf, math.Sqrt(sq/nf-(sum/nf)*(sum/nf))
	// At least 64 samples: the mean within 5 standard errors of 0, the
	// deviation within 30% of the scale.
	if math.Abs(mean) > 5*want/math.Sqrt(nf) || math.Abs(std-want) > 0.3*want {
		t.Errorf("%s: mean %.5f, std %.5f; want about N(0, %.4f²)", ti.Name, mean, std, want)
	}
}

func TestWriteSyntheticProjectorDeterministic(t *testing.T) {
	for _, kind := range ProjectorKinds {
		read := func(seed int64) []byte {
			b, err := os.ReadFile(writeProjector(t, kind, 256, seed))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		a, b, c := read(42), read(42), read(43)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: two files from seed 42 differ", kind)
		}
		if bytes.Equal(a, c) {
			t.Errorf("%s: seeds 42 and 43 give the same file", kind)
		}
	}
}

func TestWriteSyntheticProjectorInvalid(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		kind string
		embd int
		want string
	}{
		{"llava", 256, `unknown projector kind "llava"`},
		{"", 256, "unknown projector kind"},
		{"gemma3", 0, "text model 0 wide"},
		{"qwen2a", 1 << 20, "text model 1048576 wide"},
	} {
		p := filepath.Join(dir, "bad.gguf")
		err := WriteSyntheticProjector(p, tc.kind, tc.embd, 1)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("WriteSyntheticProjector(%q, %d): %v, want an error with %q", tc.kind, tc.embd, err, tc.want)
		}
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%q: file left behind: %v", tc.kind, err)
		}
	}
	if _, _, _, ok := ProjectorText("llava", ""); ok {
		t.Error("ProjectorText knows llava")
	}
	if _, _, _, ok := ProjectorText("gemma3", "qwen35"); ok {
		t.Error("ProjectorText pairs gemma3 with qwen35")
	}
	for _, kind := range ProjectorKinds {
		for _, a := range append([]string{""}, ProjectorArchs(kind)...) {
			if arch, shape, opts, ok := ProjectorText(kind, a); !ok || arch == "" || (a != "" && arch != a) || shape.Ctx < 2048 || len(opts.Special) < 2 || opts.ChatTemplate == "" {
				t.Errorf("ProjectorText(%q, %q): %q %v %v %v", kind, a, arch, shape, opts.Special, ok)
			}
		}
	}
}
