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
}

// A member is one key of a JSON object.
type member struct {
	key string
	val *value
}

// get returns the member named key, or nil. With duplicate keys the last
// wins, as in encoding/json.
func (v *value) get(key string) *value {
	for i := len(v.obj) - 1; i >= 0; i-- {
		if v.obj[i].key == key {
			return v.obj[i].val
		}
	}
	return nil
}

// parseJSON parses exactly one JSON value from data.
func parseJSON(data []byte) (*value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the top-level value")
	}
	return v, nil
}

func parseValue(dec *json.Decoder, depth int) (*value, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	tok, err := dec.Token()
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
	for dec.More() {
		var key string
		if v.kind == kindObject {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key, _ = k.(string) // the decoder guarantees a string key
		}
		elem, err := parseValue(dec, depth+1)
		if err != nil {
			return nil, err
		}
		if v.kind == kindObject {
			v.obj = append(v.obj, member{key, elem})
		} else {
			v.arr = append(v.arr, elem)
		}
	}
	if _, err := dec.Token(); err != nil { // closing delimiter
		return nil, err
	}
	return v, nil
}

// encode writes v as compact JSON, the text a literal in the grammar must
// match.
func (v *value) encode(b *strings.Builder) {
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
				b.WriteByte(',')
			}
			e.encode(b)
		}
		b.WriteByte(']')
	case kindObject:
		b.WriteByte('{')
		for i, m := range v.obj {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(quoteJSON(m.key))
			b.WriteByte(':')
			m.val.encode(b)
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
