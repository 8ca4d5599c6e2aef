package toolcall

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// Grammar pieces of the formats that write each parameter as an element
// of their markup, its value as text when the parameter is a string and
// as JSON otherwise (GLM, MiniMax, Kimi K3), as the parsers read them
// back (typedValue).

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

// textOrJSON is the grammar of a parameter's value that is its text when
// the schema allows only strings (one of its enum's, when it has one,
// else any text without stop), and JSON following its schema otherwise.
func textOrJSON(b *grammar.Builder, params json.RawMessage, p property, types []string, stop string) (grammar.Expr, error) {
	if !slices.Equal(types, []string{"string"}) {
		return b.Schema(params, propertyPointer(p.name))
	}
	return textValue(b, p, stop), nil
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
