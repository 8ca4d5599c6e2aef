package toolcall

import "strings"

// CommandR7B is Cohere's format from Command R7B on: a JSON list of calls,
// each with an id, between two special tokens, after the reasoning; the
// text of an answer is framed by <|START_RESPONSE|> and <|END_RESPONSE|>
// (Command R7B) or <|START_TEXT|> and <|END_TEXT|> (Cohere's MoE models),
// which are taken out:
//
//	<|START_ACTION|>[
//	    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}
//	]<|END_ACTION|>
var CommandR7B Format = &listFormat{
	name: "command-r7b",
	markers: []string{cohereAction, cohereActionEnd, "<|START_RESPONSE|>", "<|END_RESPONSE|>",
		"<|START_TEXT|>", "<|END_TEXT|>"},
	start: []string{cohereAction},
	sc:    listScanner{close: cohereActionEnd},
	drop:  []string{"<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>"},
	// The grammar writes the list without the template's line breaks
	// and the calls without "tool_call_id", which its instructions do
	// not ask for.
	before: cohereAction + "[", after: "]" + cohereActionEnd, sep: ", ",
	nameKey: "tool_name", argsKey: "parameters",
}

// CommandRPlus is Command R and R+'s format: after any text, "Action:"
// and a JSON list of calls in a Markdown code block:
//
//	Action:
//	```json
//	[
//	    {"tool_name": "get_weather", "parameters": {"city": "Paris"}}
//	]```
var CommandRPlus Format = &listFormat{
	name:    "command-r-plus",
	markers: []string{commandRAction},
	start:   []string{commandRAction},
	sc:      listScanner{open: "```json", close: "```"},
	before:  commandRAction + "\n```json\n[\n    ", after: "\n]```", sep: ",\n    ",
	nameKey: "tool_name", argsKey: "parameters",
}

// Cohere's markup.
const (
	cohereAction    = "<|START_ACTION|>"
	cohereActionEnd = "<|END_ACTION|>"
	commandRAction  = "Action:"
)

// isCommandR7B reports a template that writes calls between
// <|START_ACTION|> and <|END_ACTION|>.
func isCommandR7B(src string) bool { return strings.Contains(src, cohereAction) }

// isCommandRPlus reports a template that writes calls as a JSON list
// with "tool_name" after "Action:".
func isCommandRPlus(src string) bool {
	return strings.Contains(src, commandRAction) && strings.Contains(src, "```json") && strings.Contains(src, "tool_name")
}
