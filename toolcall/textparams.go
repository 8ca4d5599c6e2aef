package toolcall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// The parameters of the formats that write each parameter as an element
// of their markup, its value as text when the parameter is a string and
// as JSON otherwise (Qwen3-Coder, GLM, MiniMax, Kimi K3, DSML, Hy3,
// MiniCPM, Gemma 4): the types their schemas allow (paramTypes), the JSON
// a value written as text reads as (typedValue), the arguments object the
// parsers build (argsObject), and the grammar pieces that write them as
// the parsers read them back.

// How far a piece of markup (a name, a value) was read.
const (
	readDone = iota // it is whole
	readMore        // the text ends inside it
	readBad         // it is not what was expected
)

// paramElements returns the grammar of a tool's parameters, each written
// by elem: the required ones in the order of the schema, then the
// optional ones, each optional.
func paramElements(t wire.Tool, elem func(p property, params json.RawMessage) (grammar.Expr, error)) ([]grammar.Expr, error) {
	params := parameters(t)
	props, required, err := orderedProperties(params)
	if err != nil {
		return nil, err
	}
	var parts []grammar.Expr
	for _, req := range []bool{true, false} {
		for _, p := range props {
			if required[p.name] != req {
				continue
			}
			e, err := elem(p, params)
			if err != nil {
				return nil, err
			}
			if !req {
				e = grammar.Opt(e)
			}
			parts = append(parts, e)
		}
	}
	return parts, nil
}

// textValue is the grammar of a string parameter written as text: one of
// its enum's values (or its const), else any text without stop.
func textValue(b *grammar.Builder, p property, stop string) grammar.Expr {
	if e, ok := enumValue(p); ok {
		return e
	}
	return b.TextExcluding(stop)
}

// enumValue is the grammar of a string parameter whose schema lists its
// values (an enum, or a const): one of them. ok is false when it lists
// none.
func enumValue(p property) (e grammar.Expr, ok bool) {
	var s struct {
		Enum  []string `json:"enum"`
		Const *string  `json:"const"`
	}
	if json.Unmarshal(p.schema, &s) != nil || (len(s.Enum) == 0 && s.Const == nil) {
		return grammar.Expr{}, false
	}
	values := s.Enum
	if s.Const != nil {
		values = []string{*s.Const}
	}
	alts := make([]grammar.Expr, len(values))
	for i, v := range values {
		alts[i] = grammar.Lit(v)
	}
	return grammar.Alt(alts...), true
}

// argsObject builds a call's arguments, read one parameter at a time,
// as the JSON text of an object.
type argsObject struct{ b strings.Builder }

// text is the arguments as far as they are read: the object's text up to
// its last member, without the closing brace.
func (a *argsObject) text() string {
	if a.b.Len() == 0 {
		return "{"
	}
	return a.b.String()
}

// add adds the member key, whose value is the JSON text value, and
// returns the arguments as far as they are read.
func (a *argsObject) add(key, value string) string {
	if a.b.Len() == 0 {
		a.b.WriteByte('{')
	} else {
		a.b.WriteString(", ")
	}
	a.b.WriteString(quote(key))
	a.b.WriteString(": ")
	a.b.WriteString(value)
	return a.b.String()
}

// whole is the complete arguments, the object closed.
func (a *argsObject) whole() string { return a.text() + "}" }

// propertyPointer is the JSON pointer to a property of an object schema.
func propertyPointer(name string) string {
	return "#/properties/" + url.PathEscape(strings.NewReplacer("~", "~0", "/", "~1").Replace(name))
}

// digits matches a decimal number, as markup writes a call's index.
func digits() grammar.Expr {
	d := make([]grammar.Expr, 10)
	for i := range d {
		d[i] = grammar.Lit(string(rune('0' + i)))
	}
	return grammar.Repeat(grammar.Alt(d...), 1, 4)
}

// validName reports whether s may be a function's (or a parameter's)
// name written in markup: not empty, at most max bytes, without
// whitespace, quotes or angle brackets.
func validName(s string, max int) bool {
	return s != "" && len(s) <= max && !strings.ContainsAny(s, " \t\r\n<>\"{}")
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
