package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/llama"
)

// TestSynthVocab writes a tiny model with Phi-3's vocabulary and a chat
// template file: every tokenizer.* key of the vocabulary comes over but the
// template, the vocabulary size is the vocabulary's, and llama.cpp loads
// the model with that vocabulary.
func TestSynthVocab(t *testing.T) {
	vocabPath := filepath.Join(testsynth.VocabDir(), "ggml-vocab-phi-3.gguf")
	vocab, err := gguf.ReadMetadata(vocabPath)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tmplPath := filepath.Join(dir, "tmpl.jinja")
	const tmpl = "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}<|end|>\n{% endfor %}<|assistant|>\n"
	if err := os.WriteFile(tmplPath, []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "phi3.gguf")
	if err := runSynth(context.Background(), []string{"--shape", "tiny", "--vocab", vocabPath, "--chat-template", tmplPath, "-o", out}); err != nil {
		t.Fatal(err)
	}
	m, err := gguf.ReadMetadata(out)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range vocab.KV {
		if !strings.HasPrefix(k, "tokenizer.") || k == "tokenizer.chat_template" {
			continue
		}
		if !reflect.DeepEqual(m.KV[k], v) {
			t.Errorf("%s differs from the vocabulary's", k)
		}
	}
	if m.ChatTemplate != tmpl {
		t.Errorf("chat template %q, want the file's %q", m.ChatTemplate, tmpl)
	}
	if m.Architecture != "llama" || m.VocabSize != 32064 || m.EmbeddingLength != 64 {
		t.Errorf("architecture %q, %d tokens, embedding %d; want llama, 32064, 64", m.Architecture, m.VocabSize, m.EmbeddingLength)
	}
	model, err := llama.LoadModel(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	if model.NVocab() != 32064 {
		t.Errorf("llama.cpp loads %d tokens, want 32064", model.NVocab())
	}
	// Phi-3's own ids, which the synthetic vocabulary does not have.
	toks, err := model.Tokenize("Hello world<|end|>", false, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []llama.Token{15043, 3186, 32007}; !reflect.DeepEqual(toks, want) {
		t.Errorf("tokens %v, want %v", toks, want)
	}
}

func TestSynthVocabErrors(t *testing.T) {
	dir := t.TempDir()
	phi3 := filepath.Join(testsynth.VocabDir(), "ggml-vocab-phi-3.gguf")
	empty := filepath.Join(dir, "empty.jinja")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	notGGUF := filepath.Join(dir, "not.gguf")
	if err := os.WriteFile(notGGUF, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.gguf")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--shape", "tiny", "--vocab", filepath.Join(dir, "missing.gguf")}, "no such file"},
		{[]string{"--shape", "tiny", "--vocab", notGGUF}, "not a GGUF file"},
		{[]string{"--shape", "tiny,chatml=true", "--vocab", phi3}, "chatml"},
		{[]string{"--shape", "tiny", "--chat-template", empty}, "is empty"},
		{[]string{"--shape", "tiny", "--chat-template", filepath.Join(dir, "missing.jinja")}, "no such file"},
	} {
		err := runSynth(context.Background(), append(tc.args, "-o", out))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("synth %q: %v, want an error containing %q", tc.args, err, tc.want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("synth %q left %s behind", tc.args, out)
		}
	}
}

