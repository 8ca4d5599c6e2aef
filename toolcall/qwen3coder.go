package toolcall

import (
	"strings"

	"github.com/corral-llm/corral/grammar"
)

// Qwen3Coder writes each call as XML, one parameter per element, its
// value as text:
//
//	<tool_call>
//	<function=get_weather>
//	<parameter=city>
//	Paris
//	</parameter>
//	<parameter=days>
//	3
//	</parameter>
//	</function>
//	</tool_call>
//
// Qwen3-Coder, Qwen3.5 and 3.6, Nemotron 3 Nano and Step 3.5 write it.
// A value is typed by its parameter's schema: a string stays the text
// (less the line breaks around it); a number, a boolean, an object or an
// array is read as JSON (and stays a string when it is not JSON).
var Qwen3Coder Format = qwenXML("qwen3-coder", "<tool_call>", "</tool_call>", true)

// isQwen3Coder reports a template that writes <function=NAME> and
// <parameter=NAME> inside <tool_call> tags.
func isQwen3Coder(src string) bool {
	return strings.Contains(src, "<tool_call>") && strings.Contains(src, "<function=") && strings.Contains(src, "<parameter=")
}

// The XML format's markup inside its tags.
const (
	xmlFunction = "<function="
	xmlFuncEnd  = "</function>"
	xmlParam    = "<parameter="
	xmlParamEnd = "</parameter>"
)

// qwenXML is the XML markup of Qwen3-Coder and its kin inside its
// family's own tags around each call, open and close: <tool_call>
// (Qwen3Coder), <seed:tool_call> (SeedOSS). The grammar writes each
// value on lines of its own, between line breaks after <parameter=NAME>
// and before </parameter>, when lines; the parser takes a line break
// there as markup either way.
func qwenXML(name, open, close string, lines bool) *xmlCall {
	nl := ""
	if lines {
		nl = "\n"
	}
	return &xmlCall{
		name:    name,
		markers: []string{open, close},
		opens:   []string{open}, call: xmlFunction, head: tagName, callEnd: xmlFuncEnd, listEnds: []string{close},
		param: xmlParam, key: tagName, paramEnd: xmlParamEnd, value: lineValue,
		writeCall: func(fn string, params []grammar.Expr) grammar.Expr {
			return grammar.Seq(grammar.Lit(open+"\n"+xmlFunction+fn+">\n"), grammar.Seq(params...), grammar.Lit(xmlFuncEnd+"\n"+close))
		},
		writeParam: func(key string, _ []string, value grammar.Expr) grammar.Expr {
			return grammar.Seq(grammar.Lit(xmlParam+key+">"+nl), value, grammar.Lit(nl+xmlParamEnd+"\n"))
		},
		sep:  newline,
		stop: nl + xmlParamEnd,
	}
}

// tagName reads NAME> at s[i:], the rest of a tag <function=NAME> or
// <parameter=NAME>.
func tagName(s string, i int, _ bool) (name string, _ map[string]string, next, state int) {
	rest := s[i:]
	e := strings.IndexAny(rest, ">\n<")
	switch {
	case e < 0 && len(rest) <= maxNameLen:
		return "", nil, 0, readMore
	case e <= 0 || e > maxNameLen || rest[e] != '>':
		return "", nil, 0, readBad
	}
	return rest[:e], nil, i + e + 1, readDone
}

// lineValue is the JSON text of a value written on lines of its own (see
// typedValue), less the line breaks around it.
func lineValue(text string, _ map[string]string, types []string) string {
	return typedValue(strings.TrimSuffix(strings.TrimPrefix(text, "\n"), "\n"), types)
}
