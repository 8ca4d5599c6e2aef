package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// maxDepth bounds the nesting of a schema document.
const maxDepth = 256

// A kind is the JSON type of a value.
type kind uint8

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

func (k kind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

// A value is a parsed JSON value that, unlike map[string]any, keeps the order
// of object members: property order decides the order the model writes keys.
type value struct {
	kind    kind
	boolean bool
	number  json.Number
	str     string
	arr     []*value
	obj     []member
	// index finds the members of a large object by key (see get); nil
	// for small objects, which get scans.
	index map[string]int
}

// A member is one key of a JSON object.
type member struct {
	key string
	val *value
}

// smallObject is the most members an object has without an index: get
// scans them.
const smallObject = 8

// get returns the member named key, or nil. An object's keys are unique
// (parseJSON keeps the last of duplicate keys, as encoding/json does), and
// get takes constant time: a scan of at most smallObject members, else a
// map lookup.
func (v *value) get(key string) *value {
	if v.index != nil {
		if i, ok := v.index[key]; ok {
			return v.obj[i].val
		}
		return nil
	}
	for _, m := range v.obj {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// A jsonParser reads one schema document, counting what SchemaLimits bound
// as it goes so that a document over them is refused before it is read
// whole.
type jsonParser struct {
	dec   *json.Decoder
	lim   SchemaLimits
	nodes int // values read
	props int // members of objects under "properties" keys
}

// parseJSON parses exactly one JSON value from data within lim (a
// *SchemaLimitError when over).
func parseJSON(data []byte, lim SchemaLimits) (*value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	p := &jsonParser{dec: dec, lim: lim.withDefaults()}
	v, err := p.value(0, false)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the top-level value")
	}
	return v, nil
}

// value reads one value; props says it is the value of a "properties" key,
// whose members count against SchemaLimits.MaxProperties as they are read.
func (p *jsonParser) value(depth int, props bool) (*value, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	if p.nodes++; p.nodes > p.lim.MaxNodes {
		return nil, &SchemaLimitError{Limit: LimitNodes, Max: p.lim.MaxNodes, Got: p.nodes}
	}
	tok, err := p.dec.Token()
	if err == io.EOF {
		return nil, io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &value{kind: kindNull}, nil
	case bool:
		return &value{kind: kindBool, boolean: t}, nil
	case json.Number:
		return &value{kind: kindNumber, number: t}, nil
	case string:
		return &value{kind: kindString, str: t}, nil
	}
	v := &value{kind: kindArray}
	if tok == json.Delim('{') {
		v.kind = kindObject
	}
	for p.dec.More() {
		var key string
		if v.kind == kindObject {
			k, err := p.dec.Token()
			if err != nil {
				return nil, err
			}
			key, _ = k.(string) // the decoder guarantees a string key
			if props {
				if p.props++; p.props > p.lim.MaxProperties {
					return nil, &SchemaLimitError{Limit: LimitProperties, Max: p.lim.MaxProperties, Got: p.props}
				}
			}
		}
		elem, err := p.value(depth+1, v.kind == kindObject && key == "properties")
		if err != nil {
			return nil, err
		}
		if v.kind == kindArray {
			v.arr = append(v.arr, elem)
			continue
		}
		v.obj = append(v.obj, member{key, elem})
	}
	if _, err := p.dec.Token(); err != nil { // closing delimiter
		return nil, err
	}
	if v.kind == kindObject {
		v.unique()
	}
	return v, nil
}

// unique drops the members of an object whose key comes again later, so
// that the last one stands where it was written, as encoding/json keeps
// the last of duplicate keys; a large object gets its index. Linear time.
func (v *value) unique() {
	if len(v.obj) <= smallObject {
		out := v.obj[:0]
		for i, m := range v.obj {
			later := false
			for _, n := range v.obj[i+1:] {
				later = later || n.key == m.key
			}
			if !later {
				out = append(out, m)
			}
		}
		v.obj = out
		return
	}
	last := make(map[string]int, len(v.obj))
	for i, m := range v.obj {
		last[m.key] = i
	}
	out := v.obj[:0]
	for i, m := range v.obj {
		if last[m.key] == i {
			last[m.key] = len(out)
			out = append(out, m)
		}
	}
	v.obj = out
	v.index = last
}

// encode writes v as JSON with comma between items and members and colon
// between a key and its value, no other whitespace: the text a literal in
// the grammar must match.
func (v *value) encode(b *strings.Builder, comma, colon string) {
	switch v.kind {
	case kindNull:
		b.WriteString("null")
	case kindBool:
		fmt.Fprint(b, v.boolean)
	case kindNumber:
		b.WriteString(v.number.String())
	case kindString:
		b.WriteString(quoteJSON(v.str))
	case kindArray:
		b.WriteByte('[')
		for i, e := range v.arr {
			if i > 0 {
				b.WriteString(comma)
			}
			e.encode(b, comma, colon)
		}
		b.WriteByte(']')
	case kindObject:
		b.WriteByte('{')
		for i, m := range v.obj {
			if i > 0 {
				b.WriteString(comma)
			}
			b.WriteString(quoteJSON(m.key))
			b.WriteString(colon)
			m.val.encode(b, comma, colon)
		}
		b.WriteByte('}')
	}
}

// quoteJSON returns s as a JSON string, leaving non-ASCII and HTML
// characters raw as a model would write them.
func quoteJSON(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // encoding a string cannot fail
	return strings.TrimSuffix(b.String(), "\n")
}
