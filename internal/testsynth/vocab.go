package testsynth

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
)

// VocabTested names the vocabularies of VocabDir that come with expected
// tokenizations (NAME.gguf.inp and NAME.gguf.out).
var VocabTested = []string{
	"phi-3", "llama-spm", "deepseek-llm", "deepseek-coder", "gpt-2",
	"falcon", "mpt", "starcoder", "refact", "bert-bge",
}

// VocabDir returns the folder of llama.cpp's vocabulary-only GGUFs,
// ggml-vocab-NAME.gguf (see SOURCES.md there): $CORRAL_TEST_VOCAB, or
// vocab next to the test models.
func VocabDir() string {
	if d := os.Getenv("CORRAL_TEST_VOCAB"); d != "" {
		return d
	}
	return filepath.Join(testmodel.Dir(), "..", "vocab")
}

// VocabCase is one of llama.cpp's tokenizer tests: a text and the token ids
// it gives without BOS/EOS and without parsing special tokens.
type VocabCase struct {
	Text   string
	Tokens []int32
}

// vocabShape is the shape of the models Vocab writes: smaller than tiny,
// since the embedding and output matrices of a real vocabulary (up to 100k
// tokens) take most of the time to write.
var vocabShape = gguf.Shape{Embd: 32, Layers: 1, Heads: 2, HeadsKV: 1, FF: 64, Ctx: 256, Type: "q8_0"}

// Vocab writes a tiny synthetic model with the tokenizer of
// ggml-vocab-NAME.gguf into a temporary folder of t, and returns its path,
// the vocabulary's metadata and its test cases (none when it comes without
// them). A missing file fails t: CI must have the vocabularies.
func Vocab(t testing.TB, name string) (path string, vocab *gguf.Metadata, cases []VocabCase) {
	t.Helper()
	base := filepath.Join(VocabDir(), "ggml-vocab-"+name+".gguf")
	vocab, err := gguf.ReadMetadata(base)
	if err != nil {
		t.Fatalf("vocabulary %s (set CORRAL_TEST_VOCAB or provide ../shared/vocab): %v", name, err)
	}
	if _, err := os.Stat(base + ".inp"); err == nil {
		cases = readVocabCases(t, base)
	}
	path = filepath.Join(t.TempDir(), name+".gguf")
	if err := gguf.WriteSyntheticOptions(path, vocabShape, 1, gguf.SynthOptions{Tokenizer: vocab}); err != nil {
		t.Fatal(err)
	}
	return path, vocab, cases
}

// vocabSeparator ends each test string of a .inp file.
const vocabSeparator = "\n__ggml_vocab_test__\n"

// readVocabCases reads base.inp, the test strings each followed by
// vocabSeparator, and base.out, a line of expected token ids for each.
func readVocabCases(t testing.TB, base string) []VocabCase {
	t.Helper()
	inp, err := os.ReadFile(base + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(base + ".out")
	if err != nil {
		t.Fatal(err)
	}
	var cases []VocabCase
	for rest := string(inp); rest != ""; {
		text, after, ok := strings.Cut(rest, vocabSeparator)
		if !ok {
			t.Fatalf("%s.inp: text after the last separator: %q", base, rest)
		}
		cases = append(cases, VocabCase{Text: text})
		rest = after
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("%s: %d test strings but %d lines of expected tokens", base, len(cases), len(lines))
	}
	for i, line := range lines {
		cases[i].Tokens = []int32{}
		for _, f := range strings.Fields(line) {
			id, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				t.Fatalf("%s.out line %d: %v", base, i+1, err)
			}
			cases[i].Tokens = append(cases[i].Tokens, int32(id))
		}
	}
	return cases
}
