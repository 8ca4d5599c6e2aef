package toolcall

import "strings"

// Apriel is ServiceNow Apriel's format (1.5 and 1.6): after the reasoning
// and any text, a JSON list of calls inside <tool_calls> tags:
//
//	<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>
//
// (Its reasoning, before [BEGIN FINAL RESPONSE], is package reasoning's
// apriel.)
var Apriel Format = &listFormat{
	name:    "apriel",
	markers: []string{aprielCalls, aprielCallsEnd},
	start:   []string{aprielCalls},
	sc:      listScanner{close: aprielCallsEnd},
	before:  aprielCalls + "[", after: "]" + aprielCallsEnd, sep: ", ",
	nameKey: "name", argsKey: "arguments",
}

// Apriel's markup.
const (
	aprielCalls    = "<tool_calls>"
	aprielCallsEnd = "</tool_calls>"
)

// isApriel reports a template that writes calls as a list in
// <tool_calls> tags.
func isApriel(src string) bool { return strings.Contains(src, aprielCalls+"[") }
