package reasoning

import "strings"

// Hy3 is Tencent Hy3's reasoning, between <think:opensource> and
// </think:opensource> (its template's tags carry the suffix
// ":opensource").
var Hy3 Format = &tagFormat{
	name: "hy3", start: "<think:opensource>", end: "</think:opensource>", close: "</think:opensource>",
	markers: []string{"<think:opensource>", "</think:opensource>"},
}

// isHy3 reports a template that builds its think tags with the suffix
// (its source has "<think{}>" and ":opensource").
func isHy3(src string) bool {
	return strings.Contains(src, "<think{}>") && strings.Contains(src, ":opensource")
}
