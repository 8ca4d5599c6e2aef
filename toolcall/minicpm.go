package toolcall

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
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
var MiniCPM Format = miniCPMFormat{}

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
	cpmCDATA       = "<![CDATA["
	cpmCDATAEnd    = "]]>"
)

type miniCPMFormat struct{}

// Name is the format's name.
func (miniCPMFormat) Name() string { return "minicpm" }

// Markers are the format's markup.
func (miniCPMFormat) Markers() []string { return []string{cpmFunction, cpmFunctionEnd} }

// Parser returns a parser that types values by the tools' schemas.
func (miniCPMFormat) Parser(tools []wire.Tool, max int) Parser {
	return newMarkupParser(&cpmScanner{types: paramTypes(tools)}, []string{cpmFunction}, max)
}

type cpmScanner struct {
	types map[string]map[string][]string
}

func (c *cpmScanner) scan(_, s string, end, cut bool) callScan {
	var r callScan
	name, i, ok := cpmName(s, 0)
	switch {
	case !ok:
		r.bad = true
		return r
	case i < 0:
		return r
	}
	// The name is certain once a parameter or the function's end follows
	// it: markup around something else is given back whole.
	var args argsObject
	r.args = args.text()
	for {
		i = skipSpace(s, i)
		rest := s[i:]
		switch {
		case strings.HasPrefix(rest, cpmFunctionEnd):
			r.name, r.args, r.complete = name, args.whole(), true
			r.closed, r.end = true, i+len(cpmFunctionEnd)
			return r
		case strings.HasPrefix(cpmFunctionEnd, rest) && !end:
			return r
		case strings.HasPrefix(rest, cpmParam):
			r.name = name
		case strings.HasPrefix(cpmParam, rest) && !end:
			return r
		default:
			r.bad = true
			return r
		}
		param, j, ok := cpmName(s, i+len(cpmParam))
		switch {
		case !ok:
			r.bad = true
			return r
		case j < 0:
			return r
		}
		var value string
		if v, ok := strings.CutPrefix(s[j:], cpmCDATA); ok {
			k := strings.Index(v, cpmCDATAEnd)
			if k < 0 {
				return r
			}
			value = v[:k]
			j += len(cpmCDATA) + k + len(cpmCDATAEnd)
			if !strings.HasPrefix(s[j:], cpmParamEnd) {
				r.bad = !strings.HasPrefix(cpmParamEnd, s[j:])
				return r
			}
		} else if strings.HasPrefix(cpmCDATA, s[j:]) && !end {
			return r
		} else {
			k := strings.Index(s[j:], cpmParamEnd)
			if k < 0 {
				return r
			}
			value = s[j : j+k]
			j += k
		}
		r.args = args.add(param, cpmText(value, c.types[name][param]))
		i = j + len(cpmParamEnd)
	}
}

// cpmName reads the name of <function name="NAME"> or <param name="NAME">
// at s[i:], after the opening quote: the name and the index after the
// tag's '>', or i < 0 when it may still be arriving; ok is false when
// s[i:] is no such name.
func cpmName(s string, i int) (name string, next int, ok bool) {
	rest := s[i:]
	e := strings.IndexAny(rest, "\"<\n>")
	switch {
	case e < 0:
		return "", -1, len(rest) <= maxNameLen
	case e == 0 || e > maxNameLen || rest[e] != '"':
		return "", -1, false
	case e+1 == len(rest):
		return "", -1, true
	case rest[e+1] != '>':
		return "", -1, false
	}
	return rest[:e], i + e + 2, true
}

// cpmText is the JSON text of a value written as text, typed as
// typedValue does, with Python's literals (True, None, {'a': 1}) read as
// JSON's.
func cpmText(text string, types []string) string {
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

// Grammar forces calls in the XML markup: each tool's required parameters
// in the order of its schema, then its optional ones, each optional. A
// string parameter's value is its text without '<' or a CDATA section
// (one of its enum's, when it has one), any other's the JSON its schema
// describes.
func (miniCPMFormat) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	types := paramTypes(tools)
	text := b.Rule("text", grammar.Alt(b.TextExcluding("<"), grammar.Seq(grammar.Lit(cpmCDATA), b.TextExcluding(cpmCDATAEnd), grammar.Lit(cpmCDATAEnd))))
	var calls []grammar.Expr
	for _, t := range tools {
		name := t.Function.Name
		parts, err := paramElements(t, func(p property, params json.RawMessage) (grammar.Expr, error) {
			value, err := cpmValue(b, params, p, types[name][p.name], text)
			if err != nil {
				return grammar.Expr{}, err
			}
			return grammar.Seq(grammar.Lit(cpmParam+p.name+`">`), value, grammar.Lit(cpmParamEnd)), nil
		})
		if err != nil {
			return "", fmt.Errorf("tool %q: parameters: %w", name, err)
		}
		call := append([]grammar.Expr{grammar.Lit(cpmFunction + name + `">`)}, parts...)
		calls = append(calls, grammar.Seq(append(call, grammar.Lit(cpmFunctionEnd))...))
	}
	call := b.Rule("call", grammar.Alt(calls...))
	root := call
	if parallel {
		root = grammar.Seq(call, grammar.Repeat(grammar.Seq(grammar.Lit("\n"), call), 0, -1))
	}
	return b.Grammar(root)
}

// cpmValue is the grammar of a parameter's value: text for a string (one
// of its enum's), JSON for anything else.
func cpmValue(b *grammar.Builder, params json.RawMessage, p property, types []string, text grammar.Expr) (grammar.Expr, error) {
	if !slices.Equal(types, []string{"string"}) {
		return b.Schema(params, propertyPointer(p.name))
	}
	if e, ok := enumValue(p); ok {
		return e, nil
	}
	return text, nil
}
