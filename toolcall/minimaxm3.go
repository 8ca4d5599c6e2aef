package toolcall

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// MiniMaxM3 is MiniMax M3's format: XML like MiniMax M2's, each tag
// after the namespace token ]<]minimax[>[ (written NS here), an element
// per argument named after it, objects and lists as nested elements (a
// list's items as <item>):
//
//	NS<tool_call>
//	NS<invoke name="get_weather">NS<city>ParisNS</city>NS<where>NS<lat>48.8NS</lat>NS</where>NS</invoke>
//	NS</tool_call>
//
// Scalars are text, typed by the schema of where they stand (as
// Qwen3Coder's are); nested elements make an object, or a list where the
// schema says so (or, without a schema, where they are all <item>). An
// element whose text is JSON of the type its schema wants reads as that
// JSON, as the grammar writes objects and lists.
var MiniMaxM3 Format = minimaxM3Format{}

// isMiniMaxM3 reports a template that writes MiniMax's namespace token.
func isMiniMaxM3(src string) bool { return strings.Contains(src, mm3NS) }

// MiniMax M3's markup.
const (
	mm3NS         = "]<]minimax[>["
	mm3Section    = mm3NS + "<tool_call>"
	mm3SectionEnd = mm3NS + "</tool_call>"
	mm3Invoke     = mm3NS + `<invoke name="`
	mm3InvokeEnd  = mm3NS + "</invoke>"
	mm3MaxDepth   = 32 // elements nested deeper are not markup
)

type minimaxM3Format struct{}

// Name is the format's name.
func (minimaxM3Format) Name() string { return "minimax-m3" }

// Markers are the namespace token, special in MiniMax's vocabulary.
func (minimaxM3Format) Markers() []string { return []string{mm3NS} }

// Parser returns a parser that types values by the tools' schemas.
func (minimaxM3Format) Parser(tools []wire.Tool, max int) Parser {
	sc := &minimaxM3Scanner{schemas: map[string]*xmlSchema{}}
	for _, t := range tools {
		sc.schemas[t.Function.Name] = newXMLSchema(parameters(t), 0)
	}
	return newMarkupParser(sc, []string{mm3Section, mm3Invoke}, max)
}

// xmlSchema is what a schema says of the values of nested elements: the
// JSON types it allows (none: any), and its properties' and items'
// schemas.
type xmlSchema struct {
	types []string
	props map[string]*xmlSchema
	items *xmlSchema
}

// newXMLSchema reads a schema, to depth levels of nesting.
func newXMLSchema(raw json.RawMessage, depth int) *xmlSchema {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Items      json.RawMessage            `json:"items"`
	}
	if depth > mm3MaxDepth || json.Unmarshal(raw, &s) != nil {
		return &xmlSchema{types: []string{}}
	}
	x := &xmlSchema{types: append([]string{}, schemaTypes(raw, 0)...)}
	if len(s.Properties) > 0 {
		x.props = map[string]*xmlSchema{}
		for k, v := range s.Properties {
			x.props[k] = newXMLSchema(v, depth+1)
		}
	}
	if len(s.Items) > 0 {
		x.items = newXMLSchema(s.Items, depth+1)
	}
	return x
}

// child is the schema of a nested element named key: nil when the schema
// does not declare it (a string, then).
func (x *xmlSchema) child(key string) *xmlSchema {
	switch {
	case x == nil:
		return nil
	case x.items != nil && key == "item" && !slices.Contains(x.types, "object"):
		return x.items
	case x.props != nil:
		return x.props[key]
	case len(x.types) == 0 || slices.Contains(x.types, "object") || slices.Contains(x.types, "array"):
		return &xmlSchema{types: []string{}} // undeclared: any JSON
	}
	return nil
}

// typesOf are the JSON types x allows: nil (a string) for no schema.
func (x *xmlSchema) typesOf() []string {
	if x == nil {
		return nil
	}
	return x.types
}

// minimaxM3Scanner reads one <invoke> element, after the block's start
// tag or after the <invoke> of a block still open.
type minimaxM3Scanner struct {
	schemas map[string]*xmlSchema // by tool
	invokeBlock
}

func (m *minimaxM3Scanner) scan(marker, s string, end, cut bool) callScan {
	var r callScan
	i := 0
	if marker == mm3Section {
		var st int
		if i, st = firstCall(s, mm3Invoke); st != readDone {
			r.bad = st == readBad
			return r
		}
	} else if !m.open {
		r.bad = true // an <invoke> outside a block is text
		return r
	}
	name, i, st := quotedName(s, i)
	if st != readDone {
		r.bad = st == readBad
		return r
	}
	r.name = name
	schema := m.schemas[name]
	var args argsObject
	r.args = args.text()
	for {
		i = skipSpace(s, i)
		rest := s[i:]
		switch {
		case strings.HasPrefix(rest, mm3InvokeEnd):
			r.args, r.complete = args.whole(), true
			return m.close(s, i+len(mm3InvokeEnd), mm3SectionEnd, end, r)
		case strings.HasPrefix(mm3InvokeEnd, rest) || strings.HasPrefix(mm3NS+"<", rest):
			return r // a tag is arriving, or broke off
		case !strings.HasPrefix(rest, mm3NS+"<"):
			r.bad = true
			return r
		}
		key, value, j, st := mm3Element(s, i, schema, 0)
		if st != readDone {
			r.bad = st == readBad
			return r
		}
		r.args = args.add(key, value)
		i = j
	}
}

