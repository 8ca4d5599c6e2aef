package llama_test

import (
	"context"
	"strings"
	"testing"

	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/llama"
)

// TestMTPContext: a model with a multi-token prediction head, loaded
// with it, runs the head in a context of its own: the model's context
// gives the hidden row of each token with logits, and the head's context
// takes a batch only with a row for each token.
func TestMTPContext(t *testing.T) {
	path := testsynth.ArchMTP(t, archDir, "qwen35")
	m, err := llama.LoadModelOffload(context.Background(), path, llama.Offload{MTP: true}, llama.ContextParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.MTPHeads() != 1 {
		t.Errorf("MTPHeads() = %d, want 1", m.MTPHeads())
	}
	cp := llama.ContextParams{NCtx: 256, NBatch: 64}
	tctx, err := llama.NewContext(m, cp)
	if err != nil {
		t.Fatal(err)
	}
	defer tctx.Close()
	cp.MTP, cp.Other = true, tctx
	hctx, err := llama.NewContext(m, cp)
	if err != nil {
		t.Fatal(err)
	}
	defer hctx.Close()
	tctx.SetHidden(true)
	hctx.SetHidden(true)

	var b llama.Batch
	for i, tok := range []llama.Token{1, 70, 80, 90} {
		b.Add(tok, i, 0, i >= 2)
	}
	if err := tctx.Decode(&b); err != nil {
		t.Fatal(err)
	}
	row := tctx.HiddenTo(nil, 3)
	if len(row) != m.NEmbd() {
		t.Fatalf("row of %d values, want %d", len(row), m.NEmbd())
	}

	var hb llama.Batch
	hb.AddHidden(100, 4, 0, true, row)
	hb.Add(101, 5, 0, true) // no row
	if err := hctx.Decode(&hb); err == nil || !strings.Contains(err.Error(), "hidden") {
		t.Errorf("a batch with a row missing: %v", err)
	}
	hb.Reset()
	hb.AddHidden(100, 4, 0, true, row)
	if err := hctx.Decode(&hb); err != nil {
		t.Fatal(err)
	}
	if hctx.Logits(0) == nil || len(hctx.HiddenTo(nil, 0)) != m.NEmbd() {
		t.Errorf("the head gave no logits or no row")
	}
}
