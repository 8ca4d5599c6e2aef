package toolcall

import (
	"slices"
	"strings"

	"github.com/corral-llm/corral/grammar"
)

// MiniCPM is OpenBMB MiniCPM 5's format: after any text, each call an XML
// element, one element per parameter, its value as text (in a CDATA
// section when it has <, & or a line break):
//
//	<function name="get_weather"><param name="city">Paris</param><param name="days">3</param></function>
//
// A value is typed by its parameter's schema, as Qwen3Coder's are; Python's
// True, False, None and literals, which the template writes for values
// that are not strings, read as JSON's.
var MiniCPM Format = &xmlCall{
	name:    "minicpm",
	markers: []string{cpmFunction, cpmFunctionEnd},
	opens:   []string{cpmFunction}, call: cpmFunction, head: cpmName, callEnd: cpmFunctionEnd,
	param: cpmParam, key: cpmName, paramEnd: cpmParamEnd, cdata: true, value: cpmText,
	plain: true,
	writeCall: func(name string, params []grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(cpmFunction+name+`">`), grammar.Seq(params...), grammar.Lit(cpmFunctionEnd))
	},
	writeParam: func(key string, _ []string, value grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(cpmParam+key+`">`), value, grammar.Lit(cpmParamEnd))
	},
	sep: newline,
}

// isMiniCPM reports a template that writes <function name="..."> with
// <param name="..."> elements.
func isMiniCPM(src string) bool {
	return strings.Contains(src, cpmFunction) && strings.Contains(src, cpmParam)
}

// MiniCPM's markup.
const (
	cpmFunction    = `<function name="`
	cpmFunctionEnd = "</function>"
	cpmParam       = `<param name="`
	cpmParamEnd    = "</param>"
)

// cpmName reads the name of <function name="NAME"> or <param name="NAME">
// at s[i:], after the opening quote, and the tag's end.
func cpmName(s string, i int, _ bool) (name string, _ map[string]string, next, state int) {
	rest := s[i:]
	e := strings.IndexAny(rest, "\"<\n>")
	switch {
	case e < 0 && len(rest) <= maxNameLen:
		return "", nil, 0, readMore
	case e <= 0 || e > maxNameLen || rest[e] != '"':
		return "", nil, 0, readBad
	case e+1 == len(rest):
		return "", nil, 0, readMore
	case rest[e+1] != '>':
		return "", nil, 0, readBad
	}
	return rest[:e], nil, i + e + 2, readDone
}

// cpmText is the JSON text of a value written as text, typed as
// typedValue does, with Python's literals (True, None, {'a': 1}) read as
// JSON's.
func cpmText(text string, _ map[string]string, types []string) string {
	if types == nil || slices.Equal(types, []string{"string"}) {
		return quote(text)
	}
	t := strings.TrimSpace(text)
	if js, e, st := pyValue(t+"\n", 0, 0); st == pyWhole && e == len(t) && js != t {
		if v := typedValue(js, types); v != quote(js) {
			return v
		}
	}
	return typedValue(text, types)
}
