package toolcall

import (
	"strings"

	"github.com/corral-llm/corral/grammar"
)

// Granite writes <|tool_call|> and then a JSON list of {"name": ...,
// "arguments": {...}}: IBM Granite 3.x (3.3 among them).
//
//	<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]
//
// (Granite 4.0 and 4.1 write Hermes's <tool_call> tags.)
var Granite Format = &jsonFormat{
	name:    "granite",
	markers: []string{"<|tool_call|>"},
	sx: syntax{
		start: []string{"<|tool_call|>"}, argsKey: "arguments",
		frame: grammar.Frame{Open: "<|tool_call|>[", Close: "]", Sep: ", "},
	},
}

// isGranite reports a template that asks for <|tool_call|>.
func isGranite(src string) bool { return strings.Contains(src, "<|tool_call|>") }
