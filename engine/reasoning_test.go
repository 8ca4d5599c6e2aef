package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
)

// The reasoning budget on a real model: stories260K (whose byte tokens
// can write any text) is made by a grammar to open <think> and reason in
// lowercase words for ever; the budget closes its reasoning after Budget
// tokens, writing </think> for it, and the answer goes on.
func TestReasoningBudget(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 2})
	closeToks, err := e.Tokenize("</think>", false, true)
	if err != nil {
		t.Fatal(err)
	}
	think := func(budget int, open bool, grammar string) (string, []engine.TokenLogprobs, engine.Result) {
		t.Helper()
		req := greedy("Once upon a time", 60)
		req.Grammar = grammar
		req.Logprobs = true
		if budget >= 0 {
			req.Reasoning = &engine.Reasoning{Budget: budget, Open: open, Start: "<think>", End: "</think>", Close: closeToks}
		}
		return collectLogprobs(t, submit(t, e, req))
	}
	const reasonForEver = `root ::= "<think>" [a-z ]+ "</think>" [a-z ]+`
	// Without a budget the reasoning never ends within max_tokens.
	out, _, res := think(-1, false, reasonForEver)
	if !strings.HasPrefix(out, "<think>") || strings.Contains(out, "</think>") || res.FinishReason != engine.FinishLength {
		t.Fatalf("no budget: %q (%s)", out, res.FinishReason)
	}
	// What the closing tokens write (an SPM vocabulary adds a space).
	var closeText strings.Builder
	for _, tok := range closeToks {
		closeText.WriteString(e.TokenPiece(tok))
	}
	for _, budget := range []int{0, 1, 5, 20} {
		out, lps, res := think(budget, false, reasonForEver)
		if res.FinishReason != engine.FinishLength || res.Usage.CompletionTokens != 60 || len(lps) != 60 {
			t.Fatalf("budget %d: %q (%s, %d tokens)", budget, out, res.FinishReason, res.Usage.CompletionTokens)
		}
		// <think>, exactly budget tokens, the closing tokens as written
		// for the model, and an answer.
		at, text := 0, ""
		for !strings.HasSuffix(text, "<think>") {
			text += lps[at].Text
			at++
		}
		var inside strings.Builder
		for _, lp := range lps[at : at+budget] {
			inside.WriteString(lp.Text)
		}
		for i, tok := range closeToks {
			if lp := lps[at+budget+i]; lp.Token != tok {
				t.Errorf("budget %d: token %d after the reasoning is %d, want </think>'s %d", budget, i, lp.Token, tok)
			}
		}
		answer, ok := strings.CutPrefix(out, "<think>"+inside.String()+closeText.String())
		if !ok || answer == "" || strings.Count(out, "</think>") != 1 {
			t.Errorf("budget %d: %q is not <think>, %q, %q and an answer", budget, out, inside.String(), closeText.String())
		}
	}

	// The prompt opened the reasoning: it counts from the first token.
	out, _, _ = think(3, true, `root ::= [a-z ]+ "</think>" [a-z ]+`)
	if reasoning, answer, ok := strings.Cut(out, "</think>"); !ok || answer == "" || strings.Count(out, "</think>") != 1 || len(reasoning) == 0 {
		t.Fatalf("opened by the prompt: %q", out)
	}
	if out, _, _ := think(0, true, `root ::= [a-z ]* "</think>" [a-z ]+`); !strings.HasPrefix(out, closeText.String()) {
		t.Fatalf("budget 0, opened by the prompt: %q", out)
	}

	// A reasoning the model closes within its budget is left alone.
	out, _, _ = think(50, false, `root ::= "<think>" "ab" "</think>" [a-z ]+`)
	if !strings.HasPrefix(out, "<think>ab</think>") || strings.Count(out, "</think>") != 1 {
		t.Fatalf("closed by the model: %q", out)
	}

	// A grammar that does not allow the closing tokens wins: the budget
	// gives up and the answer goes on under the grammar.
	out, _, res = think(2, false, `root ::= "<think>" [a-z ]+`)
	if !strings.HasPrefix(out, "<think>") || strings.Contains(out[1:], "<") || res.FinishReason != engine.FinishLength {
		t.Fatalf("grammar refusing the close: %q (%s)", out, res.FinishReason)
	}
	waitIdle(t, e)
}

// ShowTokens output a control token's text, which is otherwise empty:
// stories260K's BOS, forced by a logit bias.
func TestShowTokens(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	bos := e.Info().BOS
	for _, show := range []bool{false, true} {
		req := greedy("Once upon a time", 3)
		req.Sampling.LogitBias = map[int32]float32{bos: 100}
		if show {
			req.ShowTokens = []int32{bos}
		}
		out, res := collect(t, submit(t, e, req))
		want := ""
		if show {
			want = strings.Repeat(e.TokenPiece(bos), 3)
		}
		if out != want || res.Usage.CompletionTokens != 3 || show && want == "" {
			t.Errorf("show %v: %q, want %q", show, out, want)
		}
	}
}

