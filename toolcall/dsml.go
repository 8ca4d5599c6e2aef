package toolcall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// DeepSeek's DSML markup: XML-like tags whose names begin with the
// special token ｜DSML｜ (fullwidth vertical bars).
const (
	dsmlToken      = "｜DSML｜"
	dsmlInvoke     = "<" + dsmlToken + "invoke"
	dsmlInvokeEnd  = "</" + dsmlToken + "invoke>"
	dsmlParam      = "<" + dsmlToken + "parameter"
	dsmlParamEnd   = "</" + dsmlToken + "parameter>"
	dsmlMaxTag     = 512 // a tag longer than this is not markup
	dsmlBlockV32   = "function_calls"
	dsmlBlockV4    = "tool_calls"
	dsmlStringTrue = "true"
)

// DeepSeekV32 is DeepSeek V3.2's DSML format: a block of invokes, each
// parameter's value as text when its string attribute is "true", as JSON
// when it is "false":
//
//	<｜DSML｜function_calls>
//	<｜DSML｜invoke name="get_weather">
//	<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
//	<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
//	</｜DSML｜invoke>
//	</｜DSML｜function_calls>
//
// Its parser also reads DeepSeekV4's block.
var DeepSeekV32 Format = &dsmlFormat{name: "deepseek-v3.2", block: dsmlBlockV32}

// DeepSeekV4 is DeepSeek V4's (and V4-Flash's) DSML format: V3.2's, in a
// <｜DSML｜tool_calls> block. Its parser also reads V3.2's block.
var DeepSeekV4 Format = &dsmlFormat{name: "deepseek-v4", block: dsmlBlockV4}

// isDSML reports a template that writes DSML.
func isDSML(src string) bool { return strings.Contains(src, dsmlToken) }

// isDeepSeekV32 reports a DSML template whose block is function_calls.
func isDeepSeekV32(src string) bool { return isDSML(src) && strings.Contains(src, dsmlBlockV32+">") }

// isDeepSeekV4 reports a DSML template whose block is tool_calls.
func isDeepSeekV4(src string) bool { return isDSML(src) && strings.Contains(src, "'"+dsmlBlockV4+">") }

// dsmlFormat is DSML with the block name its model writes.
type dsmlFormat struct {
	name  string
	block string
}

// dsmlBlocks are the blocks' opening and closing tags, of both names.
var dsmlOpens, dsmlCloses = []string{dsmlOpen(dsmlBlockV32), dsmlOpen(dsmlBlockV4)}, []string{dsmlClose(dsmlBlockV32), dsmlClose(dsmlBlockV4)}

func dsmlOpen(block string) string  { return "<" + dsmlToken + block + ">" }
func dsmlClose(block string) string { return "</" + dsmlToken + block + ">" }

// Name is the format's name.
func (f *dsmlFormat) Name() string { return f.name }

// Markers are the DSML token and the tags the format writes.
func (f *dsmlFormat) Markers() []string {
	return []string{dsmlOpen(f.block), dsmlClose(f.block), dsmlInvoke, dsmlInvokeEnd, dsmlParam, dsmlParamEnd, dsmlToken}
}

// Parser returns a parser of either block. Each invoke is a region: the
// first opens at the block's tag, the next ones at their own tag, and
// the last one takes the block's closing tag.
func (f *dsmlFormat) Parser(tools []wire.Tool, max int) Parser {
	return newMarkupParser(&dsmlScanner{types: paramTypes(tools)}, append(slices.Clone(dsmlOpens), dsmlInvoke), max)
}

type dsmlScanner struct {
	types map[string]map[string][]string // tool → parameter → JSON types its schema allows
}

