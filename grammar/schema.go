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
	ptr *path // JSON pointer of the schema in the document, "#/..."

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
func invalid(ptr *path, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidSchema, ptr, fmt.Sprintf(format, args...))
}

// A path is a JSON pointer into the schema document ("#/a/b"), built a
// token at a time: a schema shares its ancestors' path rather than copy
// it, so that the pointers of deep schemas take memory linear in the
// document.
type path struct {
	parent *path
	token  string // unescaped; for a root, its whole pointer ("#", "#/$defs/a")
}

// rootPath is the document's root, "#".
var rootPath = &path{token: "#"}

// child returns the path of tokens below p.
func (p *path) child(tokens ...string) *path {
	for _, t := range tokens {
		p = &path{parent: p, token: t}
	}
	return p
}

// String writes the pointer, its tokens escaped.
func (p *path) String() string {
	var toks []string
	for ; p.parent != nil; p = p.parent {
		toks = append(toks, pointerToken(p.token))
	}
	var b strings.Builder
	b.WriteString(p.token)
	for i := len(toks) - 1; i >= 0; i-- {
		b.WriteByte('/')
		b.WriteString(toks[i])
	}
	return b.String()
}

// last is the pointer's last token as written in it, a base for rule
// names.
func (p *path) last() string {
	if p.parent == nil {
		return lastToken(p.token)
	}
	return pointerToken(p.token)
}

// pointerEscapes escapes a key for a JSON pointer.
var pointerEscapes = strings.NewReplacer("~", "~0", "/", "~1")

// pointerToken escapes a key for use in a JSON pointer.
func pointerToken(key string) string { return pointerEscapes.Replace(key) }

// newSchema returns a schema at ptr without constraints.
func newSchema(ptr *path) *schema {
	return &schema{ptr: ptr, maxItems: -1, maxLength: -1}
}

// A decoder decodes the schemas of one document. Each JSON value is
// decoded once, however many $refs and subschemas lead to it: decoding
// takes time linear in the document.
type decoder struct {
	done map[*value]*schema
	work int // members, required names and types decoded
}

func newDecoder() *decoder { return &decoder{done: map[*value]*schema{}} }

// schema type-checks the keywords of v, found at ptr, and decodes its
// subschemas. Definitions are decoded when a $ref reaches them.
func (d *decoder) schema(v *value, ptr *path) (*schema, error) {
	if s, ok := d.done[v]; ok {
		return s, nil
	}
	s := newSchema(ptr)
	switch v.kind {
	case kindBool:
		s.isBool, s.boolVal = true, v.boolean
		d.done[v] = s
		return s, nil
	case kindObject:
	default:
		return nil, invalid(ptr, "a schema must be an object or a boolean, not %s", v.kind)
	}
	for _, m := range v.obj {
		d.work++
		if err := d.keyword(s, m.key, m.val, v, ptr.child(m.key)); err != nil {
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
	d.done[v] = s
	return s, nil
}

// keyword decodes the keyword key with value v of the schema object
// parent into s. An object's keys are unique, so each keyword comes once.
func (d *decoder) keyword(s *schema, key string, v, parent *value, ptr *path) error {
	var err error
	switch key {
	case "$ref":
		s.ref, err = wantString(v, ptr)
		return err
	case "anyOf", "oneOf":
		if parent.get("anyOf") != nil && parent.get("oneOf") != nil {
			return invalid(ptr, "anyOf and oneOf in one schema are not supported")
		}
		s.anyOf, err = d.list(v, ptr)
		return err
	case "allOf":
		s.allOf, err = d.list(v, ptr)
		return err
	case "$defs", "definitions":
		if v.kind != kindObject {
			return invalid(ptr, "want an object, got %s", v.kind)
		}
		return nil
	case "type":
		s.types, err = d.types(v, ptr)
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
		s.props = make([]property, 0, len(v.obj))
		for _, m := range v.obj { // unique keys
			d.work++
			ps, err := d.schema(m.val, ptr.child(m.key))
			if err != nil {
				return err
			}
			s.props = append(s.props, property{m.key, ps})
		}
	case "required":
		if v.kind != kindArray {
			return invalid(ptr, "want an array of strings, got %s", v.kind)
		}
		seen := make(map[string]bool, len(v.arr))
		for i, e := range v.arr {
			d.work++
			name, err := wantString(e, ptr.child(strconv.Itoa(i)))
			if err != nil {
				return err
			}
			if !seen[name] {
				seen[name] = true
				s.required = append(s.required, name)
			}
		}
	case "additionalProperties":
		s.addProps, err = d.schema(v, ptr)
	case "items":
		if v.kind == kindArray { // draft 4 to 7 tuple form
			if parent.get("prefixItems") == nil {
				s.prefixItems, err = d.list(v, ptr)
				if err == nil {
					s.items, err = d.optional(parent, "additionalItems", ptr.parent.child("additionalItems"))
				}
			}
			break
		}
		s.items, err = d.schema(v, ptr)
	case "prefixItems":
		s.prefixItems, err = d.list(v, ptr)
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

// optional decodes the member key of parent if present.
func (d *decoder) optional(parent *value, key string, ptr *path) (*schema, error) {
	v := parent.get(key)
	if v == nil {
		return nil, nil
	}
	return d.schema(v, ptr)
}

func wantString(v *value, ptr *path) (string, error) {
	if v.kind != kindString {
		return "", invalid(ptr, "want a string, got %s", v.kind)
	}
	return v.str, nil
}

// list decodes a non-empty array of schemas.
func (d *decoder) list(v *value, ptr *path) ([]*schema, error) {
	if v.kind != kindArray || len(v.arr) == 0 {
		return nil, invalid(ptr, "want a non-empty array of schemas")
	}
	out := make([]*schema, len(v.arr))
	for i, e := range v.arr {
		d.work++
		s, err := d.schema(e, ptr.child(strconv.Itoa(i)))
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

func (d *decoder) types(v *value, ptr *path) ([]string, error) {
	list := []*value{v}
	if v.kind == kindArray {
		if len(v.arr) == 0 {
			return nil, invalid(ptr, "want a non-empty array of type names")
		}
		list = v.arr
	}
	var types []string
	for _, e := range list {
		d.work++
		if e.kind != kindString {
			return nil, invalid(ptr, "want a type name or an array of them, got %s", e.kind)
		}
		if !slices.Contains(typeNames, e.str) {
			return nil, invalid(ptr, "unknown type %q", e.str)
		}
		if !slices.Contains(types, e.str) { // at most len(typeNames)
			types = append(types, e.str)
		}
	}
	return types, nil
}

// wantCount decodes a non-negative integer. Large counts are capped: a
// maximum that big is no limit, a minimum that big is refused.
func wantCount(v *value, ptr *path, isMin bool) (int, error) {
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

func wantNumber(v *value, ptr *path) (float64, error) {
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
func tighterBound(prev *bound, exclusive bool, v *value, ptr *path, sign float64) (*bound, error) {
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
