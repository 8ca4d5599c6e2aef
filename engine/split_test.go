package engine_test

import (
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
)

// TestSplitStep: a step that evaluates a prompt beside a decoding stream,
// in 64 rows or more, evaluates the prompt's rows before its last token
// in a pass of their own (llama.Context.DecodeSplit): two passes for that
// step, and the prompt's answer is the one evaluated in those two parts
// alone.
func TestSplitStep(t *testing.T) {
	model := testmodel.TinyStories656K
	e := newEngine(t, model, engine.Config{Parallel: 2, PrefillBudget: -1})
	a := submit(t, e, engine.Request{Prompt: "Once upon a time", MaxTokens: 1000, IgnoreEOS: true})
	waitDecoding(t, e, a, 2)

	prompt := tokens(t, e, strings.Repeat("Lily and her dog played in the park. ", 16))
	if len(prompt) < 80 {
		t.Fatalf("a prompt of %d tokens: too short for a split step", len(prompt))
	}
	req := engine.Request{Tokens: prompt, MaxTokens: 16, IgnoreEOS: true}
	got, _ := collect(t, submit(t, e, req))
	a.Cancel()
	collect(t, a)
	st := e.Stats()
	if st.SplitSteps == 0 {
		t.Fatalf("no step was split; stats %+v", st)
	}
	if st.ForwardPasses != st.Steps+st.SplitSteps {
		t.Errorf("%d forward passes in %d steps (%d split), want one per step, two per split step", st.ForwardPasses, st.Steps, st.SplitSteps)
	}
	if want := aloneAfter(t, model, 512, prompt[:len(prompt)-1], req); got != want {
		t.Errorf("after a split step:\n got %q\nwant %q (alone, the prompt in the same two parts)", got, want)
	}
}