// TestSynthArch writes a model of another architecture with a shape
// override and a chat template: llama.cpp loads it as that architecture,
// with the shape asked for; unknown and unsupported architectures are
// refused with the reason.
func TestSynthArch(t *testing.T) {
	dir := t.TempDir()
	tmplPath := filepath.Join(dir, "tmpl.jinja")
	if err := os.WriteFile(tmplPath, []byte("{{ messages }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "q.gguf")
	if err := runSynth(context.Background(), []string{"--arch", "qwen35moe", "--shape", "layers=4,experts=4,used=2,type=q8_0", "--chat-template", tmplPath, "-o", out}); err != nil {
		t.Fatal(err)
	}
	m, err := gguf.ReadMetadata(out)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := m.Uint("qwen35moe.expert_count"); m.Architecture != "qwen35moe" || m.BlockCount != 4 || n != 4 || m.ChatTemplate != "{{ messages }}" {
		t.Errorf("architecture %q, %d layers, %d experts, template %q", m.Architecture, m.BlockCount, n, m.ChatTemplate)
	}
	q8 := 0
	for _, ti := range m.Tensors {
		if ti.Type == gguf.TypeQ8_0 {
			q8++
		}
	}
	if q8 == 0 {
		t.Error("type=q8_0 quantized no tensor")
	}
	model, err := llama.LoadModel(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	if !model.Recurrent() {
		t.Error("qwen35moe loads without its recurrent layers")
	}
	for _, tc := range []struct{ arch, want string }{
		{"nope", "unknown architecture"},
		{"bert", "an encoder for embeddings"},
	} {
		err := runSynth(context.Background(), []string{"--arch", tc.arch, "-o", filepath.Join(dir, "x.gguf")})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--arch %s: %v, want an error saying %q", tc.arch, err, tc.want)
		}
	}
}

// TestSynthMMProj writes each kind of projector with its text model: the
// model is the projector's architecture, with its media tokens as control
// tokens, its chat template and room for the media; the projector lies
// beside it as NAME.mmproj.gguf, as wide as the model. Conflicting flags
// are refused before anything is written.
func TestSynthMMProj(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		kind, arch string
		tokens     []string
		template   string
		projKey    string
	}{
		{"gemma3", "gemma3", []string{"<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>"}, "google-gemma-2-2b-it", "mm.input_projection.weight"},
		{"qwen2a", "qwen2", []string{"<|im_start|>", "<|im_end|>", "<|audio_bos|>", "<|audio_eos|>"}, "Qwen-Qwen2.5-7B-Instruct", "mm.a.fc.weight"},
		{"qwen2vl_merger", "qwen2vl", []string{"<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>"}, "Qwen-Qwen2.5-7B-Instruct", "mm.2.weight"},
		{"qwen2vl_merger", "qwen35", []string{"<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>"}, "Qwen-Qwen2.5-7B-Instruct", "mm.2.weight"},
	} {
		template, err := os.ReadFile(filepath.Join(testmodel.TemplatesDir(), tc.template+".jinja"))
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, tc.arch+".gguf")
		args := []string{"--mmproj", tc.kind, "--shape", "embd=128", "-o", out}
		if tc.arch == "qwen35" { // not the kind's own
			args = append(args, "--arch", tc.arch)
		}
		if err := runSynth(context.Background(), args); err != nil {
			t.Fatal(err)
		}
		m, err := gguf.ReadMetadata(out)
		if err != nil {
			t.Fatal(err)
		}
		if m.Architecture != tc.arch || m.EmbeddingLength != 128 || m.ContextLength < 2048 || m.ChatTemplate != string(template) {
			t.Errorf("%s: architecture %q, embedding %d, context %d, template %.20q...; want %s, 128, 2048+, its own",
				tc.kind, m.Architecture, m.EmbeddingLength, m.ContextLength, m.ChatTemplate, tc.arch)
		}
		toks, _ := m.KV["tokenizer.ggml.tokens"].([]string)
		types, _ := m.KV["tokenizer.ggml.token_type"].([]int32)
		for _, want := range tc.tokens {
			i := slices.Index(toks, want)
			if i < 0 || i >= len(types) || types[i] != 3 { // LLAMA_TOKEN_TYPE_CONTROL
				t.Errorf("%s: token %s at %d is not a control token", tc.kind, want, i)
			}
		}
		p, err := gguf.ReadMetadata(projectorPath(out))
		if err != nil {
			t.Fatal(err)
		}
		kind, _ := p.String("clip.projector_type")
		i := slices.IndexFunc(p.Tensors, func(ti gguf.TensorInfo) bool { return ti.Name == tc.projKey })
		if p.Architecture != "clip" || kind != tc.kind || i < 0 || !slices.Contains(p.Tensors[i].Dims, 128) {
			t.Errorf("%s: projector architecture %q, type %q, %s %v", tc.kind, p.Architecture, kind, tc.projKey, p.Tensors)
		}
	}
	out := filepath.Join(dir, "x.gguf")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mmproj", "llava"}, `unknown --mmproj kind "llava"`},
		{[]string{"--mmproj", "gemma3", "--arch", "llama"}, "goes with a gemma3 model"},
		{[]string{"--mmproj", "qwen2vl_merger", "--arch", "llama"}, "goes with a qwen2vl or qwen35 model"},
		{[]string{"--mmproj", "qwen2a", "--vocab", filepath.Join(testsynth.VocabDir(), "ggml-vocab-phi-3.gguf")}, "cannot go with --vocab"},
	} {
		err := runSynth(context.Background(), append(tc.args, "-o", out))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("synth %q: %v, want an error containing %q", tc.args, err, tc.want)
		}
		for _, p := range []string{out, projectorPath(out)} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("synth %q left %s behind", tc.args, p)
			}
		}
	}
	if got := projectorPath("/m/x.gguf"); got != "/m/x.mmproj.gguf" {
		t.Errorf("projectorPath: %s", got)
	}
}
