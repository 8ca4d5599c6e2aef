package reasoning

import "strings"

// Granite is IBM Granite 3.2 and 3.3's reasoning: between <think> and
// </think>, and the answer after it between <response> and </response>
// (tags the splitter drops).
var Granite Format = &answerFormat{
	tagFormat: &tagFormat{
		name: "granite", start: "<think>", end: "</think>", close: "</think><response>",
		markers: []string{"<think>", "</think>"},
	},
	open: []string{"<response>"}, close: "</response>",
}

// isGranite reports a Granite template that asks for the answer in
// <response> tags after the reasoning.
func isGranite(src string) bool {
	return strings.Contains(src, "<|start_of_role|>") && strings.Contains(src, "<response>") && strings.Contains(src, "<think>")
}
