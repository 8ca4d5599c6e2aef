package reasoning

import "strings"

// Seed is ByteDance Seed-OSS's reasoning, between <seed:think> and
// </seed:think>.
var Seed Format = &tagFormat{
	name: "seed", start: "<seed:think>", end: "</seed:think>", close: "</seed:think>\n",
	markers: []string{"<seed:think>", "</seed:think>"},
}

// isSeed reports a template that writes <seed:think>.
func isSeed(src string) bool { return strings.Contains(src, "<seed:think>") }
