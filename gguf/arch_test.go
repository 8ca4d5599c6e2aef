package gguf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeLayout is a Layout that reads the metadata file as llama.cpp would
// and answers a few tensors of a hybrid model, out of order, with the
// quantization scales llama.cpp creates for metadata-only models.
func fakeLayout(t *testing.T, sawArch *string) Layout {
	return func(path string) ([]TensorInfo, error) {
		m, err := ReadMetadata(path)
		if err != nil {
			return nil, err
		}
		if len(m.Tensors) != 0 {
			t.Errorf("the metadata file has %d tensors", len(m.Tensors))
		}
		*sawArch = m.Architecture
		embd := uint64(m.EmbeddingLength)
		return []TensorInfo{
			{Name: "blk.10.ffn_up.weight", Dims: []uint64{embd, 64}},
			{Name: "blk.2.attn_norm.weight", Dims: []uint64{embd}},
			{Name: "blk.2.attn_q.weight", Dims: []uint64{embd, embd}},
			{Name: "blk.2.attn_q.scale", Dims: []uint64{1}},
			{Name: "blk.2.attn_q.input_scale", Dims: []uint64{1}},
			{Name: "blk.2.ssm_conv1d.weight", Dims: []uint64{4, embd}},
			{Name: "blk.2.ssm_a", Dims: []uint64{2}},
			{Name: "token_embd.weight", Dims: []uint64{embd, uint64(m.VocabSize)}},
			{Name: "output_norm.weight", Dims: []uint64{embd}},
		}, nil
	}
}

func TestWriteSyntheticArch(t *testing.T) {
	dir := t.TempDir()
	s := ArchShape("qwen35")
	s.Type = "q8_0"
	var saw string
	p := filepath.Join(dir, "a.gguf")
	if err := WriteSyntheticArch(p, "qwen35", s, 7, SynthOptions{ChatTemplate: "{{ messages }}"}, fakeLayout(t, &saw)); err != nil {
		t.Fatal(err)
	}
	if saw != "qwen35" {
		t.Errorf("layout saw architecture %q", saw)
	}
	m, err := ReadMetadata(p)
	if err != nil {
		t.Fatal(err)
	}
	if m.Architecture != "qwen35" || m.EmbeddingLength != s.Embd || m.BlockCount != s.Layers || m.VocabSize != s.Vocab {
		t.Errorf("metadata %+v, want the shape %v", m, s)
	}
	if v, _ := m.Uint("qwen35.ssm.inner_size"); v != 256 {
		t.Errorf("qwen35.ssm.inner_size = %d, want 256", v)
	}
	if tmpl, _ := m.String("tokenizer.chat_template"); tmpl != "{{ messages }}" {
		t.Errorf("chat template %q", tmpl)
	}
	var names []string
	types := map[string]TensorType{}
	for _, ti := range m.Tensors {
		names = append(names, ti.Name)
		types[ti.Name] = ti.Type
	}
	// Embeddings first, then the layers in number order; no scales.
	want := []string{"output_norm.weight", "token_embd.weight", "blk.2.attn_norm.weight", "blk.2.attn_q.weight",
		"blk.2.ssm_a", "blk.2.ssm_conv1d.weight", "blk.10.ffn_up.weight"}
	if !slices.Equal(names, want) {
		t.Errorf("tensors %v, want %v", names, want)
	}
	for name, typ := range map[string]TensorType{"token_embd.weight": TypeQ8_0, "blk.2.attn_q.weight": TypeQ8_0,
		"blk.10.ffn_up.weight": TypeQ8_0, "blk.2.ssm_conv1d.weight": TypeF32, "blk.2.attn_norm.weight": TypeF32} {
		if types[name] != typ {
			t.Errorf("%s is %v, want %v", name, types[name], typ)
		}
	}
	// High byte tokens are unused: whatever the model says is text.
	tt, _ := m.KV["tokenizer.ggml.token_type"].([]int32)
	if len(tt) != s.Vocab || tt[3+0x41] != tokenByte || tt[3+0x80] != tokenUnused || tt[3+0xff] != tokenUnused {
		t.Errorf("token types of bytes 0x41, 0x80, 0xff: %v", tt[3+0x41:3+0x42])
	}
	// Nothing left beside the file; the same inputs give the same bytes.
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Errorf("%d files in the folder, want 1", len(es))
	}
	q := filepath.Join(dir, "b.gguf")
	if err := WriteSyntheticArch(q, "qwen35", s, 7, SynthOptions{ChatTemplate: "{{ messages }}"}, fakeLayout(t, &saw)); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(p)
	b, _ := os.ReadFile(q)
	if !bytes.Equal(a, b) {
		t.Error("two writes of the same model differ")
	}
}

