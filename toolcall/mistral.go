package toolcall

import (
	"strings"

	"github.com/corral-llm/corral/grammar"
)

// Mistral writes [TOOL_CALLS] and then a JSON array of {"name": ...,
// "arguments": {...}}: Mistral 7B v0.3, Nemo, Small before 3.2. The array
// alone also opens an answer, for a vocabulary whose [TOOL_CALLS] control
// token is not output as text. (Later Mistral models write each call as
// NAME[ARGS]{...}: see MistralV11.)
var Mistral Format = &jsonFormat{
	name:    "mistral",
	markers: []string{"[TOOL_CALLS]"},
	sx: syntax{
		start: []string{"[TOOL_CALLS]"}, bare: true, argsKey: "arguments",
		frame: grammar.Frame{Open: "[TOOL_CALLS][", Close: "]", Sep: ", "},
	},
}

// isMistral reports a template that writes [TOOL_CALLS].
func isMistral(src string) bool { return strings.Contains(src, "[TOOL_CALLS]") }
