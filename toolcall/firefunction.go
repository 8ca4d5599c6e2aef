package toolcall

import "strings"

// FirefunctionV2 is Fireworks' firefunction-v2 format (on Llama 3): after
// any text, "functools" and a JSON list of calls, with no closing marker:
//
//	functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]
var FirefunctionV2 Format = &listFormat{
	name:    "firefunction-v2",
	markers: []string{fireFunctools + "["},
	start:   []string{fireFunctools + "["},
	sc:      listScanner{inList: true},
	before:  " " + fireFunctools + "[", after: "]", sep: ", ",
	nameKey: "name", argsKey: "arguments",
}

// fireFunctools is the word that opens firefunction's calls, with the
// list after it.
const fireFunctools = "functools"

// isFirefunctionV2 reports a template that writes calls after functools.
func isFirefunctionV2(src string) bool { return strings.Contains(src, fireFunctools+"[") }