// mm3Element reads the element NS<KEY>...NS</KEY> at s[i:], whose parent
// has the schema parent, and returns its key, its value's JSON text and
// the index after it.
func mm3Element(s string, i int, parent *xmlSchema, depth int) (key, value string, next, state int) {
	if depth > mm3MaxDepth {
		return "", "", 0, readBad
	}
	i += len(mm3NS + "<")
	e := strings.IndexByte(s[i:], '>')
	switch {
	case e < 0 && len(s)-i > mmMaxName:
		return "", "", 0, readBad
	case e < 0:
		return "", "", 0, readMore
	}
	key = s[i : i+e]
	if !validName(key, mmMaxName) || key[0] == '/' {
		return "", "", 0, readBad
	}
	schema := parent.child(key)
	closing := mm3NS + "</" + key + ">"
	i += e + 1
	rest := s[i:]
	switch nested := s[skipSpace(s, i):]; {
	case strings.HasPrefix(nested, mm3NS+"<") && !strings.HasPrefix(nested, mm3NS+"</"):
		// Nested elements: an object or a list.
		var names, values []string
		for {
			i = skipSpace(s, i)
			rest = s[i:]
			switch {
			case strings.HasPrefix(rest, closing):
				return key, mm3Compound(schema, names, values), i + len(closing), readDone
			case strings.HasPrefix(closing, rest) || strings.HasPrefix(mm3NS+"<", rest):
				return "", "", 0, readMore
			case !strings.HasPrefix(rest, mm3NS+"<") || strings.HasPrefix(rest, mm3NS+"</"):
				return "", "", 0, readBad
			}
			k, v, j, st := mm3Element(s, i, schema, depth+1)
			if st != readDone {
				return "", "", 0, st
			}
			names, values = append(names, k), append(values, v)
			i = j
		}
	case strings.HasPrefix(mm3NS+"<", nested):
		return "", "", 0, readMore
	}
	t := strings.Index(rest, mm3NS)
	if t < 0 {
		return "", "", 0, readMore
	}
	switch after := rest[t:]; {
	case strings.HasPrefix(after, closing):
	case strings.HasPrefix(closing, after):
		return "", "", 0, readMore
	default:
		return "", "", 0, readBad
	}
	text := rest[:t]
	types := schema.typesOf()
	switch {
	case text == "" && len(types) == 1 && types[0] == "object":
		value = "{}"
	case text == "" && len(types) == 1 && types[0] == "array":
		value = "[]"
	default:
		value = typedValue(text, types)
	}
	return key, value, i + t + len(closing), readDone
}

// mm3Compound is the JSON of nested elements: a list when the schema
// wants one (or, without a schema, when they are all <item>), an object
// otherwise.
func mm3Compound(schema *xmlSchema, names, values []string) string {
	list := !slices.ContainsFunc(names, func(n string) bool { return n != "item" })
	if types := schema.typesOf(); len(types) > 0 {
		list = slices.Contains(types, "array") && (!slices.Contains(types, "object") || list)
	}
	var b strings.Builder
	open, close := byte('{'), byte('}')
	if list {
		open, close = '[', ']'
	}
	b.WriteByte(open)
	for i, v := range values {
		if i > 0 {
			b.WriteString(", ")
		}
		if !list {
			b.WriteString(quote(names[i]))
			b.WriteString(": ")
		}
		b.WriteString(v)
	}
	b.WriteByte(close)
	return b.String()
}

// Grammar forces calls in MiniMax M3's markup, in one block: each tool's
// required parameters in the order of its schema, then its optional
// ones. A string parameter's value is its text; any other's is the JSON
// its schema describes, which the parser reads too.
func (minimaxM3Format) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	types := paramTypes(tools)
	calls := make([]grammar.Expr, len(tools))
	for i, t := range tools {
		name := t.Function.Name
		parts, err := paramElements(t, func(p property, params json.RawMessage) (grammar.Expr, error) {
			value, err := textOrJSON(b, params, p, types[name][p.name], mm3NS)
			if err != nil {
				return grammar.Expr{}, err
			}
			return grammar.Seq(grammar.Lit(mm3NS+"<"+p.name+">"), value, grammar.Lit(mm3NS+"</"+p.name+">")), nil
		})
		if err != nil {
			return "", fmt.Errorf("tool %q: parameters: %w", name, err)
		}
		call := append([]grammar.Expr{grammar.Lit(mm3Invoke + name + `">`)}, parts...)
		calls[i] = grammar.Seq(append(call, grammar.Lit(mm3InvokeEnd+"\n"))...)
	}
	call := b.Rule("call", grammar.Alt(calls...))
	if parallel {
		call = grammar.Repeat(call, 1, -1)
	}
	return b.Grammar(grammar.Seq(grammar.Lit(mm3Section+"\n"), call, grammar.Lit(mm3SectionEnd)))
}
