package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
)

func TestReadMetadataModels(t *testing.T) {
	tests := []struct {
		model string
		want  Metadata // compared field by field, KV and Tensors excepted
		// facts beyond the typed fields
		kvCount    int
		firstName  string
		firstDims  []uint64
		firstType  TensorType
		typeCounts map[TensorType]int
	}{
		{
			model: testmodel.Stories260K,
			want: Metadata{
				Version: 3, Architecture: "llama", Name: "llama",
				ContextLength: 2048, EmbeddingLength: 64, BlockCount: 5, FeedForwardLength: 172,
				HeadCount: 8, HeadCountKV: 4, VocabSize: 512, BOS: 1, EOS: 2,
				AddBOS:   true, // no add_bos_token key: llama.cpp's SPM default
				FileType: -1, TensorCount: 48, Alignment: 32,
			},
			kvCount:    19,
			firstName:  "token_embd.weight",
			firstDims:  []uint64{64, 512},
			firstType:  TypeF32,
			typeCounts: map[TensorType]int{TypeF32: 48},
		},
		{
			model: testmodel.TinyStories656K,
			want: Metadata{
				Version: 3, Architecture: "llama", Name: "Raincandy U TinyStories 656K",
				ContextLength: 512, EmbeddingLength: 128, BlockCount: 2, FeedForwardLength: 384,
				HeadCount: 8, HeadCountKV: 4, VocabSize: 2048, BOS: 1, EOS: 2,
				AddBOS: true, FileType: 7, TensorCount: 20, Alignment: 32,
			},
			kvCount:    34,
			firstName:  "output_norm.weight",
			firstDims:  []uint64{128},
			firstType:  TypeF32,
			typeCounts: map[TensorType]int{TypeF32: 5, TypeQ8_0: 15},
		},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			path := testmodel.Path(t, tt.model)
			m, err := ReadMetadata(path)
			if err != nil {
				t.Fatal(err)
			}
			got := *m
			got.KV, got.Tensors, got.DataOffset = nil, nil, 0
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("typed fields:\ngot  %+v\nwant %+v", got, tt.want)
			}
			if m.ChatTemplate != "" {
				t.Errorf("ChatTemplate = %q, want none", m.ChatTemplate)
			}
			if len(m.KV) != tt.kvCount {
				t.Errorf("%d keys, want %d", len(m.KV), tt.kvCount)
			}
			if toks, _ := m.KV["tokenizer.ggml.tokens"].([]string); len(toks) < 3 || toks[0] != "<unk>" {
				t.Errorf("tokens start %q, want <unk> first", toks[:min(len(toks), 3)])
			}
			if s, ok := m.KV["tokenizer.ggml.scores"].([]float32); !ok || len(s) != tt.want.VocabSize {
				t.Errorf("scores: %T of length %d, want []float32 of %d", m.KV["tokenizer.ggml.scores"], len(s), tt.want.VocabSize)
			}
			if eps, ok := m.Float("llama.attention.layer_norm_rms_epsilon"); !ok || eps <= 0 || eps > 1e-4 {
				t.Errorf("rms epsilon = %v, %v", eps, ok)
			}
			if f := m.Tensors[0]; f.Name != tt.firstName || !reflect.DeepEqual(f.Dims, tt.firstDims) || f.Type != tt.firstType || f.Offset != 0 {
				t.Errorf("first tensor %+v, want %s %v %v at 0", f, tt.firstName, tt.firstDims, tt.firstType)
			}
			counts := map[TensorType]int{}
			for _, ti := range m.Tensors {
				counts[ti.Type]++
			}
			if !reflect.DeepEqual(counts, tt.typeCounts) {
				t.Errorf("tensor types %v, want %v", counts, tt.typeCounts)
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if end := dataEnd(t, m); end != st.Size() {
				t.Errorf("tensor data ends at %d, file size %d", end, st.Size())
			}
		})
	}
}

// dataEnd returns the file offset where the last tensor's data ends.
func dataEnd(t *testing.T, m *Metadata) int64 {
	t.Helper()
	var end uint64
	for _, ti := range m.Tensors {
		size, ok := ti.Size()
		if !ok {
			t.Fatalf("tensor %s: unknown size", ti.Name)
		}
		end = max(end, ti.Offset+size)
	}
	return m.DataOffset + int64(end)
}

