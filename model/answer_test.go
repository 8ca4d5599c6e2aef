package model

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
		plan      Plan
		text      string
		reasoning string
		content   string
		call      string // name(arguments)
	}{
		{"Qwen3: think, then a Hermes call",
			Plan{Think: reasoning.Think, Tools: toolcall.Hermes},
			"<think>\nThe user wants the weather.\n</think>\n\nLet me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
			"The user wants the weather.", "Let me look.", `get_weather({"city": "Paris"})`},
		{"Qwen3.5: the prompt opened the reasoning, then an XML call",
			Plan{Think: reasoning.Think, Opened: true, Tools: toolcall.Qwen3Coder},
			"Weather, so call.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
			"Weather, so call.", "", `get_weather({"city": "Paris"})`},
		{"gpt-oss: analysis, then a harmony call",
			Plan{Think: reasoning.Harmony, Tools: toolcall.Harmony},
			"<|channel|>analysis<|message|>Need the weather tool.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
			"Need the weather tool.", "", `get_weather({"city":"Paris"})`},
		{"Magistral: [THINK], then a v11 call",
			Plan{Think: reasoning.Magistral, Tools: toolcall.MistralV11},
			"[THINK]Call it.[/THINK]On it.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
			"Call it.", "On it.", `get_weather({"city": "Paris"})`},
		{"reasoning without tools",
			Plan{Think: reasoning.Think},
			"<think>Hmm.</think>\nA story.", "Hmm.", "A story.", ""},
		{"tools without reasoning",
			Plan{Tools: toolcall.Hermes},
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
			r, c, calls := tc.plan.Parse(tc.text, false)
			check("whole", r, c, calls)
			for _, n := range []int{1, 2, 3, 7} {
				a := tc.plan.Reader()
				var ds []wire.Delta
				for i := 0; i < len(tc.text); i += n {
					ds = append(ds, a.Push(tc.text[i:min(i+n, len(tc.text))])...)
				}
				ds = append(ds, a.Finish(false)...)
				d := Merge(ds)
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
	a := Plan{Think: reasoning.Think, Tools: toolcall.Hermes}.Reader()
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
		d := Merge(a.Push(st.in))
		var r string
		if d.ReasoningContent != nil {
			r = *d.ReasoningContent
		}
		if r != st.reasoning || d.Text() != st.content {
			t.Fatalf("push(%q): reasoning %q content %q, want %q %q", st.in, r, d.Text(), st.reasoning, st.content)
		}
	}
}
