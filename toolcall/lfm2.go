package toolcall

import (
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// LFM2 is Liquid's format: a Python list of calls between two special
// tokens, after any text, the values Python literals:
//
//	<|tool_call_start|>[get_weather(city='Paris', days=3), get_time()]<|tool_call_end|>
//
// LFM2 and LFM2.5 write it.
var LFM2 Format = lfm2Format{}

// isLFM2 reports a template with LFM2's tool markup, or LFM2.5's tool
// list ("List of tools: [" in the system prompt).
func isLFM2(src string) bool {
	return strings.Contains(src, lfm2Start) || strings.Contains(src, "<|tool_list_start|>") || strings.Contains(src, "List of tools: [")
}

// LFM2's markup: special tokens of its vocabulary.
const (
	lfm2Start = "<|tool_call_start|>"
	lfm2End   = "<|tool_call_end|>"
)

type lfm2Format struct{}

// Name is the format's name.
func (lfm2Format) Name() string { return "lfm2" }

// Markers are the format's special tokens.
func (lfm2Format) Markers() []string { return []string{lfm2Start, lfm2End} }

// Parser returns the format's parser; a list of calls that opens the
// answer without the start token is read too.
func (lfm2Format) Parser(_ []wire.Tool, max int) Parser {
	return newMarkupParser(pyListScanner{close: lfm2End}, []string{lfm2Start}, max).leading()
}

// Grammar forces a list of calls between the tokens, values as JSON.
func (lfm2Format) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	return pyCallsGrammar(tools, parallel, lim, lfm2Start, lfm2End)
}
