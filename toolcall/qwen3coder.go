package toolcall

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
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
var Qwen3Coder Format = &xmlFormat{name: "qwen3-coder", open: "<tool_call>", close: "</tool_call>", lines: true}

// isQwen3Coder reports a template that writes <function=NAME> and
// <parameter=NAME> inside <tool_call> tags.
func isQwen3Coder(src string) bool {
	return strings.Contains(src, "<tool_call>") && strings.Contains(src, "<function=") && strings.Contains(src, "<parameter=")
}

// The XML format's markup inside its tags.
const (
	xmlFunction   = "<function="
	xmlFuncEnd    = "</function>"
	xmlParam      = "<parameter="
	xmlParamEnd   = "</parameter>"
	xmlMaxNameLen = 256 // a name longer than this is not markup
)

// xmlFormat is the XML markup of Qwen3-Coder and its kin, inside its
// family's own tags: <tool_call> (Qwen3Coder), <seed:tool_call>
// (SeedOSS).
type xmlFormat struct {
	name        string
	open, close string // the tags around each call
	// lines: each value is written on lines of its own, between line
	// breaks after <parameter=NAME> and before </parameter>.
	lines bool
}

// Name is the format's name.
func (f *xmlFormat) Name() string { return f.name }

// Markers are the markup tokens the format writes.
func (f *xmlFormat) Markers() []string { return []string{f.open, f.close} }

// Parser returns a parser that types values by the tools' schemas.
func (f *xmlFormat) Parser(tools []wire.Tool, max int) Parser {
	return newMarkupParser(&xmlScanner{f: f, types: paramTypes(tools)}, []string{f.open}, max)
}

// xmlScanner reads a region after the format's opening tag.
type xmlScanner struct {
	f     *xmlFormat
	types map[string]map[string][]string // tool → parameter → JSON types its schema allows
}

func (x *xmlScanner) scan(_, s string, end, cut bool) callScan {
	var r callScan
	i := skipSpace(s, 0)
	name, i, ok := xmlTag(s, i, xmlFunction)
	switch {
	case !ok:
		r.bad = true
		return r
	case i < 0:
		return r // the tag is still arriving
	}
	r.name = name
	var args argsObject
	r.args = args.text()
	for {
		i = skipSpace(s, i)
		rest := s[i:]
		switch {
		case strings.HasPrefix(rest, xmlFuncEnd):
			r.args, r.complete = args.whole(), true
			return closeList(s, i+len(xmlFuncEnd), end, r, x.f.close)
		case strings.HasPrefix(xmlFuncEnd, rest) && !end:
			return r
		}
		param, j, ok := xmlTag(s, i, xmlParam)
		switch {
		case !ok:
			r.bad = true
			return r
		case j < 0:
			return r
		}
		k := strings.Index(s[j:], xmlParamEnd)
		if k < 0 {
			return r // the value is still arriving
		}
		value := s[j : j+k]
		value = strings.TrimPrefix(value, "\n")
		value = strings.TrimSuffix(value, "\n")
		r.args = args.add(param, typedValue(value, x.types[name][param]))
		i = j + k + len(xmlParamEnd)
	}
}

// xmlTag reads the tag <prefix NAME> at s[i:]: its name and the index
// after it, or i < 0 when it may still be arriving; ok is false when
// s[i:] is no such tag.
func xmlTag(s string, i int, prefix string) (name string, next int, ok bool) {
	rest := s[i:]
	if !strings.HasPrefix(rest, prefix) {
		return "", -1, strings.HasPrefix(prefix, rest)
	}
	rest = rest[len(prefix):]
	e := strings.IndexAny(rest, ">\n<")
	switch {
	case e < 0 && len(rest) <= xmlMaxNameLen:
		return "", -1, true
	case e <= 0 || e > xmlMaxNameLen || rest[e] != '>':
		return "", -1, false
	}
	return rest[:e], i + len(prefix) + e + 1, true
}

// Grammar forces calls in the XML markup: each tool's required
// parameters in the order of its schema, then its optional ones, each
// optional. A string parameter's value is its text (one of its enum's,
// when it has one), any other's the JSON its schema describes.
func (f *xmlFormat) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	types := paramTypes(tools)
	nl := ""
	if f.lines {
		nl = "\n"
	}
	var calls []grammar.Expr
	for _, t := range tools {
		name := t.Function.Name
		parts, err := paramElements(t, func(p property, params json.RawMessage) (grammar.Expr, error) {
			value, err := textOrJSON(b, params, p, types[name][p.name], nl+xmlParamEnd)
			if err != nil {
				return grammar.Expr{}, err
			}
			return grammar.Seq(grammar.Lit(xmlParam+p.name+">"+nl), value, grammar.Lit(nl+xmlParamEnd+"\n")), nil
		})
		if err != nil {
			return "", fmt.Errorf("tool %q: parameters: %w", name, err)
		}
		call := append([]grammar.Expr{grammar.Lit(f.open + "\n" + xmlFunction + name + ">\n")}, parts...)
		calls = append(calls, grammar.Seq(append(call, grammar.Lit(xmlFuncEnd+"\n"+f.close))...))
	}
	call := b.Rule("call", grammar.Alt(calls...))
	root := call
	if parallel {
		root = grammar.Seq(call, grammar.Repeat(grammar.Seq(grammar.Lit("\n"), call), 0, -1))
	}
	return b.Grammar(root)
}
