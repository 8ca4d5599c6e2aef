package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
)

// writeTiny writes the tiny shape with the given weight type and returns
// the path.
func writeTiny(t *testing.T, typ string, seed int64) string {
	t.Helper()
	s := Shapes["tiny"]
	s.Type = typ
	p := filepath.Join(t.TempDir(), "tiny-"+typ+".gguf")
	if err := WriteSynthetic(p, s, seed); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWriteSyntheticReadBack(t *testing.T) {
	for _, tc := range []struct {
		typ      string
		matrix   TensorType
		fileType uint32
		kvs      int
	}{
		{"q8_0", TypeQ8_0, 7, 24},
		{"f32", TypeF32, 0, 23},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			p := writeTiny(t, tc.typ, 1)
			m, err := ReadMetadata(p)
			if err != nil {
				t.Fatal(err)
			}
			want := Metadata{
				Version: 3, Architecture: "llama",
				Name:          "corral synthetic embd=64,layers=2,heads=4,kv=2,ff=128,vocab=512,ctx=256,type=" + tc.typ,
				ContextLength: 256, EmbeddingLength: 64, BlockCount: 2, FeedForwardLength: 128,
				HeadCount: 4, HeadCountKV: 2, VocabSize: 512, BOS: 1, EOS: 2, AddBOS: true,
				FileType: int(tc.fileType), TensorCount: 3 + 2*9, Alignment: 32,
			}
			got := *m
			got.KV, got.Tensors, got.DataOffset = nil, nil, 0
			if !reflect.DeepEqual(got, want) {
				t.Errorf("typed fields:\ngot  %+v\nwant %+v", got, want)
			}
			checkSynthKVs(t, m, tc.fileType, tc.kvs)
			checkSynthTensors(t, m, tc.matrix)
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			last := m.Tensors[len(m.Tensors)-1]
			size, _ := last.Size()
			if end := m.DataOffset + int64(alignUp(last.Offset+size, 32)); end != st.Size() {
				t.Errorf("padded data ends at %d, file is %d bytes", end, st.Size())
			}
			if m.DataOffset%32 != 0 {
				t.Errorf("data offset %d not aligned", m.DataOffset)
			}
			var params int64
			for _, ti := range m.Tensors {
				n, _ := ti.Elements()
				params += int64(n)
			}
			if p := Shapes["tiny"].Params(); p != params {
				t.Errorf("Params() = %d, tensors hold %d", p, params)
			}
		})
	}
}

func checkSynthKVs(t *testing.T, m *Metadata, fileType uint32, count int) {
	t.Helper()
	want := map[string]any{
		"general.architecture":                   "llama",
		"general.alignment":                      uint32(32),
		"general.file_type":                      fileType,
		"llama.context_length":                   uint32(256),
		"llama.embedding_length":                 uint32(64),
		"llama.block_count":                      uint32(2),
		"llama.feed_forward_length":              uint32(128),
		"llama.attention.head_count":             uint32(4),
		"llama.attention.head_count_kv":          uint32(2),
		"llama.rope.dimension_count":             uint32(16),
		"llama.rope.freq_base":                   float32(10000),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5),
		"llama.vocab_size":                       uint32(512),
		"tokenizer.ggml.model":                   "llama",
		"tokenizer.ggml.unknown_token_id":        uint32(0),
		"tokenizer.ggml.bos_token_id":            uint32(1),
		"tokenizer.ggml.eos_token_id":            uint32(2),
		"tokenizer.ggml.add_bos_token":           true,
		"tokenizer.ggml.add_eos_token":           false,
	}
	if fileType != 0 {
		want["general.quantization_version"] = uint32(2)
	}
	for k, v := range want {
		if got := m.KV[k]; !reflect.DeepEqual(got, v) {
			t.Errorf("%s = %#v, want %#v", k, got, v)
		}
	}
	if len(m.KV) != count {
		t.Errorf("%d keys, want %d", len(m.KV), count)
	}
	toks, _ := m.KV["tokenizer.ggml.tokens"].([]string)
	scores, _ := m.KV["tokenizer.ggml.scores"].([]float32)
	types, _ := m.KV["tokenizer.ggml.token_type"].([]int32)
	if len(toks) != 512 || len(scores) != 512 || len(types) != 512 {
		t.Fatalf("tokenizer arrays of %d, %d, %d, want 512", len(toks), len(scores), len(types))
	}
	for id, want := range map[int]struct {
		tok string
		typ int32
	}{0: {"<unk>", 2}, 1: {"<s>", 3}, 2: {"</s>", 3}, 3: {"<0x00>", 6}, 13: {"<0x0A>", 6}, 258: {"<0xFF>", 6}, 259: {"▁", 1}, 260: {"!", 1}} {
		if toks[id] != want.tok || types[id] != want.typ {
			t.Errorf("token %d = %q type %d, want %q type %d", id, toks[id], types[id], want.tok, want.typ)
		}
	}
}