func TestBadReasoning(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	ok := engine.Reasoning{Budget: 1, Start: "<think>", End: "</think>", Close: []int32{5}}
	for name, mod := range map[string]func(r *engine.Request){
		"budget, no close":   func(r *engine.Request) { r.Reasoning.Close = nil },
		"no end":             func(r *engine.Request) { r.Reasoning.End = "" },
		"no start":           func(r *engine.Request) { r.Reasoning.Start = "" },
		"long marker":        func(r *engine.Request) { r.Reasoning.Start = strings.Repeat("x", engine.MaxMarker+1) },
		"close out of range": func(r *engine.Request) { r.Reasoning.Close = []int32{1 << 20} },
		"show out of range":  func(r *engine.Request) { r.ShowTokens = []int32{-1} },
		"too many to show":   func(r *engine.Request) { r.ShowTokens = make([]int32, engine.MaxMarker+1) },
	} {
		req := greedy("Hi", 2)
		r := ok
		req.Reasoning = &r
		mod(&req)
		if _, err := e.Submit(context.Background(), req); !errors.Is(err, engine.ErrBadReasoning) {
			t.Errorf("%s: %v, want ErrBadReasoning", name, err)
		}
	}
	// Without a budget (only counted), no closing tokens are needed.
	req := greedy("Hi", 2)
	req.Reasoning = &engine.Reasoning{Budget: -1, Start: "<think>", End: "</think>"}
	if _, res := collect(t, submit(t, e, req)); res.FinishReason != engine.FinishLength {
		t.Errorf("a reasoning counted without a budget: %s %v", res.FinishReason, res.Err)
	}
	waitIdle(t, e)
}

// TestReasoningTokens: the engine counts the reasoning's tokens exactly
// (Usage.ReasoningTokens): those from the one whose text completes
// <think> (the first, when the prompt opened it) through the one that
// completes </think>, the markers' tokens included; with a budget and
// without one (Budget -1 only counts), closed by the model or never;
// none without Reasoning. stories260K writes what the grammars make it.
func TestReasoningTokens(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 2})
	closeToks, err := e.Tokenize("</think>", false, true)
	if err != nil {
		t.Fatal(err)
	}
	// want is the count from the tokens' texts: the span from the token
	// that completes <think> to the one that completes </think>.
	want := func(lps []engine.TokenLogprobs, opened bool) int {
		first, last := -1, len(lps)-1
		if opened {
			first = 0
		}
		var text strings.Builder
		for i, lp := range lps {
			text.WriteString(lp.Text)
			if first < 0 && strings.Contains(text.String(), "<think>") {
				first = i
			}
			if strings.Contains(text.String(), "</think>") {
				last = i
				break
			}
		}
		if first < 0 {
			return 0
		}
		return last - first + 1
	}
	for _, tc := range []struct {
		name    string
		r       *engine.Reasoning
		grammar string
	}{
		{"counted, closed by the model", &engine.Reasoning{Budget: -1}, `root ::= [a-z ]{2,4} "<think>" [a-z ]{3,12} "</think>" [a-z ]+`},
		{"counted, never closed", &engine.Reasoning{Budget: -1}, `root ::= [a-z ]{2,4} "<think>" [a-z ]+`},
		{"counted, opened by the prompt", &engine.Reasoning{Budget: -1, Open: true}, `root ::= [a-z ]{3,12} "</think>" [a-z ]+`},
		{"a budget closes it", &engine.Reasoning{Budget: 5, Close: closeToks}, `root ::= [a-z ]{2,4} "<think>" [a-z ]+ "</think>" [a-z ]+`},
		{"a budget, opened by the prompt", &engine.Reasoning{Budget: 4, Open: true, Close: closeToks}, `root ::= [a-z ]+ "</think>" [a-z ]+`},
	} {
		req := greedy("Once upon a time", 40)
		req.Grammar, req.Logprobs = tc.grammar, true
		tc.r.Start, tc.r.End = "<think>", "</think>"
		req.Reasoning = tc.r
		out, lps, res := collectLogprobs(t, submit(t, e, req))
		n := want(lps, tc.r.Open)
		if n == 0 || n == res.Usage.CompletionTokens && !strings.Contains(tc.name, "never") && !tc.r.Open {
			t.Fatalf("%s: %q: the test's reasoning is not a part of the answer", tc.name, out)
		}
		if res.Usage.ReasoningTokens != n {
			t.Errorf("%s: %q: %d reasoning tokens of %d, want %d", tc.name, out, res.Usage.ReasoningTokens, res.Usage.CompletionTokens, n)
		}
		// Without a reasoning, nothing is counted.
		req.Reasoning = nil
		if _, res := collect(t, submit(t, e, req)); res.Usage.ReasoningTokens != 0 {
			t.Errorf("%s, without Reasoning: %d reasoning tokens", tc.name, res.Usage.ReasoningTokens)
		}
	}
	// Without logprobs the grammar's markers are written by jump-forward
	// decoding (its tokens counted as any other's); counting, unlike a
	// budget, does not keep a request from it: the answer is the same
	// as without Reasoning, in as many forward passes.
	req := greedy("Once upon a time", 40)
	req.Grammar = `root ::= "ab <think>" [a-z ]{3,12} "</think>" [a-z ]+`
	plain, plainRes := collect(t, submit(t, e, req))
	req.Reasoning = &engine.Reasoning{Budget: -1, Start: "<think>", End: "</think>"}
	out, res := collect(t, submit(t, e, req))
	if res.Usage.ReasoningTokens < 2 || res.Usage.ReasoningTokens >= res.Usage.CompletionTokens {
		t.Errorf("jump-forward: %q: %d reasoning tokens of %d", out, res.Usage.ReasoningTokens, res.Usage.CompletionTokens)
	}
	if out != plain || res.Usage.CompletionTokens != plainRes.Usage.CompletionTokens || res.Usage.EvaluatedTokens != plainRes.Usage.EvaluatedTokens {
		t.Errorf("jump-forward: counted %q (%+v), not %q (%+v)", out, res.Usage, plain, plainRes.Usage)
	}
	waitIdle(t, e)
}
