package reasoning

import "strings"

// CommandR7B is Cohere's reasoning from Command R7B on, between
// <|START_THINKING|> and <|END_THINKING|>; the answer's text after it is
// framed by <|START_RESPONSE|> and <|END_RESPONSE|> (Command R7B) or
// <|START_TEXT|> and <|END_TEXT|> (Cohere's MoE models), taken out of the
// content. The templates write <|START_THINKING|><|END_THINKING|> to turn
// thinking off, and Cohere's MoE models' opens it in the generation prompt.
var CommandR7B Format = &dropFormat{
	tagFormat: &tagFormat{
		name: "command-r7b", start: "<|START_THINKING|>", end: "<|END_THINKING|>", close: "<|END_THINKING|>",
		markers: append([]string{"<|START_THINKING|>", "<|END_THINKING|>"}, cohereFraming...),
	},
	drop: cohereFraming,
}

// cohereFraming is the markup around the text of Cohere's answers.
var cohereFraming = []string{"<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>"}

// isCommandR7B reports a template that writes <|START_THINKING|>.
func isCommandR7B(src string) bool { return strings.Contains(src, "<|START_THINKING|>") }
