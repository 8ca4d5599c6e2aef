package reasoning

import "strings"

// Gemma4 is Gemma 4's thought channel: <|channel>thought, a line break,
// the reasoning, then <channel|> (the markers are special tokens). Its
// template turns thinking off by writing an empty channel in the
// generation prompt.
var Gemma4 Format = &tagFormat{
	name: "gemma4", start: "<|channel>thought", end: "<channel|>", close: "<channel|>",
	markers: []string{"<|channel>", "<channel|>"},
}

// isGemma4 reports a template that writes Gemma 4's channel markers.
func isGemma4(src string) bool {
	return strings.Contains(src, "<|channel>") && strings.Contains(src, "<channel|>")
}
