package grammar

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// maxMinCount bounds minItems and minLength: each required repetition is
// spelled out in the sampler's grammar.
const maxMinCount = 10000

// A schema is one decoded JSON Schema with its keywords type-checked.
type schema struct {
	ptr string // JSON pointer of the schema in the document, "#/..."

	isBool  bool // true or false schema
	boolVal bool

	ref   string
	types []string // nil: any type
	enum  []*value // nil: no enum
	konst *value

	props    []property
	required []string
	addProps *schema // nil: absent

	items       *schema // nil: absent
	prefixItems []*schema
	minItems    int
	maxItems    int // negative: none

	minLength int
	maxLength int // negative: none
	format    string
	pattern   string

	minimum, maximum *bound

	anyOf []*schema
	allOf []*schema

	// constraints counts keywords other than $ref, anyOf, oneOf and allOf
	// that restrict values, to tell a bare combinator from one with
	// sibling keywords.
	constraints int
}

// A property is one entry of "properties".
type property struct {
	name   string
	schema *schema
}

// A bound is a numeric minimum or maximum.
type bound struct {
	v         float64
	exclusive bool
}

// typeNames are the values "type" may take.
var typeNames = []string{"null", "boolean", "object", "array", "number", "integer", "string"}

// invalid returns an error wrapping ErrInvalidSchema for the schema location
// ptr.
func invalid(ptr, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidSchema, ptr, fmt.Sprintf(format, args...))
}

// pointerToken escapes a key for use in a JSON pointer.
func pointerToken(key string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}

// newSchema returns a schema at ptr without constraints.
func newSchema(ptr string) *schema {
	return &schema{ptr: ptr, maxItems: -1, maxLength: -1}
}

// decodeSchema type-checks the keywords of v, found at ptr, and decodes its
// subschemas. Definitions are decoded when a $ref reaches them.
func decodeSchema(v *value, ptr string) (*schema, error) {
	s := newSchema(ptr)
	switch v.kind {
	case kindBool:
		s.isBool, s.boolVal = true, v.boolean
		return s, nil
	case kindObject:
	default:
		return nil, invalid(ptr, "a schema must be an object or a boolean, not %s", v.kind)
	}
	for _, m := range v.obj {
		if err := s.decodeKeyword(m.key, m.val, v, ptr+"/"+pointerToken(m.key)); err != nil {
			return nil, err
		}
	}
	for _, b := range []struct {
		key   string
		bound *bound
	}{{"exclusiveMinimum", s.minimum}, {"exclusiveMaximum", s.maximum}} {
		if e := v.get(b.key); e != nil && e.kind == kindBool && e.boolean && b.bound != nil {
			b.bound.exclusive = true
		}
	}
	if s.maxItems >= 0 && s.minItems > s.maxItems {
		return nil, invalid(ptr, "minItems %d is greater than maxItems %d", s.minItems, s.maxItems)
	}
	if s.maxLength >= 0 && s.minLength > s.maxLength {
		return nil, invalid(ptr, "minLength %d is greater than maxLength %d", s.minLength, s.maxLength)
	}
	return s, nil
}

