package openai

import (
	"strings"
	"testing"

	"github.com/corral-llm/corral/reasoning"
	"github.com/corral-llm/corral/toolcall"
	"github.com/corral-llm/corral/wire"
)

// The composition every dialect uses: the reasoning splitter, then the
// tool-call parser on the content. An answer that reasons and then calls
// reads the same whole and streamed in small pieces, its markup in no
// field.
func TestAnswerReasoningThenCall(t *testing.T) {
	for _, tc := range []struct {
		name      string
		plan      answerPlan
		text      string
		reasoning string
		content   string
		call      string // name(arguments)
	}{
		{"Qwen3: think, then a Hermes call",
			answerPlan{think: reasoning.Think, tools: toolcall.Hermes},
			"<think>\nThe user wants the weather.\n</think>\n\nLet me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
			"The user wants the weather.", "Let me look.", `get_weather({"city": "Paris"})`},
		{"Qwen3.5: the prompt opened the reasoning, then an XML call",
			answerPlan{think: reasoning.Think, opened: true, tools: toolcall.Qwen3Coder},
			"Weather, so call.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
			"Weather, so call.", "", `get_weather({"city": "Paris"})`},
		{"gpt-oss: analysis, then a harmony call",
			answerPlan{think: reasoning.Harmony, tools: toolcall.Harmony},
			"<|channel|>analysis<|message|>Need the weather tool.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
			"Need the weather tool.", "", `get_weather({"city":"Paris"})`},
		{"Magistral: [THINK], then a v11 call",
			answerPlan{think: reasoning.Magistral, tools: toolcall.MistralV11},
			"[THINK]Call it.[/THINK]On it.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
			"Call it.", "On it.", `get_weather({"city": "Paris"})`},
		{"reasoning without tools",
			answerPlan{think: reasoning.Think},
			"<think>Hmm.</think>\nA story.", "Hmm.", "A story.", ""},
		{"tools without reasoning",
			answerPlan{tools: toolcall.Hermes},
			"<think>kept</think><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", "", "<think>kept</think>", `f({})`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(how, r, c string, calls []wire.ToolCall) {
				t.Helper()
				var got string
				for _, call := range calls {
					got += call.Function.Name + "(" + call.Function.Arguments + ")"
				}
				if r != tc.reasoning || c != tc.content || got != tc.call {
					t.Errorf("%s: reasoning %q content %q calls %s; want %q %q %s", how, r, c, got, tc.reasoning, tc.content, tc.call)
				}
				for _, m := range []string{"<think>", "</think>", "<|channel|>", "<tool_call>", "[TOOL_CALLS]", "[THINK]"} {
					if strings.Contains(r, m) || strings.Contains(c, m) && !strings.Contains(tc.content, m) {
						t.Errorf("%s: markup %q in reasoning %q or content %q", how, m, r, c)
					}
				}
			}
			r, c, calls := tc.plan.parse(tc.text, false)
			check("whole", r, c, calls)
			for _, n := range []int{1, 2, 3, 7} {
				a := tc.plan.reader()
				var ds []wire.Delta
				for i := 0; i < len(tc.text); i += n {
					ds = append(ds, a.push(tc.text[i:min(i+n, len(tc.text))])...)
				}
				ds = append(ds, a.finish(false)...)
				d := merge(ds)
				var r string
				if d.ReasoningContent != nil {
					r = *d.ReasoningContent
				}
				check("streamed by "+string(rune('0'+n)), r, d.Text(), a.Calls())
			}
		})
	}
}

// Reasoning streams as it comes, before the content, each in its own
// field of the deltas.
func TestAnswerStreamsReasoningFirst(t *testing.T) {
	a := answerPlan{think: reasoning.Think, tools: toolcall.Hermes}.reader()
	steps := []struct {
		in        string
		reasoning string
		content   string
	}{
		{"<think>Fir", "Fir", ""},
		{"st.</think>\n\nHel", "st.", "Hel"},
		{"lo <tool", "", "lo"},
	}
	for _, st := range steps {
		d := merge(a.push(st.in))
		var r string
		if d.ReasoningContent != nil {
			r = *d.ReasoningContent
		}
		if r != st.reasoning || d.Text() != st.content {
			t.Fatalf("push(%q): reasoning %q content %q, want %q %q", st.in, r, d.Text(), st.reasoning, st.content)
		}
	}
}

func TestReasoningParams(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		p     reasoningParams
		want  *int
		param string
	}{
		{reasoningParams{}, nil, ""},
		{reasoningParams{ThinkingBudget: n(64)}, n(64), ""},
		{reasoningParams{MaxReasoningTokens: n(0)}, n(0), ""},
		{reasoningParams{ThinkingBudget: n(-1)}, n(-1), ""},
		{reasoningParams{ThinkingBudget: n(8), MaxReasoningTokens: n(8)}, n(8), ""},
		{reasoningParams{ThinkingBudget: n(8), MaxReasoningTokens: n(9)}, nil, "max_reasoning_tokens"},
		{reasoningParams{MaxReasoningTokens: n(-2)}, nil, "max_reasoning_tokens"},
		{reasoningParams{ThinkingBudget: n(-5)}, nil, "thinking_budget"},
	} {
		got, e := tc.p.budget()
		switch {
		case tc.param != "" && (e == nil || e.Param != tc.param || e.Status != 400):
			t.Errorf("%+v: error %v, want one naming %s", tc.p, e, tc.param)
		case tc.param == "" && (e != nil || (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want):
			t.Errorf("%+v: %v, %v", tc.p, got, e)
		}
	}
}
