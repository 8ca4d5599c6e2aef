package grammar

import (
	"strconv"
	"strings"
)

// A ruleSet is a grammar under construction: named rules in the order their
// names were reserved.
type ruleSet struct {
	order []string // reserved names; some may stay undefined
	body  map[string]*expr
	used  map[string]bool // reserved names
	// suffix is, for each base name, the last number name tried after it,
	// so that many rules named after one base take linear time.
	suffix map[string]int
	probes int // names tried, for converter.ops
	ws     Whitespace
}

// newRuleSet returns an empty grammar whose JSON allows ws between its
// tokens.
func newRuleSet(ws Whitespace) *ruleSet {
	return &ruleSet{body: map[string]*expr{}, used: map[string]bool{}, suffix: map[string]int{}, ws: ws}
}

// space is the whitespace g's JSON allows after a token: a reference to
// the builtin rule "space" with WhitespaceFree, else nothing (which seq
// drops).
func (g *ruleSet) space() *expr {
	if g.ws == WhitespaceFree {
		return ref("space")
	}
	return empty()
}

// sep is the whitespace g's JSON has after ':' and ',': one space with
// WhitespaceSpaced, else space.
func (g *ruleSet) sep() *expr {
	if g.ws == WhitespaceSpaced {
		return lit(" ")
	}
	return g.space()
}

// maxNameBase is the longest base of a rule name: rules are named after
// the path of property names that leads to them, which a deep schema with
// long names would make grow with the square of its size.
const maxNameBase = 100

// name reserves and returns a rule name derived from base that no other rule
// or builtin uses.
func (g *ruleSet) name(base string) string {
	base = sanitize(base)
	if len(base) > maxNameBase {
		base = strings.TrimRight(base[:maxNameBase], "-")
	}
	n := base
	i := g.suffix[base]
	if i > 0 {
		n = base + "-" + strconv.Itoa(i)
	}
	for g.probes++; g.used[n] || builtins[n] != nil; g.probes++ {
		i++
		n = base + "-" + strconv.Itoa(i)
	}
	g.suffix[base] = i
	g.reserve(n)
	return n
}

// reserve claims name and its place in the output.
func (g *ruleSet) reserve(name string) {
	g.used[name] = true
	g.order = append(g.order, name)
}

// define sets the body of rule name.
func (g *ruleSet) define(name string, e *expr) {
	if !g.used[name] {
		g.reserve(name)
	}
	g.body[name] = e
}

// sanitize maps s to a valid GBNF rule name: runs of characters outside
// [a-zA-Z0-9] become a single '-'.
func sanitize(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range s {
		if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
		} else {
			dash = true
		}
	}
	if b.Len() == 0 {
		return "x"
	}
	return b.String()
}

// String writes the rules reachable from "root" in creation order, one rule
// per line.
func (g *ruleSet) String() string {
	reach := map[string]bool{}
	var visit func(e *expr)
	visit = func(e *expr) {
		if e.op == opRef && !reach[e.text] {
			reach[e.text] = true
			if b := g.body[e.text]; b != nil { // a rule defined elsewhere (WithPrefix)
				visit(b)
			}
		}
		for _, k := range e.kids {
			visit(k)
		}
	}
	visit(ref("root"))
	var b strings.Builder
	for _, n := range g.order {
		if !reach[n] || g.body[n] == nil {
			continue
		}
		b.WriteString(n)
		b.WriteString(" ::= ")
		g.body[n].write(&b, precAlt)
		b.WriteByte('\n')
	}
	return b.String()
}

// nullable reports, for every rule, whether it matches the empty string.
func (g *ruleSet) nullable() map[string]bool {
	null := map[string]bool{}
	g.fixpoint(null, func(e *expr) bool { return derives(e, null, isEmptyLit) })
	return null
}

// productive reports, for every rule, whether it matches any finite string.
func (g *ruleSet) productive() map[string]bool {
	prod := map[string]bool{}
	always := func(*expr) bool { return true }
	g.fixpoint(prod, func(e *expr) bool { return derives(e, prod, always) })
	return prod
}

func isEmptyLit(e *expr) bool { return e.op == opLit && e.text == "" }

// derives reports whether e derives a string of the kind where terminal
// tells which literals and classes qualify and set which rules do.
func derives(e *expr, set map[string]bool, terminal func(*expr) bool) bool {
	switch e.op {
	case opLit, opClass:
		return terminal(e)
	case opRef:
		return set[e.text]
	case opAlt:
		for _, k := range e.kids {
			if derives(k, set, terminal) {
				return true
			}
		}
		return false
	case opRep:
		return e.min == 0 || derives(e.kids[0], set, terminal)
	}
	for _, k := range e.kids { // opSeq
		if !derives(k, set, terminal) {
			return false
		}
	}
	return true
}

// fixpoint grows the set of rules for which holds reports true until it no
// longer changes. It goes through the rules from the last created, which
// the earlier ones refer to, and looks at a rule again only when a rule it
// refers to joined the set: linear time where a round over all the rules
// per change would be quadratic for a chain of rules.
func (g *ruleSet) fixpoint(set map[string]bool, holds func(*expr) bool) {
	users := map[string][]string{} // rule → the rules whose bodies refer to it
	for _, n := range g.order {
		if g.body[n] == nil {
			continue
		}
		seen := map[string]bool{}
		var refs func(e *expr)
		refs = func(e *expr) {
			if e.op == opRef && !seen[e.text] {
				seen[e.text] = true
				users[e.text] = append(users[e.text], n)
			}
			for _, k := range e.kids {
				refs(k)
			}
		}
		refs(g.body[n])
	}
	queued := make(map[string]bool, len(g.order))
	work := make([]string, 0, len(g.order))
	for _, n := range g.order { // popped from the end: the last created first
		if g.body[n] != nil && !queued[n] {
			queued[n] = true
			work = append(work, n)
		}
	}
	for len(work) > 0 {
		n := work[len(work)-1]
		work = work[:len(work)-1]
		queued[n] = false
		g.probes++
		if set[n] || !holds(g.body[n]) {
			continue
		}
		set[n] = true
		for _, u := range users[n] {
			if !set[u] && !queued[u] {
				queued[u] = true
				work = append(work, u)
			}
		}
	}
}

// leftRecursive returns a rule that can reach itself without consuming
// input, which llama.cpp rejects, or "" if there is none.
func (g *ruleSet) leftRecursive() string {
	null := g.nullable()
	// first appends the rules e can start with, without consuming input.
	var first func(e *expr, out []string) []string
	first = func(e *expr, out []string) []string {
		switch e.op {
		case opRef:
			out = append(out, e.text)
		case opAlt:
			for _, k := range e.kids {
				out = first(k, out)
			}
		case opRep:
			out = first(e.kids[0], out)
		case opSeq:
			for _, k := range e.kids {
				out = first(k, out)
				if !derives(k, null, isEmptyLit) {
					break
				}
			}
		}
		return out
	}
	const (
		active = iota + 1
		done
	)
	state := map[string]int{}
	hit := ""
	var cyclic func(n string) bool
	cyclic = func(n string) bool {
		switch state[n] {
		case active:
			hit = n
			return true
		case done:
			return false
		}
		state[n] = active
		for _, m := range first(g.body[n], nil) {
			if g.body[m] != nil && cyclic(m) {
				return true
			}
		}
		state[n] = done
		return false
	}
	for _, n := range g.order {
		if g.body[n] != nil && cyclic(n) {
			return hit
		}
	}
	return ""
}
