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
	// maxWork bounds the parts of schemas the converter goes through
	// (properties, required names, enum values, alternatives), counted
	// again each time anyOf, allOf or a $ref with siblings copies them.
	// A schema that reaches it would give a grammar far over
	// DefaultLimits.MaxBytes.
	maxWork = 4000000
)

// A converter turns the schemas of one document into rules.
type converter struct {
	doc   *value
	dec   *decoder
	g     *ruleSet
	refs  map[*schema]string // ref target → rule name
	defs  map[string]*schema // decoded ref targets by pointer text
	where map[string]*path   // rule name → schema pointer, for errors
	depth int                // body calls in progress
	steps int                // body calls made
	work  int                // parts gone through, see maxWork
}

// spend counts n parts gone through, failing past maxWork.
func (c *converter) spend(n int, s *schema) error {
	if c.work += n; c.work > maxWork {
		return invalid(s.ptr, "schema is too large: converting it goes through more than %d parts (anyOf, allOf and $ref copy their siblings into every branch)", maxWork)
	}
	return nil
}

// ops counts the elementary steps of a conversion so far: schema parts
// decoded, gone through and rule names tried. Tests check that it grows
// linearly with the document.
func (c *converter) ops() int { return c.dec.work + c.work + c.g.probes }

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
		return seq(c.literal(s.konst), c.g.space()), nil
	}
	if s.enum != nil {
		if err := c.spend(len(s.enum), s); err != nil {
			return nil, err
		}
		alts := make([]*expr, len(s.enum))
		for i, v := range s.enum {
			alts[i] = c.literal(v)
		}
		return seq(alt(alts...), c.g.space()), nil
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

// literal matches exactly the JSON text of v: compact, or with
// WhitespaceSpaced a space after each ':' and ','.
func (c *converter) literal(v *value) *expr {
	comma, colon := ",", ":"
	if c.g.ws == WhitespaceSpaced {
		comma, colon = ", ", ": "
	}
	var b strings.Builder
	v.encode(&b, comma, colon)
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
		return c.integer(s)
	}
	return ref(t), nil // null, boolean, number
}

// anyOf returns the alternatives of s.anyOf, each merged with the sibling
// keywords of s. False branches match nothing and are dropped.
func (c *converter) anyOf(s *schema, name string) (*expr, error) {
	if err := c.spend(len(s.anyOf), s); err != nil {
		return nil, err
	}
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
	if name, ok := c.refs[target]; ok {
		return ref(name), nil
	}
	name := c.g.name(target.ptr.last())
	c.refs[target] = name
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
	ptr := s.ptr.child("$ref")
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
	d, err := c.dec.schema(v, &path{token: target})
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
func allOf(ptr *path, parts ...*schema) *schema {
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
	m := newMerger(s)
	for _, part := range s.allOf {
		p, err := c.flatten(part, depth+1)
		if err != nil {
			return nil, err
		}
		if m.out.anyOf != nil && p.anyOf != nil {
			return nil, invalid(s.ptr, "allOf with more than one anyOf/oneOf is not supported")
		}
		if err := c.spend(1+len(p.props)+len(p.required), s); err != nil {
			return nil, err
		}
		if err := m.merge(p); err != nil {
			return nil, err
		}
	}
	return m.out, nil
}

// A merger builds the schema an allOf asks for, one part at a time, with
// the indexes that keep each merge linear in the part.
type merger struct {
	out      *schema
	props    map[string]int  // index of each property in out.props
	required map[string]bool // names in out.required
}

// newMerger starts from the keywords of s beside its allOf, copying its
// lists: the parts are shared with other schemas.
func newMerger(s *schema) *merger {
	out := *s
	out.allOf = nil
	out.props = slices.Clone(s.props)
	out.required = slices.Clone(s.required)
	m := &merger{out: &out, props: make(map[string]int, len(out.props)), required: make(map[string]bool, len(out.required))}
	for i, p := range out.props {
		m.props[p.name] = i
	}
	for _, r := range out.required {
		m.required[r] = true
	}
	return m
}

// merge adds the constraints of p, for allOf. Objects merge their
// properties and required lists; for other keywords the tighter bound or
// the later value wins.
func (m *merger) merge(p *schema) error {
	s := m.out
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
		i, ok := m.props[pp.name]
		if !ok {
			m.props[pp.name] = len(s.props)
			s.props = append(s.props, pp)
			continue
		}
		s.props[i] = property{pp.name, allOf(pp.schema.ptr, s.props[i].schema, pp.schema)}
	}
	for _, r := range p.required {
		if !m.required[r] {
			m.required[r] = true
			s.required = append(s.required, r)
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
