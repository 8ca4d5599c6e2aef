package llama_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/llama"
)

// TestCapacity prints, when CORRAL_CAPACITY is set, how many
// conversations of a given length a fixed memory budget keeps for each
// memory kind: synthetic models of one shape (149M parameters as qwen35,
// 12 layers of 1,024 with 8 heads, 2 of them KV, a 32k context) of
// llama (a KV cache of every layer), gemma3 (sliding-window layers; the
// synthetic window is ctx/8 = 4,096), qwen35 (hybrid: recurrent layers
// and one attention layer in four) and mamba (a recurrent state only),
// with the bytes of one conversation's memory as llama.cpp sizes it
// (MemoryNeeds of one sequence of that context, F16 cache).
func TestCapacity(t *testing.T) {
	if os.Getenv("CORRAL_CAPACITY") == "" {
		t.Skip("set CORRAL_CAPACITY=1 to print the capacity table")
	}
	const budget = 8 << 30
	dir := t.TempDir()
	var b strings.Builder
	fmt.Fprintf(&b, "\n| model | memory | bytes a conversation at 4,096 | at 32,768 | conversations in 8 GiB at 4,096 | at 32,768 |\n|---|---|---|---|---|---|\n")
	for _, tc := range []struct{ arch, kind string }{
		{"llama", "attention"}, {"gemma3", "sliding-window"}, {"qwen35", "hybrid"}, {"mamba", "recurrent"},
	} {
		s, err := gguf.ParseShapeFrom(gguf.ArchShape(tc.arch), "embd=1024,layers=12,heads=8,kv=2,ff=2816,vocab=512,ctx=32768,type=q8_0")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, tc.arch+".gguf")
		if err := gguf.WriteSyntheticArch(path, tc.arch, s, 1, gguf.SynthOptions{}, llama.Layout); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "| %s | %s |", tc.arch, tc.kind)
		var per []int64
		for _, n := range []int{4096, 32768} {
			m, err := llama.MemoryNeeds(path, llama.ContextParams{NCtx: n, NBatch: 512, NSeqMax: 1, Unified: true})
			if err != nil {
				t.Fatal(err)
			}
			per = append(per, m.Context)
			fmt.Fprintf(&b, " %.1f MiB |", float64(m.Context)/(1<<20))
		}
		for _, p := range per {
			fmt.Fprintf(&b, " %d |", budget/p)
		}
		b.WriteString("\n")
	}
	t.Log(b.String())
}
