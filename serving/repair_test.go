package serving

import (
	"encoding/json"
	"testing"

	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/reasoning"
	"github.com/corral-llm/corral/toolcall"
	"github.com/corral-llm/corral/wire"
)

var (
	weatherDef = wire.Tool{Type: "function", Function: wire.FunctionDef{Name: "get_weather",
		Parameters: json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
			"days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"], "additionalProperties": false}`)}}
	timeDef = wire.Tool{Type: "function", Function: wire.FunctionDef{Name: "get_time",
		Parameters: json.RawMessage(`{"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"]}`)}}
)

// failedCall finds the failed call's markup in the answer as the model
// wrote it, reasoning included, and finds nothing in a sound answer.
func TestFailedCall(t *testing.T) {
	bad := ` <tool_call>{"name": get_weather}</tool_call>`
	good := `<tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>`
	wrongArgs := "\n" + `<tool_call>{"name": "get_time", "arguments": {"zone": "PST"}}</tool_call>`
	tools := []wire.Tool{weatherDef, timeDef}
	plan := model.Plan{Tools: toolcall.Hermes, Defs: tools}
	one := model.Plan{Tools: toolcall.Hermes, Defs: tools, Max: 1} // parallel_tool_calls false
	think := model.Plan{Think: reasoning.Think, Tools: toolcall.Hermes, Defs: tools}
	for _, tc := range []struct {
		name   string
		plan   model.Plan
		text   string
		before string // the text before the failed call; "-": none failed
		named  string // the function it named, when one of the tools
	}{
		{"markup", plan, "Sure." + bad + " More.", "Sure.", ""},
		{"after a sound call", plan, good + bad, good, ""},
		{"arguments", plan, "Sure." + good + wrongArgs, "Sure." + good, "get_time"},
		{"after reasoning", think, "<think>Hmm. <tool_call></think>Sure." + bad, "<think>Hmm. <tool_call></think>Sure.", ""},
		{"sound", plan, "Sure. " + good, "-", ""},
		{"after the one call kept", one, good + bad, "-", ""},
		{"the one call kept", one, bad + good, "", ""},
		{"sound after reasoning", think, "<think>Hmm.</think>" + good, "-", ""},
		{"text", plan, "Once upon a time.", "-", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v argValidator
			at, named, ok := failedCall(tc.plan, tc.text, &v)
			switch {
			case tc.before == "-" && ok:
				t.Fatalf("failed call after %q, want none", tc.text[:at])
			case tc.before == "-":
				return
			case !ok || tc.text[:at] != tc.before:
				t.Fatalf("failed call at %d (%v), want after %q", at, ok, tc.before)
			}
			name := ""
			if named != nil {
				name = named.Function.Name
			}
			if name != tc.named {
				t.Errorf("named %q, want %q", name, tc.named)
			}
		})
	}
}
