package engine_test

import (
	"context"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
)

// TestDraftModelRefusesAnotherVocabulary: a draft model whose tokens are
// not the model's is refused at load, saying so; ModelInfo names the
// draft model of one that loads.
func TestDraftModelRefusesAnotherVocabulary(t *testing.T) {
	tiny := testmodel.Path(t, testmodel.TinyStories656K)
	other := testmodel.Path(t, testmodel.Stories260K)
	e, err := engine.New(context.Background(), engine.Config{ModelPath: tiny, Parallel: 1, Threads: testThreads, Speculate: engine.Speculation{Model: other}})
	if err == nil {
		e.Close()
		t.Fatal("a draft model of another vocabulary loaded")
	}
	if !strings.Contains(err.Error(), "vocabulary") {
		t.Errorf("error %q does not say why", err)
	}
	e = startEngine(t, engine.Config{ModelPath: tiny, Parallel: 1, Speculate: engine.Speculation{Ngram: true, Model: tiny}})
	if got, want := e.Info().Speculation, []string{"ngram", "draft:" + strings.TrimSuffix(testmodel.TinyStories656K, ".gguf")}; !reflect.DeepEqual(got, want) {
		t.Errorf("ModelInfo.Speculation %q, want %q", got, want)
	}
}

// TestDraftModelSettles: with a draft model, whose first measure at a
// count of decoding slots costs a catch-up, drafts are first measured
// where one slot decodes only once the engine has seen 32 such steps: a
// 24-token answer drafts nothing, and a second one of 48 tokens, past
// that, does (the draft model is the model itself: its drafts are taken).
func TestDraftModelSettles(t *testing.T) {
	path := testmodel.Path(t, testmodel.Stories260K)
	e := startEngine(t, engine.Config{ModelPath: path, Parallel: 1, Speculate: engine.Speculation{Model: path}})
	req := engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 24, IgnoreEOS: true}
	run(t, e, req)
	if st := e.Stats().Spec; st.Drafts != 0 {
		t.Fatalf("%d drafts in the first 24 steps of one slot; want none before 32", st.Drafts)
	}
	req.MaxTokens = 48
	run(t, e, req)
	if st := e.Stats().Spec; st.Drafts == 0 || st.Accepted == 0 {
		t.Errorf("%d drafts, %d tokens taken, after 72 steps of one slot; want a measuring draft, taken", st.Drafts, st.Accepted)
	}
}

// TestDraftModelMeasuresOnTheSlotLeastBehind: the step that first
// measures what a draft model's drafts cost asks it for a draft for the
// decoding slot it has least to catch up with: a 20-token prompt's, not
// a 900-token one's in a slot before it.
func TestDraftModelMeasuresOnTheSlotLeastBehind(t *testing.T) {
	path := testmodel.Path(t, testmodel.Stories260K)
	var mu sync.Mutex
	first := -1 // the first model draft's position
	e := startEngine(t, engine.Drafted(engine.Config{ModelPath: path, Parallel: 2, CtxSize: 2048, Speculate: engine.Speculation{Model: path}}, func(pos int, _ []int32, model bool, _ int) {
		mu.Lock()
		defer mu.Unlock()
		if model && first < 0 {
			first = pos
		}
	}))
	long, short := storyTokens(t, e, 900), storyTokens(t, e, 20)
	sl := submit(t, e, engine.Request{Tokens: long, MaxTokens: 64, IgnoreEOS: true})
	ss := submit(t, e, engine.Request{Tokens: short, MaxTokens: 64, IgnoreEOS: true})
	collect(t, sl)
	collect(t, ss)
	slots := slotsOf(t, e)
	mu.Lock()
	defer mu.Unlock()
	if first < 0 || first >= len(long) {
		t.Errorf("the first model draft at position %d; want one for the short prompt's slot (below %d)", first, len(long))
	}
	if slots[0].CachedTokens < len(long) {
		t.Errorf("slot 0 holds %d tokens: want the long prompt there, before the short one", slots[0].CachedTokens)
	}
}

// TestDraftModelCatchesUpOverSteps: a prompt of 900 tokens is evaluated
// by the draft model over several steps (256 tokens a step at most) while
// its request decodes, and the answer is that of plain decoding; drafts
// come once the draft model has caught up, and are taken.
//
// The tokens are compared, not their log-probabilities: over a long
// context a step that evaluates a draft computes its logits with other
// kernels than a step of one token (llama.cpp picks its matrix products
// by row count), and they differ by a few thousandths (0.007 here at
// most; n-gram drafts do the same, 0.001).
func TestDraftModelCatchesUpOverSteps(t *testing.T) {
	model := testmodel.Stories260K // trained on 2,048 tokens
	path := testmodel.Path(t, model)
	plain := newEngine(t, model, engine.Config{Parallel: 1, CtxSize: 2048})
	req := engine.Request{Tokens: storyTokens(t, plain, 900), MaxTokens: 64, IgnoreEOS: true, Logprobs: true}
	want := run(t, plain, req)

	// first is the step count the scheduler had published when it made
	// its first draft: the step before.
	var mu sync.Mutex
	first := uint64(0)
	var e *engine.Engine
	e = startEngine(t, engine.Drafted(engine.DraftAlways(engine.Config{ModelPath: path, Parallel: 1, CtxSize: 2048, Speculate: engine.Speculation{Model: path}}), func(int, []int32, bool, int) {
		mu.Lock()
		defer mu.Unlock()
		if first == 0 {
			first = e.Stats().Steps
		}
	}))
	got := run(t, e, req)
	if got.text != want.text || !reflect.DeepEqual(tokensOf(got.lps), tokensOf(want.lps)) {
		t.Errorf("with the draft model %q, without %q", got.text, want.text)
	}
	worst := 0.0
	for i := range got.lps {
		worst = max(worst, math.Abs(float64(got.lps[i].Logprob-want.lps[i].Logprob)))
	}
	t.Logf("largest logprob difference %g", worst)
	st := e.Stats()
	mu.Lock()
	defer mu.Unlock()
	// Steps 1 and 2 evaluate the prompt (512 tokens a step), steps 3 to 5
	// decode while the draft model catches up with 768 of its 901 tokens,
	// step 6 the rest, and drafts.
	if st.Spec.Drafts == 0 || st.Spec.Accepted == 0 || st.Steps >= plain.Stats().Steps || first < 5 {
		t.Errorf("first draft after step %d; %d drafts, %d of %d tokens taken, %d steps against %d", first, st.Spec.Drafts, st.Spec.Accepted, st.Spec.DraftTokens, st.Steps, plain.Stats().Steps)
	}
}