func (x *dsmlScanner) scan(marker, s string, end, cut bool) callScan {
	var r callScan
	i := 0
	if marker != dsmlInvoke {
		var st int
		if i, st = firstCall(s, dsmlInvoke); st != readDone {
			r.bad = st == readBad
			return r
		}
	}
	attrs, i, ok := dsmlAttrs(s, i)
	switch {
	case !ok || (i >= 0 && !validHead(attrs["name"])):
		r.bad = true
		return r
	case i < 0:
		return r // the tag is still arriving
	}
	name := attrs["name"]
	r.name = name
	var args argsObject
	r.args = args.text()
	for {
		i = skipSpace(s, i)
		rest := s[i:]
		switch {
		case strings.HasPrefix(rest, dsmlInvokeEnd):
			r.args, r.complete = args.whole(), true
			return closeList(s, i+len(dsmlInvokeEnd), end, r, dsmlCloses...)
		case strings.HasPrefix(dsmlInvokeEnd, rest) && !end:
			return r
		case !strings.HasPrefix(rest, dsmlParam):
			r.bad = !strings.HasPrefix(dsmlParam, rest)
			return r
		}
		attrs, j, ok := dsmlAttrs(s, i+len(dsmlParam))
		switch {
		case !ok || (j >= 0 && attrs["name"] == ""):
			r.bad = true
			return r
		case j < 0:
			return r
		}
		k := strings.Index(s[j:], dsmlParamEnd)
		if k < 0 {
			return r // the value is still arriving
		}
		r.args = args.add(attrs["name"], dsmlValue(s[j:j+k], attrs["string"], x.types[name][attrs["name"]]))
		i = j + k + len(dsmlParamEnd)
	}
}

// dsmlValue is the JSON text of a parameter's value: its text as a
// string when the model said string="true", the JSON it wrote when it
// said "false"; typed by the schema (see typedValue) when that is not
// JSON or the model said neither.
func dsmlValue(text, isString string, types []string) string {
	switch isString {
	case dsmlStringTrue:
		return quote(text)
	case "false":
		var b bytes.Buffer
		if json.Compact(&b, []byte(strings.TrimSpace(text))) == nil {
			return b.String()
		}
	}
	return typedValue(text, types)
}

// dsmlAttrs reads a tag's attributes, ` name="value"` up to its '>', from
// s[i:]: them and the index after the tag, or next < 0 when the tag may
// still be arriving; ok is false when it is not a tag.
func dsmlAttrs(s string, i int) (attrs map[string]string, next int, ok bool) {
	attrs = map[string]string{}
	start := i
	for {
		if i-start > dsmlMaxTag {
			return nil, -1, false
		}
		if i == len(s) {
			return nil, -1, true
		}
		switch c := s[i]; {
		case c == '>':
			return attrs, i + 1, true
		case c == ' ' || c == '\t':
			i++
			continue
		case !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'):
			return nil, -1, false
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return nil, -1, len(s)-start <= dsmlMaxTag
		}
		key := s[i : i+eq]
		if strings.ContainsAny(key, " \t\n<>\"") {
			return nil, -1, false
		}
		i += eq + 1
		if i == len(s) {
			return nil, -1, true
		}
		if s[i] != '"' {
			return nil, -1, false
		}
		q := strings.IndexByte(s[i+1:], '"')
		if q < 0 {
			return nil, -1, len(s)-start <= dsmlMaxTag
		}
		value := s[i+1 : i+1+q]
		if strings.ContainsAny(value, "<>\n") {
			return nil, -1, false
		}
		attrs[key] = value
		i += q + 2
	}
}

// Grammar forces calls in the format's block: each tool's required
// parameters in the order of its schema, then its optional ones, each
// optional; a string parameter as text (string="true"), any other as the
// JSON its schema describes (string="false").
func (f *dsmlFormat) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	types := paramTypes(tools)
	calls := make([]grammar.Expr, len(tools))
	for i, t := range tools {
		name := t.Function.Name
		parts, err := paramElements(t, func(p property, params json.RawMessage) (grammar.Expr, error) {
			pt := types[name][p.name]
			value, err := textOrJSON(b, params, p, pt, dsmlParamEnd)
			if err != nil {
				return grammar.Expr{}, err
			}
			isString := "false"
			if slices.Equal(pt, []string{"string"}) {
				isString = dsmlStringTrue
			}
			return grammar.Seq(grammar.Lit(dsmlParam+` name="`+p.name+`" string="`+isString+`">`), value, grammar.Lit(dsmlParamEnd+"\n")), nil
		})
		if err != nil {
			return "", fmt.Errorf("tool %q: parameters: %w", name, err)
		}
		call := append([]grammar.Expr{grammar.Lit(dsmlInvoke + ` name="` + name + "\">\n")}, parts...)
		calls[i] = grammar.Seq(append(call, grammar.Lit(dsmlInvokeEnd+"\n"))...)
	}
	call := b.Rule("call", grammar.Alt(calls...))
	list := call
	if parallel {
		list = grammar.Repeat(call, 1, -1)
	}
	return b.Grammar(grammar.Seq(grammar.Lit(dsmlOpen(f.block)+"\n"), list, grammar.Lit(dsmlClose(f.block))))
}
