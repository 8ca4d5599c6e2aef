// Package testsynth writes synthetic models for tests that need a
// vocabulary the shared test models do not have. (It is apart from
// testmodel, which package gguf's own tests import.)
package testsynth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

// PinGoldenCPU makes this process, and the servers it starts, load ggml's
// CPU variant the architecture goldens were made with
// (testmodel.ArchGoldensVariant) when the machine runs it and
// llama.CPUVariantEnv names none already; elsewhere (arm64) nothing
// changes. A package whose tests compare tokens with testmodel.ArchGoldens
// calls it in TestMain, before llama.cpp loads.
func PinGoldenCPU() {
	if os.Getenv(llama.CPUVariantEnv) == "" && llama.CPUVariantRuns(testmodel.ArchGoldensVariant) {
		os.Setenv(llama.CPUVariantEnv, testmodel.ArchGoldensVariant)
	}
}

// ChatML writes a tiny synthetic model whose vocabulary ends with the
// control tokens <|im_start|> and <|im_end|> (ids vocabSize-2 and
// vocabSize-1) into a temporary folder of t, and returns its path.
func ChatML(t testing.TB) (path string, vocabSize int) {
	t.Helper()
	shape, err := gguf.ParseShape("tiny,chatml=true")
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "chatml.gguf")
	if err := gguf.WriteSynthetic(path, shape, 1); err != nil {
		t.Fatal(err)
	}
	return path, shape.Vocab
}

// templateShape is the shape of the models Template writes: tiny, with a
// context long enough for the prompts of real chat templates, tool
// definitions and all, spelled in the synthetic vocabulary's short pieces.
var templateShape = gguf.Shape{Embd: 32, Layers: 1, Heads: 2, HeadsKV: 1, FF: 64, Vocab: 512, Ctx: 16384, Type: "q8_0"}

// Template writes a tiny synthetic model with the chat template src, whose
// vocabulary (the synthetic one, which spells any text through its byte
// tokens) ends with the control tokens special, into a temporary folder
// of t, and returns its path.
func Template(t testing.TB, src string, special []string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "template.gguf")
	if err := gguf.WriteSyntheticOptions(path, templateShape, 1, gguf.SynthOptions{ChatTemplate: src, Special: special}); err != nil {
		t.Fatal(err)
	}
	return path
}

// GoldenVocab is the vocabulary-only GGUF of VocabDir whose tokenizer the
// synthetic golden model takes: GPT-2's byte-level BPE, whose pieces are
// text, unlike the synthetic vocabulary's byte tokens (llama-server
// b10573 fails a completion whose bytes are not UTF-8).
const GoldenVocab = "ggml-vocab-gpt-2.gguf"

// Golden writes the model testmodel.SynthGoldens come from: shape (a
// name of gguf.Shapes, "tiny") with seed 1 and GoldenVocab's tokenizer,
// as corral synth --shape SHAPE --seed 1 --vocab writes it, into a
// temporary folder of t, and returns its path.
func Golden(t testing.TB, shape string) string {
	t.Helper()
	s, ok := gguf.Shapes[shape]
	if !ok {
		t.Fatalf("testsynth: no shape %q", shape)
	}
	md, err := gguf.ReadMetadata(filepath.Join(VocabDir(), GoldenVocab))
	if err != nil {
		t.Fatalf("testsynth: the golden model's vocabulary: %v", err)
	}
	p := filepath.Join(t.TempDir(), "golden-"+shape+".gguf")
	if err := gguf.WriteSyntheticOptions(p, s, 1, gguf.SynthOptions{Tokenizer: md}); err != nil {
		t.Fatalf("testsynth: write %s: %v", shape, err)
	}
	return p
}

// ArchTemplate writes a synthetic model of architecture arch, as Arch
// does, with the chat template src and its markup special as control
// tokens (see Template), into dir, and returns its path.
func ArchTemplate(t testing.TB, dir, arch, src string, special []string) string {
	t.Helper()
	p := filepath.Join(dir, arch+"-template.gguf")
	if err := gguf.WriteSyntheticArch(p, arch, gguf.ArchShape(arch), 1, gguf.SynthOptions{ChatTemplate: src, Special: special}, llama.Layout); err != nil {
		t.Fatalf("testsynth: %v", err)
	}
	return p
}

// Arch writes a synthetic model of architecture arch, of its default shape
// (gguf.ArchShape) with seed 1 and the synthetic vocabulary, as corral
// synth --arch ARCH --seed 1 writes it, into dir, and returns its path.
// The model is written once per dir and architecture.
func Arch(t testing.TB, dir, arch string) string {
	t.Helper()
	p := filepath.Join(dir, arch+".gguf")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if err := gguf.WriteSyntheticArch(p, arch, gguf.ArchShape(arch), 1, gguf.SynthOptions{}, llama.Layout); err != nil {
		t.Fatalf("testsynth: %v", err)
	}
	return p
}

// ArchMTP is Arch for a model with a multi-token prediction head after
// its layers (gguf.Shape.MTP), as corral synth --arch ARCH --shape mtp=1
// writes it.
func ArchMTP(t testing.TB, dir, arch string) string {
	t.Helper()
	p := filepath.Join(dir, arch+"-mtp.gguf")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	shape := gguf.ArchShape(arch)
	shape.MTP = 1
	if err := gguf.WriteSyntheticArch(p, arch, shape, 1, gguf.SynthOptions{}, llama.Layout); err != nil {
		t.Fatalf("testsynth: %v", err)
	}
	return p
}

// Projector writes the synthetic text model of a projector kind and the
// projector sized to it, seed 1, into dir, as corral synth --mmproj KIND
// writes them (gguf.ProjectorText), and returns their paths. kind may
// name the text model's architecture too, as KIND@ARCH (corral synth
// --mmproj KIND --arch ARCH): qwen2vl_merger@qwen35.
func Projector(t testing.TB, dir, kind string) (model, projector string) {
	t.Helper()
	kind, textArch, _ := strings.Cut(kind, "@")
	arch, shape, opts, ok := gguf.ProjectorText(kind, textArch)
	if !ok {
		t.Fatalf("testsynth: no projector kind %q for a text model %q", kind, textArch)
	}
	name := kind
	if textArch != "" {
		name += "@" + textArch
	}
	model = filepath.Join(dir, name+".gguf")
	projector = filepath.Join(dir, name+".mmproj.gguf")
	if err := gguf.WriteSyntheticArch(model, arch, shape, 1, opts, llama.Layout); err != nil {
		t.Fatalf("testsynth: %v", err)
	}
	if err := gguf.WriteSyntheticProjector(projector, kind, shape.Embd, 1); err != nil {
		t.Fatalf("testsynth: %v", err)
	}
	return model, projector
}