// decodeKeyword decodes the keyword key with value v of the schema object
// parent.
func (s *schema) decodeKeyword(key string, v, parent *value, ptr string) error {
	var err error
	switch key {
	case "$ref":
		s.ref, err = wantString(v, ptr)
		return err
	case "anyOf", "oneOf":
		if parent.get("anyOf") != nil && parent.get("oneOf") != nil {
			return invalid(ptr, "anyOf and oneOf in one schema are not supported")
		}
		s.anyOf, err = schemaList(v, ptr)
		return err
	case "allOf":
		s.allOf, err = schemaList(v, ptr)
		return err
	case "$defs", "definitions":
		if v.kind != kindObject {
			return invalid(ptr, "want an object, got %s", v.kind)
		}
		return nil
	case "type":
		s.types, err = decodeTypes(v, ptr)
	case "enum":
		if v.kind != kindArray || len(v.arr) == 0 {
			return invalid(ptr, "want a non-empty array")
		}
		s.enum = v.arr
	case "const":
		s.konst = v
	case "properties":
		if v.kind != kindObject {
			return invalid(ptr, "want an object, got %s", v.kind)
		}
		for _, m := range v.obj {
			ps, err := decodeSchema(m.val, ptr+"/"+pointerToken(m.key))
			if err != nil {
				return err
			}
			s.props = slices.DeleteFunc(s.props, func(p property) bool { return p.name == m.key })
			s.props = append(s.props, property{m.key, ps})
		}
	case "required":
		if v.kind != kindArray {
			return invalid(ptr, "want an array of strings, got %s", v.kind)
		}
		for i, e := range v.arr {
			name, err := wantString(e, ptr+"/"+strconv.Itoa(i))
			if err != nil {
				return err
			}
			if !slices.Contains(s.required, name) {
				s.required = append(s.required, name)
			}
		}
	case "additionalProperties":
		s.addProps, err = decodeSchema(v, ptr)
	case "items":
		if v.kind == kindArray { // draft 4 to 7 tuple form
			if parent.get("prefixItems") == nil {
				s.prefixItems, err = schemaList(v, ptr)
				if err == nil {
					s.items, err = optionalSchema(parent, "additionalItems", strings.TrimSuffix(ptr, "items")+"additionalItems")
				}
			}
			break
		}
		s.items, err = decodeSchema(v, ptr)
	case "prefixItems":
		s.prefixItems, err = schemaList(v, ptr)
	case "minItems":
		s.minItems, err = wantCount(v, ptr, true)
	case "maxItems":
		s.maxItems, err = wantCount(v, ptr, false)
	case "minLength":
		s.minLength, err = wantCount(v, ptr, true)
	case "maxLength":
		s.maxLength, err = wantCount(v, ptr, false)
	case "format":
		s.format, err = wantString(v, ptr)
	case "pattern":
		s.pattern, err = wantString(v, ptr)
	case "minimum", "exclusiveMinimum":
		if v.kind == kindBool { // draft 4, applied by decodeSchema
			return nil
		}
		s.minimum, err = tighterBound(s.minimum, key == "exclusiveMinimum", v, ptr, 1)
	case "maximum", "exclusiveMaximum":
		if v.kind == kindBool {
			return nil
		}
		s.maximum, err = tighterBound(s.maximum, key == "exclusiveMaximum", v, ptr, -1)
	default:
		return nil // annotations and unsupported keywords
	}
	s.constraints++
	return err
}

// optionalSchema decodes the member key of parent if present.
func optionalSchema(parent *value, key, ptr string) (*schema, error) {
	v := parent.get(key)
	if v == nil {
		return nil, nil
	}
	return decodeSchema(v, ptr)
}

func wantString(v *value, ptr string) (string, error) {
	if v.kind != kindString {
		return "", invalid(ptr, "want a string, got %s", v.kind)
	}
	return v.str, nil
}

// schemaList decodes a non-empty array of schemas.
func schemaList(v *value, ptr string) ([]*schema, error) {
	if v.kind != kindArray || len(v.arr) == 0 {
		return nil, invalid(ptr, "want a non-empty array of schemas")
	}
	out := make([]*schema, len(v.arr))
	for i, e := range v.arr {
		s, err := decodeSchema(e, ptr+"/"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

func decodeTypes(v *value, ptr string) ([]string, error) {
	list := []*value{v}
	if v.kind == kindArray {
		if len(v.arr) == 0 {
			return nil, invalid(ptr, "want a non-empty array of type names")
		}
		list = v.arr
	}
	var types []string
	for _, e := range list {
		if e.kind != kindString {
			return nil, invalid(ptr, "want a type name or an array of them, got %s", e.kind)
		}
		if !slices.Contains(typeNames, e.str) {
			return nil, invalid(ptr, "unknown type %q", e.str)
		}
		if !slices.Contains(types, e.str) {
			types = append(types, e.str)
		}
	}
	return types, nil
}

// wantCount decodes a non-negative integer. Large counts are capped: a
// maximum that big is no limit, a minimum that big is refused.
func wantCount(v *value, ptr string, isMin bool) (int, error) {
	f, err := wantNumber(v, ptr)
	if err != nil {
		return 0, err
	}
	if f < 0 || f != math.Trunc(f) {
		return 0, invalid(ptr, "want a non-negative integer, got %s", v.number)
	}
	if f > maxMinCount {
		if isMin {
			return 0, invalid(ptr, "%s is above the supported %d", v.number, maxMinCount)
		}
		return -1, nil
	}
	return int(f), nil
}

func wantNumber(v *value, ptr string) (float64, error) {
	if v.kind != kindNumber {
		return 0, invalid(ptr, "want a number, got %s", v.kind)
	}
	f, err := strconv.ParseFloat(v.number.String(), 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, invalid(ptr, "number %s is out of range", v.number)
	}
	return f, nil
}

// tighterBound decodes a bound from v and returns whichever of it and prev
// is tighter; sign is 1 for a minimum and -1 for a maximum.
func tighterBound(prev *bound, exclusive bool, v *value, ptr string, sign float64) (*bound, error) {
	f, err := wantNumber(v, ptr)
	if err != nil {
		return nil, err
	}
	b := &bound{f, exclusive}
	if prev != nil && (sign*prev.v > sign*f || prev.v == f && prev.exclusive) {
		return prev, nil
	}
	return b, nil
}