func TestWriteSyntheticArchErrors(t *testing.T) {
	dir := t.TempDir()
	var saw string
	moe := ArchShape("gpt-oss")
	if moe.Experts == 0 {
		t.Fatal("gpt-oss's shape has no experts")
	}
	bad := moe
	bad.ExpertsUsed = bad.Experts + 1
	broken := func(string) ([]TensorInfo, error) { return nil, errors.New("key not found in model: x") }
	for _, tc := range []struct {
		name, arch string
		s          Shape
		layout     Layout
		want       string
	}{
		{"unsupported", "bert", ArchShape("bert"), fakeLayout(t, &saw), "an encoder for embeddings"},
		{"used over experts", "gpt-oss", bad, fakeLayout(t, &saw), "used=3"},
		{"layout fails", "qwen3", ArchShape("qwen3"), broken, "key not found in model: x"},
		{"no tensors", "qwen3", ArchShape("qwen3"), func(string) ([]TensorInfo, error) { return nil, nil }, "0 tensors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".gguf")
			err := WriteSyntheticArch(p, tc.arch, tc.s, 1, SynthOptions{}, tc.layout)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
			if _, err := os.Stat(p); err == nil {
				t.Error("a file was left behind")
			}
		})
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Errorf("%d files left in the folder", len(es))
	}
}

func TestArchKVsHybridAndMoE(t *testing.T) {
	kvs := archKVs("lfm2", ArchShape("lfm2"), "x")
	get := func(kvs []kv, key string) any {
		for _, p := range kvs {
			if p.key == key {
				return p.value
			}
		}
		return nil
	}
	if got := get(kvs, "lfm2.attention.head_count"); !slices.Equal(got.([]uint32), []uint32{2, 0}) {
		t.Errorf("lfm2 heads per layer %v, want [2 0] (layer 1 recurrent)", got)
	}
	if got := get(kvs, "lfm2.expert_count"); got != nil {
		t.Errorf("dense lfm2 has expert_count %v", got)
	}
	kvs = archKVs("gpt-oss", ArchShape("gpt-oss"), "x")
	if got := get(kvs, "gpt-oss.expert_count"); got != uint32(2) {
		t.Errorf("gpt-oss expert_count %v, want 2", got)
	}
	if got := get(kvs, "gpt-oss.attention.sliding_window"); got != uint32(64) {
		t.Errorf("gpt-oss sliding window %v, want ctx/8 = 64", got)
	}
}

func TestParseShapeFrom(t *testing.T) {
	s, err := ParseShapeFrom(ArchShape("gpt-oss"), "layers=3,type=q8_0,experts=4,used=2")
	if err != nil {
		t.Fatal(err)
	}
	if s.Layers != 3 || s.Embd != 256 || s.Type != "q8_0" || s.Experts != 4 || s.ExpertsUsed != 2 {
		t.Errorf("got %v", s)
	}
	back, err := ParseShape(s.String())
	if err != nil || back != s {
		t.Errorf("String %q reads back as %v, %v", s.String(), back, err)
	}
	if _, err := ParseShape("tiny,experts=2,used=1"); err != nil {
		t.Errorf("experts on a named shape: %v", err)
	}
	if err := WriteSynthetic(filepath.Join(t.TempDir(), "x.gguf"), Shape{Embd: 64, Layers: 1, Heads: 4, HeadsKV: 4, FF: 128, Vocab: 512, Ctx: 64, Type: "f32", Experts: 2, ExpertsUsed: 1}, 1); err == nil {
		t.Error("a llama with experts: no error")
	}
}

// TestWriteSyntheticArchSpecial: an architecture's synthetic vocabulary
// takes a chat template's markup as control tokens at its end, after
// ChatML's, and grows by their number.
func TestWriteSyntheticArchSpecial(t *testing.T) {
	var saw string
	p := filepath.Join(t.TempDir(), "m.gguf")
	s := ArchShape("qwen3")
	s.ChatML = true
	special := []string{"<tool_call>", "</tool_call>"}
	if err := WriteSyntheticArch(p, "qwen3", s, 1, SynthOptions{ChatTemplate: "{{ messages }}", Special: special}, fakeLayout(t, &saw)); err != nil {
		t.Fatal(err)
	}
	m, err := ReadMetadata(p)
	if err != nil {
		t.Fatal(err)
	}
	toks, _ := m.KV["tokenizer.ggml.tokens"].([]string)
	types, _ := m.KV["tokenizer.ggml.token_type"].([]int32)
	n := len(toks)
	if n != s.Vocab+len(special) || m.VocabSize != n || len(types) != n {
		t.Fatalf("%d tokens (%d types, vocab size %d), want %d", n, len(types), m.VocabSize, s.Vocab+len(special))
	}
	if toks[n-2] != special[0] || toks[n-1] != special[1] || types[n-1] != tokenControl || !slices.Contains(toks, "<|im_start|>") {
		t.Errorf("last tokens %q (type %d), want the special ones after ChatML's", toks[n-3:], types[n-1])
	}
	if m.ChatTemplate != "{{ messages }}" {
		t.Errorf("chat template %q", m.ChatTemplate)
	}
}
