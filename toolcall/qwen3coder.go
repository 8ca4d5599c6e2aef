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

// typedValue is the JSON text of a parameter's value written as text,
// whose schema allows types: the text as a JSON string, or the text itself
// when it is JSON of another allowed type. A parameter the schema does
// not declare (types nil) is a string; one it declares without a type
// (types empty) is any JSON.
func typedValue(text string, types []string) string {
	asString := func() string { return quote(text) }
	if types == nil || slices.Equal(types, []string{"string"}) {
		return asString()
	}
	t := strings.TrimSpace(text)
	var v any
	if json.Unmarshal([]byte(t), &v) != nil {
		return asString()
	}
	var got string
	switch x := v.(type) {
	case nil:
		got = "null"
	case bool:
		got = "boolean"
	case float64:
		got = "number"
		if x == float64(int64(x)) {
			got = "integer"
		}
	case string:
		got = "string"
	case []any:
		got = "array"
	case map[string]any:
		got = "object"
	}
	switch {
	case slices.Contains(types, got),
		got == "integer" && slices.Contains(types, "number"),
		!slices.Contains(types, "string"):
		if got == "string" {
			return t // a JSON string, quotes included
		}
		var b bytes.Buffer
		if json.Compact(&b, []byte(t)) == nil {
			return b.String()
		}
	}
	return asString()
}

// paramTypes reads the JSON types each parameter's schema allows, by
// tool: its "type" (a name or a list), the types of its "anyOf" or
// "oneOf" members, or those of its "enum" or "const" values; none (an
// empty list) when its schema does not say, any JSON then. A parameter
// the schema does not declare is not in the map.
func paramTypes(tools []wire.Tool) map[string]map[string][]string {
	out := map[string]map[string][]string{}
	for _, t := range tools {
		var params struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if json.Unmarshal(parameters(t), &params) != nil {
			continue
		}
		m := map[string][]string{}
		for name, raw := range params.Properties {
			m[name] = append([]string{}, schemaTypes(raw, 0)...)
		}
		out[t.Function.Name] = m
	}
	return out
}

// schemaTypes are the JSON types a schema allows, as far as its own
// keywords say (depth bounds nested anyOf).
func schemaTypes(raw json.RawMessage, depth int) []string {
	var s struct {
		Type  json.RawMessage   `json:"type"`
		AnyOf []json.RawMessage `json:"anyOf"`
		OneOf []json.RawMessage `json:"oneOf"`
		Enum  []json.RawMessage `json:"enum"`
		Const json.RawMessage   `json:"const"`
	}
	if depth > 8 || json.Unmarshal(raw, &s) != nil {
		return nil
	}
	var types []string
	var one string
	switch {
	case json.Unmarshal(s.Type, &one) == nil:
		types = []string{one}
	case json.Unmarshal(s.Type, &types) == nil && len(types) > 0:
	default:
		types = nil
		for _, m := range append(s.AnyOf, s.OneOf...) {
			types = append(types, schemaTypes(m, depth+1)...)
		}
		values := s.Enum
		if s.Const != nil {
			values = append(values, s.Const)
		}
		for _, v := range values {
			if t := jsonType(v); t != "" {
				types = append(types, t)
			}
		}
	}
	slices.Sort(types)
	return slices.Compact(types)
}

// jsonType is the JSON type of a value's text.
func jsonType(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return ""
	}
	switch v[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
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

// property is one property of an object schema.
type property struct {
	name   string
	schema json.RawMessage
}

// orderedProperties reads an object schema's properties in the order
// they are written, and which are required.
func orderedProperties(schema json.RawMessage) ([]property, map[string]bool, error) {
	var s struct {
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", grammar.ErrInvalidSchema, err)
	}
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	var props []property
	if len(s.Properties) == 0 || string(s.Properties) == "null" {
		return nil, required, nil
	}
	dec := json.NewDecoder(bytes.NewReader(s.Properties))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("%w: properties is not an object", grammar.ErrInvalidSchema)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", grammar.ErrInvalidSchema, err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, fmt.Errorf("%w: %v", grammar.ErrInvalidSchema, err)
		}
		props = append(props, property{name: tok.(string), schema: raw})
	}
	return props, required, nil
}

// quote is s as a JSON string, with <, > and & as they are.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}
