package reasoning

import "strings"

// Magistral is Mistral's reasoning, between the control tokens [THINK]
// and [/THINK]: Magistral, Ministral 3 Reasoning.
var Magistral Format = &tagFormat{
	name: "magistral", start: "[THINK]", end: "[/THINK]", close: "[/THINK]",
	markers: []string{"[THINK]", "[/THINK]"},
}

// isMagistral reports a template that writes [THINK].
func isMagistral(src string) bool { return strings.Contains(src, "[THINK]") }