// TestDraftModelPMin: with PMin, a draft model's draft ends before a
// token it gives less than PMin, so drafts are shorter; the output is
// unchanged.
func TestDraftModelPMin(t *testing.T) {
	path := testmodel.Path(t, testmodel.TinyStories656K)
	req := engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 96, IgnoreEOS: true, Logprobs: true}
	want := tokensOf(run(t, startEngine(t, engine.Config{ModelPath: path, Parallel: 1}), req).lps)
	perDraft := map[float64]float64{}
	for _, pmin := range []float64{0, 0.9} {
		e := startEngine(t, engine.DraftAlways(engine.Config{ModelPath: path, Parallel: 1, Speculate: engine.Speculation{Model: path, PMin: pmin}}))
		got := tokensOf(run(t, e, req).lps)
		st := e.Stats().Spec
		if !reflect.DeepEqual(got, want) || st.Drafts == 0 {
			t.Fatalf("PMin %v: %d drafts; the same output: %v", pmin, st.Drafts, reflect.DeepEqual(got, want))
		}
		perDraft[pmin] = float64(st.DraftTokens) / float64(st.Drafts)
	}
	if perDraft[0.9] >= perDraft[0] {
		t.Errorf("tokens per draft %v; want fewer with PMin 0.9", perDraft)
	}
}

// TestDraftModelMemory: the memory estimate counts the draft model, its
// weights and its context, beside the model's own.
func TestDraftModelMemory(t *testing.T) {
	path := testmodel.Path(t, testmodel.TinyStories656K)
	md, err := gguf.ReadMetadata(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{ModelPath: path, Parallel: 2}
	plain, err := engine.EstimateMemory(md, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Speculate.Model = path // the same weights: at least as much again
	with, err := engine.EstimateMemory(md, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Draft != 0 || with.Draft < plain.Weights+plain.KV || with.Total() != plain.Total()+with.Draft {
		t.Errorf("without a draft model %+v; with %+v", plain, with)
	}
}

// TestDraftModelSlidingWindow: a model with a sliding window drafts for
// itself (Gemma 3's layout, synthetic, a 64-token window): over a prompt
// of about 1,000 tokens the answer is that of plain decoding and drafts
// are taken.
func TestDraftModelSlidingWindow(t *testing.T) {
	path := testsynth.Arch(t, t.TempDir(), "gemma3")
	req := engine.Request{Prompt: strings.Repeat("one two three four five six seven ", 40), AddSpecial: true, MaxTokens: 64, IgnoreEOS: true, Logprobs: true}
	plain := startEngine(t, engine.Config{ModelPath: path, Parallel: 1, CtxSize: 2048})
	want := tokensOf(run(t, plain, req).lps)
	e := startEngine(t, engine.DraftAlways(engine.Config{ModelPath: path, Parallel: 1, CtxSize: 2048, Speculate: engine.Speculation{Model: path}}))
	got := run(t, e, req)
	st := e.Stats()
	if !reflect.DeepEqual(tokensOf(got.lps), want) || st.Spec.Accepted == 0 {
		t.Errorf("%s: the same output %v; %d of %d drafted tokens taken", e.Info().MemoryKind, reflect.DeepEqual(tokensOf(got.lps), want), st.Spec.Accepted, st.Spec.DraftTokens)
	}
	t.Logf("%d prompt tokens; %d of %d drafted tokens taken", got.res.Usage.PromptTokens, st.Spec.Accepted, st.Spec.DraftTokens)
}

// TestDraftModelWorthLen: a draft model's draft goes on while the chance
// that all its tokens so far are taken beats a drafted token's cost.
func TestDraftModelWorthLen(t *testing.T) {
	for _, tc := range []struct {
		acc, rel float64
		n, want  int
	}{
		{0.75, 0.34, 8, 3}, // 0.75, 0.56, 0.42; 0.32 does not pay
		{0.95, 0.10, 8, 8}, // bounded by n
		{0.50, 0.60, 8, 1}, // at least one: whether to draft at all is worth's
		{0.90, 0.50, 8, 6}, // 0.9^6 = 0.53
		{0.90, 0.00, 3, 3},
	} {
		if got := engine.WorthLen(tc.acc, tc.rel, tc.n); got != tc.want {
			t.Errorf("WorthLen(%v, %v, %d) = %d; want %d", tc.acc, tc.rel, tc.n, got, tc.want)
		}
	}
}
