package toolcall

import (
	"strings"
	"testing"

	"github.com/corral-llm/corral/wire"
)

// ParseRegions finds where each call's markup and the first markup that
// is not a call begin, so that a call can be written again from there.
func TestParseRegions(t *testing.T) {
	good := `<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>`
	for _, tc := range []struct {
		name, text string
		f          Format
		starts     []string // the text before each call
		failed     string   // the text before the failed region; "-" for none
	}{
		{"hermes call", "Hi." + good, Hermes, []string{"Hi."}, "-"},
		{"hermes whitespace before a call", "Hi.\n\n" + good, Hermes, []string{"Hi."}, "-"},
		{"hermes broken markup", "Hi. <tool_call>{oops}</tool_call> bye", Hermes, nil, "Hi."},
		{"hermes call, then broken markup", good + "\n<tool_call>{oops}</tool_call>", Hermes, []string{""}, good},
		{"qwen3-coder broken markup", "Hi. <tool_call>\n<nonsense>\n</tool_call>", Qwen3Coder, nil, "Hi."},
		// Text beginning with '{' in a format without a marker is text.
		{"json text", `{"a": 1} is JSON`, JSON, nil, "-"},
		{"json call", `{"name": "f", "arguments": {}}`, JSON, []string{""}, "-"},
		// Formats that take framing out of the answer give offsets in
		// the answer as the model wrote it, framing and all.
		{"command-r7b call", `<|START_RESPONSE|>Hi.<|END_RESPONSE|><|START_ACTION|>[{"tool_name": "f", "parameters": {}}]<|END_ACTION|>`, CommandR7B,
			[]string{"<|START_RESPONSE|>Hi.<|END_RESPONSE|>"}, "-"},
		{"command-r7b broken markup", `<|START_RESPONSE|>Hi.<|END_RESPONSE|><|START_ACTION|>[{oops}]<|END_ACTION|>`, CommandR7B,
			nil, "<|START_RESPONSE|>Hi.<|END_RESPONSE|>"},
		{"gigachat3 call", "Hi.<|message_sep|>\n\nfunction call<|role_sep|>\n" + `{"name": "f", "arguments": {}}`, GigaChat3,
			[]string{"Hi.<|message_sep|>"}, "-"},
		{"gigachat3.1 broken markup", `Hi.<|message_sep|><|function_call|>{oops}`, GigaChat31, nil, "Hi.<|message_sep|>"},
		{"functionary-v3.2 call", "all\nHi.>>>f\n{\"a\": 1}", FunctionaryV32, []string{"all\nHi."}, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := ParseRegions(tc.f, nil, tc.text, 0, false)
			if !ok {
				t.Fatal("no regions")
			}
			if len(r.Starts) != len(r.Calls) || len(r.Calls) != len(tc.starts) {
				t.Fatalf("calls %+v at %v, want %d", r.Calls, r.Starts, len(tc.starts))
			}
			for i, s := range r.Starts {
				if tc.text[:s] != tc.starts[i] {
					t.Errorf("call %d after %q, want %q", i, tc.text[:s], tc.starts[i])
				}
			}
			switch {
			case tc.failed == "-" && r.Failed != -1:
				t.Errorf("failed region after %q, want none", tc.text[:r.Failed])
			case tc.failed != "-" && (r.Failed < 0 || tc.text[:r.Failed] != tc.failed):
				t.Errorf("failed region at %d, want after %q", r.Failed, tc.failed)
			}
			if tc.failed != "-" && !strings.Contains(r.Content, "tool_call>") && !strings.Contains(r.Content, "oops") {
				t.Errorf("content %q: the broken markup is not given back", r.Content)
			}
		})
	}
	// functionary-v3.2's first message to a name that is no tool is text,
	// unless a JSON object follows the name: a call of a function the
	// request did not offer, which failed.
	tools := []wire.Tool{{Type: "function", Function: wire.FunctionDef{Name: "f"}}}
	for text, failed := range map[string]int{"get_news\n{\"a\": 1}": 0, "Paris\nis lovely.": -1} {
		r, ok := ParseRegions(FunctionaryV32, tools, text, 0, false)
		if !ok || r.Failed != failed || len(r.Calls) != 0 || r.Content != text {
			t.Errorf("functionary-v3.2 %q: regions %+v, want failed at %d and the text as content", text, r, failed)
		}
	}
	// Every format's parser knows where its calls lie, so that every
	// format's calls can be repaired.
	for _, f := range all() {
		if _, ok := ParseRegions(f, nil, "Hi.", 0, false); !ok {
			t.Errorf("%s: no regions", f.Name())
		}
	}
}
