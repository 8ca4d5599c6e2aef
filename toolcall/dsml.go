package toolcall

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/corral-llm/corral/grammar"
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
var DeepSeekV32 Format = dsml("deepseek-v3.2", dsmlBlockV32)

// DeepSeekV4 is DeepSeek V4's (and V4-Flash's) DSML format: V3.2's, in a
// <｜DSML｜tool_calls> block. Its parser also reads V3.2's block.
var DeepSeekV4 Format = dsml("deepseek-v4", dsmlBlockV4)

// isDSML reports a template that writes DSML.
func isDSML(src string) bool { return strings.Contains(src, dsmlToken) }

// isDeepSeekV32 reports a DSML template whose block is function_calls.
func isDeepSeekV32(src string) bool { return isDSML(src) && strings.Contains(src, dsmlBlockV32+">") }

// isDeepSeekV4 reports a DSML template whose block is tool_calls.
func isDeepSeekV4(src string) bool { return isDSML(src) && strings.Contains(src, "'"+dsmlBlockV4+">") }

// dsml is DSML with the block name its model writes; its parser reads
// either block. Each invoke is a region: the first opens at the block's
// tag, the next ones at their own tag, and the last one takes the
// block's closing tag.
func dsml(name, block string) *xmlCall {
	return &xmlCall{
		name:    name,
		markers: []string{dsmlOpen(block), dsmlClose(block), dsmlInvoke, dsmlInvokeEnd, dsmlParam, dsmlParamEnd, dsmlToken},
		opens:   append(slices.Clone(dsmlOpens), dsmlInvoke), call: dsmlInvoke, head: dsmlName, callEnd: dsmlInvokeEnd,
		listEnds: dsmlCloses,
		param:    dsmlParam, key: dsmlKey, paramEnd: dsmlParamEnd, value: dsmlValue,
		writeCall: func(fn string, params []grammar.Expr) grammar.Expr {
			return grammar.Seq(grammar.Lit(dsmlInvoke+` name="`+fn+"\">\n"), grammar.Seq(params...), grammar.Lit(dsmlInvokeEnd+"\n"))
		},
		// A string parameter as text (string="true"), any other as JSON
		// (string="false").
		writeParam: func(key string, types []string, value grammar.Expr) grammar.Expr {
			isString := "false"
			if slices.Equal(types, []string{"string"}) {
				isString = dsmlStringTrue
			}
			return grammar.Seq(grammar.Lit(dsmlParam+` name="`+key+`" string="`+isString+`">`), value, grammar.Lit(dsmlParamEnd+"\n"))
		},
		writeList: [2]string{dsmlOpen(block) + "\n", dsmlClose(block)},
		stop:      dsmlParamEnd,
	}
}

// dsmlOpens and dsmlCloses are the blocks' opening and closing tags, of
// both names.
var dsmlOpens, dsmlCloses = []string{dsmlOpen(dsmlBlockV32), dsmlOpen(dsmlBlockV4)}, []string{dsmlClose(dsmlBlockV32), dsmlClose(dsmlBlockV4)}

func dsmlOpen(block string) string  { return "<" + dsmlToken + block + ">" }
func dsmlClose(block string) string { return "</" + dsmlToken + block + ">" }

// dsmlName reads the function's name from an invoke's attributes at
// s[i:].
func dsmlName(s string, i int, _ bool) (name string, _ map[string]string, next, state int) {
	attrs, next, ok := dsmlAttrs(s, i)
	switch {
	case !ok || (next >= 0 && !validHead(attrs["name"])):
		return "", nil, 0, readBad
	case next < 0:
		return "", nil, 0, readMore // the tag is still arriving
	}
	return attrs["name"], nil, next, readDone
}

// dsmlKey reads a parameter's name and attributes at s[i:].
func dsmlKey(s string, i int, _ bool) (key string, attrs map[string]string, next, state int) {
	attrs, next, ok := dsmlAttrs(s, i)
	switch {
	case !ok || (next >= 0 && attrs["name"] == ""):
		return "", nil, 0, readBad
	case next < 0:
		return "", nil, 0, readMore
	}
	return attrs["name"], attrs, next, readDone
}

// dsmlValue is the JSON text of a parameter's value: its text as a
// string when the model said string="true", the JSON it wrote when it
// said "false"; typed by the schema (see typedValue) when that is not
// JSON or the model said neither.
func dsmlValue(text string, attrs map[string]string, types []string) string {
	switch attrs["string"] {
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