// checkSynthTensors compares m's tensors with the layout llama.cpp's llama
// loader expects for the tiny shape.
func checkSynthTensors(t *testing.T, m *Metadata, mt TensorType) {
	t.Helper()
	type tensor struct {
		name string
		dims []uint64
		typ  TensorType
	}
	want := []tensor{
		{"token_embd.weight", []uint64{64, 512}, mt},
		{"output_norm.weight", []uint64{64}, TypeF32},
		{"output.weight", []uint64{64, 512}, mt},
	}
	for i := range 2 {
		b := fmt.Sprintf("blk.%d.", i)
		want = append(want,
			tensor{b + "attn_norm.weight", []uint64{64}, TypeF32},
			tensor{b + "attn_q.weight", []uint64{64, 64}, mt},
			tensor{b + "attn_k.weight", []uint64{64, 32}, mt},
			tensor{b + "attn_v.weight", []uint64{64, 32}, mt},
			tensor{b + "attn_output.weight", []uint64{64, 64}, mt},
			tensor{b + "ffn_norm.weight", []uint64{64}, TypeF32},
			tensor{b + "ffn_gate.weight", []uint64{64, 128}, mt},
			tensor{b + "ffn_up.weight", []uint64{64, 128}, mt},
			tensor{b + "ffn_down.weight", []uint64{128, 64}, mt},
		)
	}
	if len(m.Tensors) != len(want) {
		t.Fatalf("%d tensors, want %d", len(m.Tensors), len(want))
	}
	var off uint64
	for i, w := range want {
		g := m.Tensors[i]
		if g.Name != w.name || !reflect.DeepEqual(g.Dims, w.dims) || g.Type != w.typ || g.Offset != off {
			t.Errorf("tensor %d = %s %v %v at %d, want %s %v %v at %d", i, g.Name, g.Dims, g.Type, g.Offset, w.name, w.dims, w.typ, off)
		}
		size, _ := g.Size()
		off = alignUp(g.Offset+size, 32)
	}
}

func TestWriteSyntheticWeights(t *testing.T) {
	p := writeTiny(t, "q8_0", 7)
	m, err := ReadMetadata(p)
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range m.Tensors {
		size, _ := ti.Size()
		data := file[m.DataOffset+int64(ti.Offset):][:size]
		var vals []float32
		if ti.Type == TypeF32 {
			vals = make([]float32, len(data)/4)
			for i := range vals {
				vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
			}
		} else {
			vals = dequantQ8_0(data)
		}
		if strings.HasSuffix(ti.Name, "norm.weight") {
			for i, v := range vals {
				if v != 1 {
					t.Fatalf("%s[%d] = %v, want 1", ti.Name, i, v)
				}
			}
			continue
		}
		var sum, sq float64
		for _, v := range vals {
			sum += float64(v)
			sq += float64(v) * float64(v)
		}
		n := float64(len(vals))
		mean, std := sum/n, math.Sqrt(sq/n-(sum/n)*(sum/n))
		// 2048+ samples of N(0, 0.02): the mean is within 5 standard
		// errors of 0 and the deviation within 10% of 0.02.
		if math.Abs(mean) > 5*0.02/math.Sqrt(n) || math.Abs(std-0.02) > 0.002 {
			t.Errorf("%s: mean %.5f, std %.5f; want about N(0, 0.02)", ti.Name, mean, std)
		}
	}
}

func TestWriteSyntheticDeterministic(t *testing.T) {
	a, err := os.ReadFile(writeTiny(t, "q8_0", 42))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(writeTiny(t, "q8_0", 42))
	if err != nil {
		t.Fatal(err)
	}
	c, err := os.ReadFile(writeTiny(t, "q8_0", 43))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("two files from seed 42 differ")
	}
	if bytes.Equal(a, c) {
		t.Error("seeds 42 and 43 give the same file")
	}
}

func TestWriteSyntheticInvalid(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.gguf")
	bad := Shapes["tiny"]
	bad.Embd = 48 // not whole Q8_0 blocks
	if err := WriteSynthetic(p, bad, 1); err == nil {
		t.Fatal("WriteSynthetic of an invalid shape succeeded")
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("file left behind: %v", err)
	}
	if err := WriteSynthetic(filepath.Join(t.TempDir(), "no", "such", "dir.gguf"), Shapes["tiny"], 1); err == nil {
		t.Error("WriteSynthetic into a missing directory succeeded")
	}
}

// TestWriteSyntheticArchRefusesCopy: the weights that copy are laid out
// for a llama; another architecture's file would not copy.
func TestWriteSyntheticArchRefusesCopy(t *testing.T) {
	s := Shapes["135m"]
	s.Copy = true
	err := WriteSyntheticArch(filepath.Join(t.TempDir(), "x.gguf"), "qwen3", s, 1, SynthOptions{}, nil)
	if err == nil || !strings.Contains(err.Error(), "copies") {
		t.Errorf("WriteSyntheticArch with copy=true: %v, want a refusal", err)
	}
}

// TestReferenceDecoder runs the independent pure-Python decoder next to the
// test models over synthetic files: it parses the header, dequantizes every
// tensor, tokenizes with the synthetic vocabulary and runs the forward pass.
func TestReferenceDecoder(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	script := filepath.Join(testmodel.Dir(), "gguf_ref_generate.py")
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("reference decoder missing: %v", err)
	}
	out := regexp.MustCompile(`(?m)^prompt ids: \[1, 259, [0-9, ]+\]\ngreedy: '.+'$`)
	for _, typ := range []string{"f32", "q8_0"} {
		t.Run(typ, func(t *testing.T) {
			p := writeTiny(t, typ, 1)
			b, err := exec.Command(python, script, p, "Hello", "3").CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			if !out.Match(b) {
				t.Fatalf("unexpected output:\n%s", b)
			}
		})
	}
}
