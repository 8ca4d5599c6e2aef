package reasoning

import "strings"

// Apriel is ServiceNow Apriel's reasoning (1.5 and 1.6): the answer
// begins with "Here are my reasoning steps:" and the reasoning, and
// [BEGIN FINAL RESPONSE] ends it; the answer that follows may end with
// [END FINAL RESPONSE], which is taken out. Apriel 1.6's generation
// prompt writes the first line itself, so that the answer starts inside
// the reasoning.
var Apriel Format = &dropFormat{
	tagFormat: &tagFormat{
		name: "apriel", start: "Here are my reasoning steps:", end: aprielEnd, close: "\n" + aprielEnd + "\n",
		markers: []string{aprielEnd, aprielFinalEnd},
	},
	drop: []string{aprielFinalEnd},
}

// Apriel's markers.
const (
	aprielEnd      = "[BEGIN FINAL RESPONSE]"
	aprielFinalEnd = "[END FINAL RESPONSE]"
)

// isApriel reports a template that asks for the answer after [BEGIN
// FINAL RESPONSE].
func isApriel(src string) bool { return strings.Contains(src, aprielEnd) }