func TestReadMetadataTruncated(t *testing.T) {
	src := testmodel.Path(t, testmodel.TinyStories656K)
	full, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadMetadata(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		n    int64
		want error
	}{
		{"empty", 0, ErrNotGGUF},
		{"partial magic", 3, ErrNotGGUF},
		{"magic only", 4, ErrMalformed},
		{"in version", 6, ErrMalformed},
		{"in tensor count", 12, ErrMalformed},
		{"in kv count", 20, ErrMalformed},
		{"after counts", 24, ErrMalformed},
		{"in first key", 40, ErrMalformed},
		{"in token list", 2000, ErrMalformed},
		{"in tensor infos", m.DataOffset - 100, ErrMalformed},
		{"at data start", m.DataOffset, ErrMalformed},
		{"last byte of data missing", int64(len(full)) - 1, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "truncated.gguf")
			if err := os.WriteFile(p, full[:tc.n], 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadMetadata(p)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ReadMetadata of %d bytes: err = %v, want %v", tc.n, err, tc.want)
			}
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

func TestReadMetadataMissingFile(t *testing.T) {
	_, err := ReadMetadata(filepath.Join(t.TempDir(), "absent.gguf"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want os.ErrNotExist", err)
	}
}

// raw builds GGUF bytes by hand.
type raw struct{ bytes.Buffer }

func (r *raw) u8(v uint8) *raw   { r.WriteByte(v); return r }
func (r *raw) u16(v uint16) *raw { r.Write(binary.LittleEndian.AppendUint16(nil, v)); return r }
func (r *raw) u32(v uint32) *raw { r.Write(binary.LittleEndian.AppendUint32(nil, v)); return r }
func (r *raw) u64(v uint64) *raw { r.Write(binary.LittleEndian.AppendUint64(nil, v)); return r }
func (r *raw) str(s string) *raw { r.u64(uint64(len(s))); r.WriteString(s); return r }

// header starts a v3 file with the given counts.
func header(tensors, kvs uint64) *raw {
	r := &raw{}
	r.WriteString("GGUF")
	return r.u32(3).u64(tensors).u64(kvs)
}

func TestReadMetadataValueTypes(t *testing.T) {
	r := header(1, 19)
	r.str("u8").u32(uint32(typeUint8)).u8(200)
	r.str("i8").u32(uint32(typeInt8)).u8(0xff)
	r.str("u16").u32(uint32(typeUint16)).u16(65000)
	r.str("i16").u32(uint32(typeInt16)).u16(0xfffe)
	r.str("u32").u32(uint32(typeUint32)).u32(4000000000)
	r.str("i32").u32(uint32(typeInt32)).u32(0xfffffffd)
	r.str("f32").u32(uint32(typeFloat32)).u32(math.Float32bits(1.5))
	r.str("bool").u32(uint32(typeBool)).u8(1)
	r.str("str").u32(uint32(typeString)).str("héllo")
	r.str("u64").u32(uint32(typeUint64)).u64(1 << 40)
	r.str("i64").u32(uint32(typeInt64)).u64(math.MaxUint64)
	r.str("f64").u32(uint32(typeFloat64)).u64(math.Float64bits(-2.25))
	r.str("a.u8").u32(uint32(typeArray)).u32(uint32(typeUint8)).u64(2).u8(1).u8(2)
	r.str("a.i16").u32(uint32(typeArray)).u32(uint32(typeInt16)).u64(2).u16(1).u16(0xffff)
	r.str("a.bool").u32(uint32(typeArray)).u32(uint32(typeBool)).u64(2).u8(0).u8(1)
	r.str("a.f64").u32(uint32(typeArray)).u32(uint32(typeFloat64)).u64(1).u64(math.Float64bits(0.5))
	r.str("a.str").u32(uint32(typeArray)).u32(uint32(typeString)).u64(3).str("a").str("").str("c")
	r.str("a.empty").u32(uint32(typeArray)).u32(uint32(typeInt32)).u64(0)
	r.str("general.alignment").u32(uint32(typeUint32)).u32(64)
	r.str("t").u32(2).u64(3).u64(2).u32(uint32(TypeF32)).u64(0)
	for r.Len()%64 != 0 {
		r.u8(0)
	}
	dataAt := r.Len()
	r.Write(make([]byte, 6*4))

	m, err := decode(bytes.NewReader(r.Bytes()), int64(r.Len()))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"u8": uint8(200), "i8": int8(-1), "u16": uint16(65000), "i16": int16(-2),
		"u32": uint32(4000000000), "i32": int32(-3), "f32": float32(1.5), "bool": true,
		"str": "héllo", "u64": uint64(1 << 40), "i64": int64(-1), "f64": -2.25,
		"a.u8": []uint8{1, 2}, "a.i16": []int16{1, -1}, "a.bool": []bool{false, true},
		"a.f64": []float64{0.5}, "a.str": []string{"a", "", "c"}, "a.empty": []int32{},
		"general.alignment": uint32(64),
	}
	if !reflect.DeepEqual(m.KV, want) {
		t.Errorf("KV:\ngot  %#v\nwant %#v", m.KV, want)
	}
	if m.Alignment != 64 || m.DataOffset != int64(dataAt) {
		t.Errorf("alignment %d, data offset %d; want 64, %d", m.Alignment, m.DataOffset, dataAt)
	}
	wantT := []TensorInfo{{Name: "t", Dims: []uint64{3, 2}, Type: TypeF32}}
	if !reflect.DeepEqual(m.Tensors, wantT) {
		t.Errorf("tensors %+v, want %+v", m.Tensors, wantT)
	}
	// Typed accessors.
	for key, want := range map[string]uint64{"u8": 200, "u16": 65000, "u32": 4000000000, "u64": 1 << 40} {
		if v, ok := m.Uint(key); !ok || v != want {
			t.Errorf("Uint(%s) = %d, %v; want %d", key, v, ok, want)
		}
	}
	for _, key := range []string{"i8", "i32", "i64", "str", "f32", "absent"} {
		if v, ok := m.Uint(key); ok {
			t.Errorf("Uint(%s) = %d, want not ok", key, v)
		}
	}
	if v, ok := m.Float("f64"); !ok || v != -2.25 {
		t.Errorf("Float(f64) = %v, %v", v, ok)
	}
	if v, ok := m.String("str"); !ok || v != "héllo" {
		t.Errorf("String(str) = %q, %v", v, ok)
	}
	if _, ok := m.String("u8"); ok {
		t.Error("String(u8) ok, want not ok")
	}
	if v, ok := m.Bool("bool"); !ok || !v {
		t.Errorf("Bool(bool) = %v, %v", v, ok)
	}
	// No architecture, no tokenizer: typed fields keep their defaults.
	if m.BOS != -1 || m.EOS != -1 || m.FileType != -1 || m.AddBOS || m.VocabSize != 0 {
		t.Errorf("defaults: BOS %d EOS %d FileType %d AddBOS %v VocabSize %d", m.BOS, m.EOS, m.FileType, m.AddBOS, m.VocabSize)
	}
}

func TestReadMetadataInvalid(t *testing.T) {
	tests := []struct {
		name string
		file *raw
		want error
	}{
		{"bad magic", func() *raw { r := &raw{}; r.WriteString("GGML"); return r.u32(3) }(), ErrNotGGUF},
		{"version 1", func() *raw { r := &raw{}; r.WriteString("GGUF"); return r.u32(1).u64(0).u64(0) }(), ErrVersion},
		{"version 4", func() *raw { r := &raw{}; r.WriteString("GGUF"); return r.u32(4).u64(0).u64(0) }(), ErrVersion},
		{"huge tensor count", header(1<<62, 0), ErrMalformed},
		{"tensor count beyond file", header(1000, 0), ErrMalformed},
		{"huge kv count", header(0, math.MaxUint64), ErrMalformed},
		{"huge key length", header(0, 1).u64(1 << 60).u32(0), ErrMalformed},
		{"huge string", header(0, 1).str("k").u32(uint32(typeString)).u64(1 << 40), ErrMalformed},
		{"string past end", header(0, 1).str("k").u32(uint32(typeString)).u64(100).str("short"), ErrMalformed},
		{"huge array", header(0, 1).str("k").u32(uint32(typeArray)).u32(uint32(typeUint64)).u64(1 << 61), ErrMalformed},
		{"huge string array", header(0, 1).str("k").u32(uint32(typeArray)).u32(uint32(typeString)).u64(1 << 30), ErrMalformed},
		{"array past end", header(0, 1).str("k").u32(uint32(typeArray)).u32(uint32(typeUint64)).u64(1000).u64(1), ErrMalformed},
		{"string array past end", header(0, 1).str("k").u32(uint32(typeArray)).u32(uint32(typeString)).u64(3).str("a"), ErrMalformed},
		{"nested array", header(0, 1).str("k").u32(uint32(typeArray)).u32(uint32(typeArray)).u64(1).u32(0).u64(0), ErrMalformed},
		{"unknown value type", header(0, 1).str("k").u32(13).u64(0), ErrMalformed},
		{"unknown element type", header(0, 1).str("k").u32(uint32(typeArray)).u32(99).u64(0), ErrMalformed},
		{"duplicate key", header(0, 2).str("k").u32(uint32(typeBool)).u8(1).str("k").u32(uint32(typeBool)).u8(0), ErrMalformed},
		{"alignment not a power of two", header(0, 1).str("general.alignment").u32(uint32(typeUint32)).u32(24), ErrMalformed},
		{"alignment of wrong type", header(0, 1).str("general.alignment").u32(uint32(typeUint64)).u64(32), ErrMalformed},
		{"too many dims", header(1, 0).str("t").u32(5).u64(1).u64(1).u64(1).u64(1).u64(1).u32(0).u64(0), ErrMalformed},
		{"dims overflow", header(1, 0).str("t").u32(2).u64(1 << 40).u64(1 << 40).u32(0).u64(0), ErrMalformed},
		{"duplicate tensor", header(2, 0).str("t").u32(1).u64(0).u32(0).u64(0).str("t").u32(1).u64(0).u32(0).u64(0), ErrMalformed},
		{"misaligned offset", header(1, 0).str("t").u32(1).u64(0).u32(0).u64(8), ErrMalformed},
		{"partial block row", header(1, 0).str("t").u32(1).u64(16).u32(uint32(TypeQ8_0)).u64(0), ErrMalformed},
		{"data past end", header(1, 0).str("t").u32(1).u64(1000).u32(uint32(TypeF32)).u64(0), ErrMalformed},
		{"offset past end", header(1, 0).str("t").u32(1).u64(1).u32(uint32(TypeF32)).u64(1 << 63), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.file.Bytes()
			m, err := decode(bytes.NewReader(b), int64(len(b)))
			if !errors.Is(err, tt.want) {
				t.Fatalf("decode = %+v, %v; want error %v", m, err, tt.want)
			}
		})
	}
}

func TestReadMetadataUnknownTensorType(t *testing.T) {
	// A tensor type this package cannot size is described, not rejected.
	r := header(1, 0).str("t").u32(1).u64(256).u32(99).u64(0)
	b := r.Bytes()
	m, err := decode(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Tensors[0].Type; got != 99 || got.String() != "type(99)" {
		t.Errorf("type %d %q", got, got)
	}
	if _, ok := m.Tensors[0].Size(); ok {
		t.Error("Size of an unknown type is ok")
	}
}

func FuzzReadMetadata(f *testing.F) {
	var valid raw
	e := &encoder{w: &valid}
	e.header([]kv{
		{"general.architecture", "llama"},
		{"llama.context_length", uint32(16)},
		{"tokenizer.ggml.tokens", []string{"<unk>", "<s>"}},
		{"tokenizer.ggml.scores", []float32{0, -1}},
		{"tokenizer.ggml.token_type", []int32{2, 3}},
		{"tokenizer.ggml.add_bos_token", true},
	}, []TensorInfo{{Name: "w", Dims: []uint64{32, 1}, Type: TypeQ8_0}}, defaultAlignment)
	valid.Write(make([]byte, 34))
	f.Add(valid.Bytes())
	f.Add(header(1, 1).Bytes())
	f.Add([]byte("GGUF"))
	model, err := os.ReadFile(testmodel.Path(f, testmodel.Stories260K))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(model[:1024])
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decode(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			if !errors.Is(err, ErrNotGGUF) && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		if m.TensorCount != len(m.Tensors) || m.Alignment <= 0 || m.Alignment&(m.Alignment-1) != 0 {
			t.Fatalf("inconsistent metadata %+v", m)
		}
		for _, ti := range m.Tensors {
			if size, ok := ti.Size(); ok && m.DataOffset+int64(ti.Offset)+int64(size) > int64(len(b)) {
				t.Fatalf("tensor %q runs past the end", ti.Name)
			}
		}
	})
}
