package reasoning

import "strings"

// SolarOpen is Upstage Solar Open's reasoning: an assistant message on
// the think channel, <|think|> to <|end|>, before the answer's message,
// <|begin|>assistant and <|content|> (or <|tool_calls|>, passed on to
// the tool-call parser), up to <|end|>. The splitter drops the answer's
// markup from the content.
var SolarOpen Format = &answerFormat{
	tagFormat: &tagFormat{
		name: "solar-open", start: "<|think|>", end: "<|end|>", close: "<|end|><|begin|>assistant",
		markers: []string{"<|think|>", "<|end|>"},
	},
	open: []string{"<|begin|>assistant", "<|content|>"}, close: "<|end|>",
}

// isSolarOpen reports a template with Solar Open's think channel.
func isSolarOpen(src string) bool {
	return strings.Contains(src, "<|think|>") && strings.Contains(src, "<|content|>")
}
