package grammar

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Limits that keep adversarial schemas from exhausting the converter.
const (
	maxMergeDepth = 32     // allOf and $ref nested inside allOf
	maxBodyDepth  = 1000   // nested subschemas being converted at once
	maxSteps      = 100000 // subschemas converted in all
)

// A converter turns the schemas of one document into rules.
type converter struct {
	doc   *value
	g     *ruleSet
	refs  map[string]string  // ref target pointer → rule name
	defs  map[string]*schema // decoded ref targets by pointer
	where map[string]string  // rule name → schema pointer, for errors
	depth int                // body calls in progress
	steps int                // body calls made
}

// child returns an expression for a value matching s, putting anything
// bigger than a rule reference into a rule of its own named after base.
func (c *converter) child(s *schema, base string) (*expr, error) {
	name := c.g.name(base)
	e, err := c.body(s, name)
	if err != nil || e.op == opRef {
		return e, err
	}
	c.g.define(name, e)
	c.where[name] = s.ptr
	return ref(name), nil
}

// body returns an expression for a value matching s; rules it creates for
// parts of s are named after name.
func (c *converter) body(s *schema, name string) (*expr, error) {
	c.steps++
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > maxBodyDepth || c.steps > maxSteps {
		return nil, invalid(s.ptr, "schema is too large or recurses through anyOf/allOf without end")
	}
	if s.isBool {
		if !s.boolVal {
			return nil, invalid(s.ptr, "schema false accepts no value")
		}
		return ref("value"), nil
	}
	if s.ref != "" {
		if s.constraints == 0 && s.anyOf == nil && s.allOf == nil {
			return c.refRule(s)
		}
		bare := *s
		bare.ref = ""
		refOnly := newSchema(s.ptr)
		refOnly.ref = s.ref
		s = allOf(s.ptr, refOnly, &bare)
	}
	if s.allOf != nil {
		merged, err := c.flatten(s, 0)
		if err != nil {
			return nil, err
		}
		s = merged
	}
	if s.anyOf != nil {
		return c.anyOf(s, name)
	}
	if s.konst != nil {
		return seq(literal(s.konst), ref("space")), nil
	}
	if s.enum != nil {
		alts := make([]*expr, len(s.enum))
		for i, v := range s.enum {
			alts[i] = literal(v)
		}
		return seq(alt(alts...), ref("space")), nil
	}
	types := s.types
	if types == nil {
		types = s.impliedTypes()
	}
	if types == nil {
		return ref("value"), nil
	}
	alts := make([]*expr, 0, len(types))
	for _, t := range types {
		n := name
		if len(types) > 1 {
			n = c.g.name(name + "-" + t)
		}
		e, err := c.typed(s, t, n)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	return alt(alts...), nil
}

// literal matches exactly the compact JSON text of v.
func literal(v *value) *expr {
	var b strings.Builder
	v.encode(&b)
	return lit(b.String())
}

// impliedTypes guesses the types of a schema without "type" from its
// keywords; nil means any value.
func (s *schema) impliedTypes() []string {
	var types []string
	if s.props != nil || s.required != nil || s.addProps != nil {
		types = append(types, "object")
	}
	if s.items != nil || s.prefixItems != nil || s.minItems > 0 || s.maxItems >= 0 {
		types = append(types, "array")
	}
	if s.minLength > 0 || s.maxLength >= 0 || s.format != "" || s.pattern != "" {
		types = append(types, "string")
	}
	if s.minimum != nil || s.maximum != nil {
		types = append(types, "number")
	}
	return types
}

// typed returns an expression for values of JSON type t matching s.
func (c *converter) typed(s *schema, t, name string) (*expr, error) {
	switch t {
	case "object":
		return c.object(s, name)
	case "array":
		return c.array(s, name)
	case "string":
		return c.str(s)
	case "integer":
		return integer(s)
	}
	return ref(t), nil // null, boolean, number
}

// anyOf returns the alternatives of s.anyOf, each merged with the sibling
// keywords of s. False branches match nothing and are dropped.
func (c *converter) anyOf(s *schema, name string) (*expr, error) {
	var alts []*expr
	for i, b := range s.anyOf {
		if b.isBool && !b.boolVal {
			continue
		}
		if s.constraints > 0 {
			base := *s
			base.anyOf = nil
			b = allOf(b.ptr, &base, b)
		}
		e, err := c.child(b, name+"-"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	if alts == nil {
		return nil, invalid(s.ptr, "no alternative of anyOf/oneOf accepts a value")
	}
	return alt(alts...), nil
}

// refRule returns a reference to the rule for the target of s.ref, creating
// the rule on first use. The rule is registered before its body is built,
// so recursive schemas become recursive rules.
func (c *converter) refRule(s *schema) (*expr, error) {
	target, err := c.resolve(s)
	if err != nil {
		return nil, err
	}
	if name, ok := c.refs[target.ptr]; ok {
		return ref(name), nil
	}
	name := c.g.name(lastToken(target.ptr))
	c.refs[target.ptr] = name
	c.where[name] = target.ptr
	e, err := c.body(target, name)
	if err != nil {
		return nil, err
	}
	c.g.define(name, e)
	return ref(name), nil
}

// resolve returns the decoded schema that s.ref points to. Only references
// within the document ("#" and "#/json/pointer") are supported.
func (c *converter) resolve(s *schema) (*schema, error) {
	ptr := s.ptr + "/$ref"
	frag, ok := strings.CutPrefix(s.ref, "#")
	if !ok || frag != "" && frag[0] != '/' {
		return nil, invalid(ptr, "unsupported $ref %q: only references within the document (\"#/...\") are supported", s.ref)
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return nil, invalid(ptr, "bad $ref %q: %v", s.ref, err)
	}
	target := "#" + frag
	if d, ok := c.defs[target]; ok {
		return d, nil
	}
	v := c.doc
	if frag != "" {
		for _, tok := range strings.Split(frag[1:], "/") {
			tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
			var next *value
			switch v.kind {
			case kindObject:
				next = v.get(tok)
			case kindArray:
				if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(v.arr) {
					next = v.arr[i]
				}
			}
			if next == nil {
				return nil, invalid(ptr, "$ref %q points to nothing", s.ref)
			}
			v = next
		}
	}
	d, err := decodeSchema(v, target)
	if err != nil {
		return nil, err
	}
	c.defs[target] = d
	return d, nil
}

// lastToken returns the last token of a JSON pointer, a base for rule names.
func lastToken(ptr string) string {
	if i := strings.LastIndexByte(ptr, '/'); i >= 0 && i+1 < len(ptr) {
		return ptr[i+1:]
	}
	return "root"
}

// allOf returns a schema at ptr requiring all of parts.
func allOf(ptr string, parts ...*schema) *schema {
	s := newSchema(ptr)
	s.allOf = parts
	return s
}

// flatten merges the allOf subschemas of s, resolving references, into one
// schema without allOf.
func (c *converter) flatten(s *schema, depth int) (*schema, error) {
	if depth > maxMergeDepth {
		return nil, invalid(s.ptr, "allOf and $ref nest deeper than %d levels", maxMergeDepth)
	}
	if s.ref != "" {
		target, err := c.resolve(s)
		if err != nil {
			return nil, err
		}
		return c.flatten(target, depth+1)
	}
	if s.allOf == nil {
		return s, nil
	}
	out := *s
	out.allOf = nil
	for _, part := range s.allOf {
		p, err := c.flatten(part, depth+1)
		if err != nil {
			return nil, err
		}
		if out.anyOf != nil && p.anyOf != nil {
			return nil, invalid(s.ptr, "allOf with more than one anyOf/oneOf is not supported")
		}
		if err := out.merge(p); err != nil {
			return nil, err
		}
	}
	return &out, nil
}

// merge adds the constraints of p to s, for allOf. Objects merge their
// properties and required lists; for other keywords the tighter bound or
// the later value wins.
func (s *schema) merge(p *schema) error {
	if p.isBool {
		if !p.boolVal {
			return invalid(p.ptr, "schema false in allOf accepts no value")
		}
		return nil
	}
	if p.types != nil {
		if s.types == nil {
			s.types = p.types
		} else if s.types = intersectTypes(s.types, p.types); s.types == nil {
			return invalid(p.ptr, "allOf has no type in common")
		}
	}
	if p.enum != nil {
		s.enum = p.enum
	}
	if p.konst != nil {
		s.konst = p.konst
	}
	for _, pp := range p.props {
		i := slices.IndexFunc(s.props, func(q property) bool { return q.name == pp.name })
		if i < 0 {
			s.props = append(s.props, pp)
			continue
		}
		both := allOf(pp.schema.ptr, s.props[i].schema, pp.schema)
		s.props = slices.Clone(s.props)
		s.props[i] = property{pp.name, both}
	}
	for _, r := range p.required {
		if !slices.Contains(s.required, r) {
			s.required = append(slices.Clip(s.required), r)
		}
	}
	if p.addProps != nil {
		s.addProps = p.addProps
	}
	if p.items != nil {
		s.items = p.items
	}
	if p.prefixItems != nil {
		s.prefixItems = p.prefixItems
	}
	s.minItems = max(s.minItems, p.minItems)
	s.maxItems = minLimit(s.maxItems, p.maxItems)
	s.minLength = max(s.minLength, p.minLength)
	s.maxLength = minLimit(s.maxLength, p.maxLength)
	if p.format != "" {
		s.format = p.format
	}
	if p.pattern != "" {
		s.pattern = p.pattern
	}
	if p.minimum != nil {
		s.minimum = p.minimum
	}
	if p.maximum != nil {
		s.maximum = p.maximum
	}
	if p.anyOf != nil {
		s.anyOf = p.anyOf
	}
	s.constraints += p.constraints
	if s.maxItems >= 0 && s.minItems > s.maxItems || s.maxLength >= 0 && s.minLength > s.maxLength {
		return invalid(p.ptr, "allOf has contradicting minimum and maximum counts")
	}
	return nil
}

// minLimit returns the smaller of two limits where negative means none.
func minLimit(a, b int) int {
	if a < 0 || b >= 0 && b < a {
		return b
	}
	return a
}

// intersectTypes returns the types in both lists; "integer" is a "number".
func intersectTypes(a, b []string) []string {
	var out []string
	for _, t := range a {
		switch {
		case slices.Contains(b, t):
			out = append(out, t)
		case t == "integer" && slices.Contains(b, "number"):
			out = append(out, t)
		case t == "number" && slices.Contains(b, "integer"):
			out = append(out, "integer")
		}
	}
	return out
}
