package toolcall

import (
	"strings"

	"github.com/corral-llm/corral/grammar"
)

// Llama3 writes the whole answer as {"name": ..., "parameters": {...}},
// possibly after <|python_tag|>, calls separated by ";": Llama 3.1, 3.2
// and 3.3 with JSON tool calling.
var Llama3 Format = &jsonFormat{
	name:    "llama3",
	markers: []string{"<|python_tag|>"},
	sx: syntax{
		start: []string{"<|python_tag|>"}, bare: true, argsKey: "parameters",
		frame: grammar.Frame{Sep: "; "},
	},
}

// isLlama3 reports a template with <|python_tag|> or the Llama 3 headers.
func isLlama3(src string) bool {
	return strings.Contains(src, "<|python_tag|>") || strings.Contains(src, "<|start_header_id|>")
}
