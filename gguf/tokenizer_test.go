package gguf

import (
	"bufio"
	"bytes"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestEncodeEveryType writes a pair of every value type ReadMetadata
// returns and reads them back with the same types.
func TestEncodeEveryType(t *testing.T) {
	kvs := []kv{
		{"u8", uint8(200)}, {"i8", int8(-100)}, {"u16", uint16(60000)}, {"i16", int16(-30000)},
		{"u32", uint32(4e9)}, {"i32", int32(-2e9)}, {"f32", float32(1.5)}, {"bool", true},
		{"str", "héllo"}, {"u64", uint64(1 << 60)}, {"i64", int64(-1 << 60)}, {"f64", 2.25},
		{"a.u8", []uint8{1, 2, 255}}, {"a.i8", []int8{-1, 2}}, {"a.u16", []uint16{1, 65535}},
		{"a.i16", []int16{-1, 2}}, {"a.u32", []uint32{1, 4e9}}, {"a.i32", []int32{-1, 2}},
		{"a.f32", []float32{0.5, -2}}, {"a.bool", []bool{true, false}}, {"a.str", []string{"a", "", "▁b"}},
		{"a.u64", []uint64{1 << 63}}, {"a.i64", []int64{-1 << 62}}, {"a.f64", []float64{-0.125}},
		{"a.empty", []int32{}},
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	e := &encoder{w: w}
	e.header(kvs, nil, defaultAlignment)
	if e.err != nil {
		t.Fatal(e.err)
	}
	w.Flush()
	m, err := decode(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.KV) != len(kvs) {
		t.Errorf("read %d pairs, wrote %d", len(m.KV), len(kvs))
	}
	for _, p := range kvs {
		if got := m.KV[p.key]; !reflect.DeepEqual(got, p.value) {
			t.Errorf("%s: read %#v (%T), wrote %#v (%T)", p.key, got, got, p.value, p.value)
		}
	}
	e = &encoder{w: &buf}
	e.value(struct{}{})
	if e.err == nil || !strings.Contains(e.err.Error(), "cannot encode") {
		t.Errorf("encoding a struct: %v, want an error", e.err)
	}
}

// testTokenizer is the metadata of a vocabulary file: a BPE tokenizer of
// 300 tokens with keys of several types, and keys that are not the
// tokenizer's.
func testTokenizer() *Metadata {
	toks := make([]string, 300)
	types := make([]int32, 300)
	for i := range toks {
		toks[i] = string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		types[i] = 1
	}
	m := &Metadata{KV: map[string]any{
		"general.architecture":             "gpt2",
		"general.name":                     "Test-Vocab",
		"gpt2.context_length":              uint32(1024),
		"tokenizer.ggml.model":             "gpt2",
		"tokenizer.ggml.pre":               "gpt-2",
		"tokenizer.ggml.tokens":            toks,
		"tokenizer.ggml.token_type":        types,
		"tokenizer.ggml.merges":            []string{"a x", "b x"},
		"tokenizer.ggml.bos_token_id":      uint32(7),
		"tokenizer.ggml.padding_token_id":  uint64(8),
		"tokenizer.ggml.add_bos_token":     false,
		"tokenizer.ggml.precompiled_chars": []uint8{1, 2, 3},
		"tokenizer.chat_template":          "{{ messages }}",
	}}
	m.fillTyped()
	return m
}

// TestWriteSyntheticTokenizer writes the tiny shape with a vocabulary's
// tokenizer: every tokenizer.* key comes over with its type and nothing
// else does, the vocabulary size and the tensors follow the vocabulary,
// and the name starts with the vocabulary's.
func TestWriteSyntheticTokenizer(t *testing.T) {
	vocab := testTokenizer()
	p := filepath.Join(t.TempDir(), "v.gguf")
	if err := WriteSyntheticOptions(p, Shapes["tiny"], 1, SynthOptions{Tokenizer: vocab}); err != nil {
		t.Fatal(err)
	}
	m, err := ReadMetadata(p)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range vocab.KV {
		if !strings.HasPrefix(k, "tokenizer.") {
			if k != "general.name" && m.KV[k] != nil && k != "general.architecture" {
				t.Errorf("%s copied from the vocabulary", k)
			}
			continue
		}
		if got := m.KV[k]; !reflect.DeepEqual(got, v) {
			t.Errorf("%s = %#v (%T), want %#v (%T)", k, got, got, v, v)
		}
	}
	for k := range m.KV {
		if strings.HasPrefix(k, "tokenizer.") && vocab.KV[k] == nil {
			t.Errorf("%s is not the vocabulary's", k)
		}
	}
	if m.Architecture != "llama" || m.VocabSize != 300 || m.KV["llama.vocab_size"] != uint32(300) {
		t.Errorf("architecture %q, %d tokens, llama.vocab_size %v; want llama, 300, 300", m.Architecture, m.VocabSize, m.KV["llama.vocab_size"])
	}
	if want := "Test-Vocab (corral synthetic embd=64,layers=2,heads=4,kv=2,ff=128,vocab=300,ctx=256,type=q8_0)"; m.Name != want {
		t.Errorf("name %q, want %q", m.Name, want)
	}
	for _, ti := range m.Tensors {
		if (ti.Name == "token_embd.weight" || ti.Name == "output.weight") && !reflect.DeepEqual(ti.Dims, []uint64{64, 300}) {
			t.Errorf("%s dims %v, want [64 300]", ti.Name, ti.Dims)
		}
	}

	// A chat template replaces the vocabulary's, or comes on its own.
	for _, tc := range []struct {
		name  string
		vocab *Metadata
	}{{"vocabulary", vocab}, {"synthetic", nil}} {
		p := filepath.Join(t.TempDir(), "t.gguf")
		const tmpl = "{% for m in messages %}{{ m.content }}{% endfor %}"
		const toolUse = "{{ tools | tojson }}" + tmpl
		if err := WriteSyntheticOptions(p, Shapes["tiny"], 1, SynthOptions{Tokenizer: tc.vocab, ChatTemplate: tmpl, ChatTemplateToolUse: toolUse}); err != nil {
			t.Fatal(err)
		}
		m, err := ReadMetadata(p)
		if err != nil {
			t.Fatal(err)
		}
		if m.ChatTemplate != tmpl || m.ChatTemplateToolUse != toolUse {
			t.Errorf("%s: chat templates %q and %q, want %q and %q", tc.name, m.ChatTemplate, m.ChatTemplateToolUse, tmpl, toolUse)
		}
	}
}

func TestWriteSyntheticTokenizerErrors(t *testing.T) {
	noModel := testTokenizer()
	delete(noModel.KV, "tokenizer.ggml.model")
	noTokens := testTokenizer()
	delete(noTokens.KV, "tokenizer.ggml.tokens")
	chatml := Shapes["tiny"]
	chatml.ChatML = true
	for _, tc := range []struct {
		name  string
		shape Shape
		o     SynthOptions
		want  string
	}{
		{"no tokenizer model", Shapes["tiny"], SynthOptions{Tokenizer: noModel}, "no tokenizer.ggml.model"},
		{"no tokens", Shapes["tiny"], SynthOptions{Tokenizer: noTokens}, "no tokenizer.ggml.tokens"},
		{"chatml", chatml, SynthOptions{Tokenizer: testTokenizer()}, "chatml"},
		{"huge template", Shapes["tiny"], SynthOptions{ChatTemplate: strings.Repeat("x", maxStringLen+1)}, "chat template of"},
		{"huge tool_use template", Shapes["tiny"], SynthOptions{ChatTemplateToolUse: strings.Repeat("x", maxStringLen+1)}, "chat template of"},
		{"special with a tokenizer", Shapes["tiny"], SynthOptions{Tokenizer: testTokenizer(), Special: []string{"<x>"}}, "special tokens"},
		{"special repeated", Shapes["tiny"], SynthOptions{Special: []string{"<x>", "<x>"}}, `"<x>"`},
		{"special in the vocabulary", Shapes["tiny"], SynthOptions{Special: []string{"</s>"}}, `"</s>"`},
		{"special empty", Shapes["tiny"], SynthOptions{Special: []string{""}}, `""`},
	} {
		p := filepath.Join(t.TempDir(), "bad.gguf")
		err := WriteSyntheticOptions(p, tc.shape, 1, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// Special tokens end the synthetic vocabulary, as control tokens, and the
// model's vocabulary grows by their number; no space prefix is added.
func TestWriteSyntheticSpecial(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.gguf")
	special := []string{"<tool_call>", "</tool_call>"}
	if err := WriteSyntheticOptions(p, Shapes["tiny"], 1, SynthOptions{Special: special}); err != nil {
		t.Fatal(err)
	}
	m, err := ReadMetadata(p)
	if err != nil {
		t.Fatal(err)
	}
	toks, _ := m.KV["tokenizer.ggml.tokens"].([]string)
	types, _ := m.KV["tokenizer.ggml.token_type"].([]int32)
	n := Shapes["tiny"].Vocab + len(special)
	if m.VocabSize != n || len(toks) != n || len(types) != n || m.KV["llama.vocab_size"] != uint32(n) {
		t.Fatalf("%d tokens (%d, %d types, llama.vocab_size %v), want %d", m.VocabSize, len(toks), len(types), m.KV["llama.vocab_size"], n)
	}
	if m.KV["tokenizer.ggml.add_space_prefix"] != false {
		t.Errorf("tokenizer.ggml.add_space_prefix %v, want false", m.KV["tokenizer.ggml.add_space_prefix"])
	}
	for i, tok := range special {
		if j := n - len(special) + i; toks[j] != tok || types[j] != tokenControl {
			t.Errorf("token %d: %q of type %d, want control token %q", j, toks[j], types[j], tok)
		}
	}
	for _, ti := range m.Tensors {
		if (ti.Name == "token_embd.weight" || ti.Name == "output.weight") && ti.Dims[1] != uint64(n) {
			t.Errorf("%s dims %v, want %d rows", ti.Name, ti.Dims, n)
		}
	}
}
