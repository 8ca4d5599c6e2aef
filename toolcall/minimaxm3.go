package toolcall

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/corral-llm/corral/grammar"
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
var MiniMaxM3 Format = &xmlCall{
	name:    "minimax-m3",
	markers: []string{mm3NS},
	opens:   []string{mm3Section, mm3Invoke}, call: mm3Invoke, head: quotedName, callEnd: mm3InvokeEnd,
	listEnds: []string{mm3SectionEnd}, openList: true,
	param: mm3NS + "<", nested: mm3Argument,
	endTagCut: true,
	writeCall: func(name string, params []grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(mm3Invoke+name+`">`), grammar.Seq(params...), grammar.Lit(mm3InvokeEnd+"\n"))
	},
	writeParam: func(key string, _ []string, value grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(mm3NS+"<"+key+">"), value, grammar.Lit(mm3NS+"</"+key+">"))
	},
	writeList: [2]string{mm3Section + "\n", mm3SectionEnd},
	stop:      mm3NS,
}

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

// mm3Argument reads an argument's element at s[i:], of a call whose
// parameters have the schema params.
func mm3Argument(s string, i int, params *xmlSchema) (key, value string, next, state int) {
	return mm3Element(s, i, params, 0)
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
	case e < 0 && len(s)-i > maxNameLen:
		return "", "", 0, readBad
	case e < 0:
		return "", "", 0, readMore
	}
	key = s[i : i+e]
	if !validName(key, maxNameLen) || key[0] == '/' {
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
