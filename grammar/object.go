package grammar

import (
	"slices"
	"strconv"
)

// object returns an expression for JSON objects matching s. Properties come
// in a fixed order: required ones in declaration order, then optional ones
// in declaration order, then any additional properties.
func (c *converter) object(s *schema, name string) (*expr, error) {
	open := s.props == nil
	if s.addProps != nil {
		open = !s.addProps.isBool || s.addProps.boolVal
	}
	if s.props == nil && s.required == nil && open && (s.addProps == nil || s.addProps.isBool) {
		return ref("object"), nil
	}

	if err := c.spend(len(s.props)+len(s.required), s); err != nil {
		return nil, err
	}
	isRequired := make(map[string]bool, len(s.required))
	for _, r := range s.required {
		isRequired[r] = true
	}
	var required, optional []*expr
	var declared []string
	isDeclared := make(map[string]bool, len(s.props))
	addProp := func(p property, req bool) error {
		declared = append(declared, p.name)
		isDeclared[p.name] = true
		if p.schema.isBool && !p.schema.boolVal {
			if req {
				return invalid(p.schema.ptr, "required property %q has schema false", p.name)
			}
			return nil
		}
		v, err := c.child(p.schema, name+"-"+p.name)
		if err != nil {
			return err
		}
		kv := seq(lit(quoteJSON(p.name)), c.g.space(), lit(":"), c.g.sep(), v)
		if req {
			required = append(required, kv)
		} else {
			optional = append(optional, kv)
		}
		return nil
	}
	for _, want := range []bool{true, false} {
		for _, p := range s.props {
			if isRequired[p.name] == want {
				if err := addProp(p, want); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, r := range s.required {
		if !isDeclared[r] {
			if err := addProp(property{r, &schema{isBool: true, boolVal: true}}, true); err != nil {
				return nil, err
			}
		}
	}

	var additional *expr
	if open {
		v := ref("value")
		if s.addProps != nil && !s.addProps.isBool {
			var err error
			if v, err = c.child(s.addProps, name+"-additional"); err != nil {
				return nil, err
			}
		}
		additional = seq(c.keyExcluding(declared, name+"-additional-key"), lit(":"), c.g.sep(), v)
	}
	body := c.members(required, optional, additional, name)
	return seq(lit("{"), c.g.space(), body, lit("}"), c.g.space()), nil
}

// members matches the members of an object, separated by commas: all of
// required, then any of optional in order, then additional (if not nil) any
// number of times. Rules it needs are named after name.
func (c *converter) members(required, optional []*expr, additional *expr, name string) *expr {
	comma := func(kv *expr) *expr { return seq(lit(","), c.g.sep(), kv) }
	more := empty() // additional members after the first member
	if additional != nil {
		more = star(comma(additional))
	}
	if len(required) > 0 {
		parts := []*expr{required[0]}
		for _, kv := range required[1:] {
			parts = append(parts, comma(kv))
		}
		for _, kv := range optional {
			parts = append(parts, opt(comma(kv)))
		}
		return seq(append(parts, more)...)
	}
	// No required member: the first member written is any optional one or
	// an additional one, or the object is empty. rest[i] matches what may
	// follow once optional[:i] are decided and one was written; it chains
	// through rules, as spelling it out would make the grammar quadratic.
	n := len(optional)
	rest := make([]*expr, n+1)
	rest[n] = more
	names := make([]string, n)
	for i := 1; i < n; i++ {
		names[i] = c.g.name(name + "-rest-" + strconv.Itoa(i))
	}
	for i := n - 1; i >= 1; i-- {
		c.g.define(names[i], seq(opt(comma(optional[i])), rest[i+1]))
		rest[i] = ref(names[i])
	}
	var first []*expr
	for i, kv := range optional {
		first = append(first, seq(kv, rest[i+1]))
	}
	if additional != nil {
		first = append(first, seq(additional, more))
	}
	if first == nil {
		return empty()
	}
	return opt(alt(first...))
}

// maxExcludedKey is the longest declared property name keyExcluding
// excludes: each of its characters nests the key rule one group deeper,
// and a name much longer would nest deeper than Validate allows anyway.
const maxExcludedKey = 64

// keyExcluding matches an object key, with its trailing whitespace, that is
// none of names, so additional properties cannot repeat declared ones. Keys
// are compared as written; when a name needs escapes in JSON or is longer
// than maxExcludedKey, no name is excluded.
func (c *converter) keyExcluding(names []string, base string) *expr {
	if len(names) == 0 {
		return ref("string")
	}
	for _, n := range names {
		if len(n) > maxExcludedKey || quoteJSON(n) != `"`+n+`"` {
			return ref("string")
		}
	}
	root := &trieNode{}
	for _, n := range names {
		root.insert(n)
	}
	name := c.g.name(base)
	c.g.define(name, seq(quote, root.excluding(), c.g.space()))
	return ref(name)
}

// A trieNode is a node of a prefix tree of keys.
type trieNode struct {
	runes []rune // sorted
	next  []*trieNode
	isKey bool
}

func (t *trieNode) insert(s string) {
	for _, r := range s {
		i, found := slices.BinarySearch(t.runes, r)
		if !found {
			t.runes = slices.Insert(t.runes, i, r)
			t.next = slices.Insert(t.next, i, &trieNode{})
		}
		t = t.next[i]
	}
	t.isKey = true
}

// excluding matches the rest of a JSON string, closing quote included,
// after the prefix that leads to t, such that the whole is not a key.
func (t *trieNode) excluding() *expr {
	var alts []*expr
	if !t.isKey {
		alts = append(alts, quote)
	}
	for i, r := range t.runes {
		alts = append(alts, seq(lit(string(r)), t.next[i].excluding()))
	}
	other := append(oneOf('"', '\\', 0x7F), runeRange{0, 0x1F})
	other = append(other, oneOf(t.runes...)...)
	alts = append(alts, seq(alt(notClass(other...), ref("escape")), ref("string-tail")))
	return alt(alts...)
}

// array returns an expression for JSON arrays matching s. prefixItems are
// all required; items (default: any value without prefixItems, none with
// them) give the rest.
func (c *converter) array(s *schema, name string) (*expr, error) {
	var rest *expr
	switch {
	case s.items != nil && s.items.isBool && !s.items.boolVal:
	case s.items != nil:
		var err error
		if rest, err = c.child(s.items, name+"-item"); err != nil {
			return nil, err
		}
	case s.prefixItems == nil:
		rest = ref("value")
	}
	n := len(s.prefixItems)
	if s.maxItems >= 0 && s.maxItems < n {
		return nil, invalid(s.ptr, "maxItems %d is less than the %d prefixItems, which are all required", s.maxItems, n)
	}
	if rest == nil && s.minItems > n {
		return nil, invalid(s.ptr, "minItems %d needs more items than the schema allows", s.minItems)
	}
	if n == 0 {
		if rest == nil {
			return c.g.commaList("[", nil, 0, 0, "]"), nil
		}
		return c.g.commaList("[", rest, s.minItems, s.maxItems, "]"), nil
	}
	parts := []*expr{lit("["), c.g.space()}
	for i, p := range s.prefixItems {
		e, err := c.child(p, name+"-"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		if i > 0 {
			parts = append(parts, lit(","), c.g.sep())
		}
		parts = append(parts, e)
	}
	if rest != nil {
		hi := s.maxItems
		if hi >= 0 {
			hi -= n
		}
		parts = append(parts, rep(seq(lit(","), c.g.sep(), rest), max(0, s.minItems-n), hi))
	}
	return seq(append(parts, lit("]"), c.g.space())...), nil
}
