package toolcall

import (
	"strings"

	"github.com/corral-llm/corral/grammar"
)

// MiniMaxM1 is MiniMax-M1's format: the calls as JSON objects, one a
// line, in one <tool_calls> block after any text:
//
//	<tool_calls>
//	{"name": "get_weather", "arguments": {"city": "Paris"}}
//	{"name": "get_time", "arguments": {}}
//	</tool_calls>
//
// (MiniMax M2 writes XML: see MiniMaxM2.)
var MiniMaxM1 Format = &jsonFormat{
	name:    "minimax-m1",
	markers: []string{"<tool_calls>", "</tool_calls>"},
	sx: syntax{
		start: []string{"<tool_calls>"}, end: "</tool_calls>", argsKey: "arguments",
		frame: grammar.Frame{Open: "<tool_calls>\n", Close: "\n</tool_calls>", Sep: "\n"},
	},
}

// isMiniMaxM1 reports a template that writes calls in a <tool_calls>
// block one a line; Apriel's JSON list in the same tags (<tool_calls>[)
// is not MiniMax's.
func isMiniMaxM1(src string) bool {
	return strings.Contains(src, "<tool_calls>") && !strings.Contains(src, "<tool_calls>[")
}

// MiniMaxM2 is MiniMax M2's format: the calls in one
// <minimax:tool_call> block, each an <invoke> element with a <parameter>
// element per argument, its value as text:
//
//	<minimax:tool_call>
//	<invoke name="get_weather">
//	<parameter name="city">Paris</parameter>
//	<parameter name="days">3</parameter>
//	</invoke>
//	</minimax:tool_call>
//
// A value is typed by its parameter's schema, as Qwen3Coder's are: a
// string stays the text, anything else is read as JSON.
var MiniMaxM2 Format = &xmlCall{
	name:    "minimax-m2",
	markers: []string{mmSection, mmSectionEnd},
	opens:   []string{mmSection, mmInvoke}, call: mmInvoke, head: quotedName, callEnd: mmInvokeEnd,
	listEnds: []string{mmSectionEnd}, openList: true,
	param: mmParam, key: quotedName, paramEnd: mmParamEnd,
	endTagCut: true,
	writeCall: func(name string, params []grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(mmInvoke+name+"\">\n"), grammar.Seq(params...), grammar.Lit(mmInvokeEnd+"\n"))
	},
	writeParam: func(key string, _ []string, value grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(mmParam+key+`">`), value, grammar.Lit(mmParamEnd+"\n"))
	},
	writeList: [2]string{mmSection + "\n", mmSectionEnd},
	stop:      mmParamEnd,
}

// isMiniMaxM2 reports a template that writes <minimax:tool_call>.
func isMiniMaxM2(src string) bool { return strings.Contains(src, mmSection) }

// MiniMax M2's markup.
const (
	mmSection    = "<minimax:tool_call>"
	mmSectionEnd = "</minimax:tool_call>"
	mmInvoke     = `<invoke name="`
	mmInvokeEnd  = "</invoke>"
	mmParam      = `<parameter name="`
	mmParamEnd   = "</parameter>"
)

// quotedName reads NAME"> at s[i:], the rest of an element's name
// attribute.
func quotedName(s string, i int, _ bool) (name string, _ map[string]string, next, state int) {
	q := strings.IndexByte(s[i:], '"')
	switch {
	case q < 0 && len(s)-i > maxNameLen:
		return "", nil, 0, readBad
	case q < 0:
		return "", nil, 0, readMore
	}
	name = s[i : i+q]
	if !validName(name, maxNameLen) {
		return "", nil, 0, readBad
	}
	switch j := i + q + 1; {
	case j == len(s):
		return "", nil, 0, readMore
	case s[j] != '>':
		return "", nil, 0, readBad
	default:
		return name, nil, j + 1, readDone
	}
}
