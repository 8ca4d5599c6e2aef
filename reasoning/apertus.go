package reasoning

import "strings"

// Apertus is Swiss AI Apertus's deliberation, between <|inner_prefix|>
// and <|inner_suffix|>.
var Apertus Format = &tagFormat{
	name: "apertus", start: "<|inner_prefix|>", end: "<|inner_suffix|>", close: "<|inner_suffix|>",
	markers: []string{"<|inner_prefix|>", "<|inner_suffix|>"},
}

// isApertus reports a template that writes <|inner_prefix|>.
func isApertus(src string) bool { return strings.Contains(src, "<|inner_prefix|>") }
