package grammar

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
)

// This file holds an independent GBNF parser and recognizer for tests. The
// parser follows the syntax llama.cpp's grammar parser accepts (rule names
// [a-zA-Z0-9-]+, one rule per line unless inside parentheses, literals and
// classes with \x \u \U \t \r \n \\ \" \[ \] escapes, repetition limits), so
// parsing every emitted grammar doubles as a syntax check. The recognizer
// decides by exhaustive search whether a string matches the root rule.

type gKind uint8

const (
	gLit gKind = iota
	gClass
	gAny
	gRef
	gSeq
	gAlt
	gRep
)

type gNode struct {
	kind     gKind
	runes    []rune    // gLit
	negated  bool      // gClass
	ranges   [][2]rune // gClass
	name     string    // gRef
	kids     []*gNode  // gSeq, gAlt, gRep
	min, max int       // gRep, max < 0: unbounded
}

type gbnf struct {
	rules map[string]*gNode
}

type gParser struct {
	src   []rune
	pos   int
	rules map[string]*gNode
	refs  []string
}

// parseGBNF parses src the way llama.cpp does and checks that every
// referenced rule exists and that a root rule exists.
func parseGBNF(src string) (*gbnf, error) {
	p := &gParser{src: []rune(src), rules: map[string]*gNode{}}
	p.space(true)
	for p.pos < len(p.src) {
		if err := p.rule(); err != nil {
			return nil, fmt.Errorf("offset %d: %w", p.pos, err)
		}
	}
	for _, r := range p.refs {
		if p.rules[r] == nil {
			return nil, fmt.Errorf("undefined rule %q", r)
		}
	}
	if p.rules["root"] == nil {
		return nil, errors.New("no root rule")
	}
	return &gbnf{rules: p.rules}, nil
}

func isWordRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-'
}

func (p *gParser) at(off int) rune {
	if p.pos+off < len(p.src) {
		return p.src[p.pos+off]
	}
	return 0
}

func (p *gParser) space(newlineOK bool) {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t':
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' && p.src[p.pos] != '\r' {
				p.pos++
			}
		case newlineOK && (c == '\n' || c == '\r'):
			p.pos++
		default:
			return
		}
	}
}

func (p *gParser) name() (string, error) {
	start := p.pos
	for p.pos < len(p.src) && isWordRune(p.src[p.pos]) {
		p.pos++
	}
	if p.pos == start {
		return "", errors.New("expecting name")
	}
	return string(p.src[start:p.pos]), nil
}

func (p *gParser) rule() error {
	name, err := p.name()
	if err != nil {
		return err
	}
	p.space(false)
	if p.at(0) != ':' || p.at(1) != ':' || p.at(2) != '=' {
		return errors.New("expecting ::=")
	}
	p.pos += 3
	p.space(true)
	body, err := p.alternates(false)
	if err != nil {
		return err
	}
	if p.rules[name] != nil {
		return fmt.Errorf("rule %q defined twice", name)
	}
	p.rules[name] = body
	switch p.at(0) {
	case '\r':
		p.pos++
		if p.at(0) == '\n' {
			p.pos++
		}
	case '\n':
		p.pos++
	case 0:
	default:
		return errors.New("expecting newline or end")
	}
	p.space(true)
	return nil
}

func (p *gParser) alternates(nested bool) (*gNode, error) {
	n := &gNode{kind: gAlt}
	for {
		s, err := p.sequence(nested)
		if err != nil {
			return nil, err
		}
		n.kids = append(n.kids, s)
		if p.at(0) != '|' {
			return n, nil
		}
		p.pos++
		p.space(true)
	}
}

func (p *gParser) char() (rune, error) {
	if p.pos >= len(p.src) {
		return 0, errors.New("unexpected end of input")
	}
	c := p.src[p.pos]
	if c != '\\' {
		p.pos++
		return c, nil
	}
	e := p.at(1)
	p.pos += 2
	hex := map[rune]int{'x': 2, 'u': 4, 'U': 8}[e]
	switch e {
	case 'x', 'u', 'U':
		if p.pos+hex > len(p.src) {
			return 0, errors.New("short hex escape")
		}
		v, err := strconv.ParseUint(string(p.src[p.pos:p.pos+hex]), 16, 32)
		if err != nil {
			return 0, fmt.Errorf("bad hex escape: %w", err)
		}
		p.pos += hex
		return rune(v), nil
	case 't':
		return '\t', nil
	case 'r':
		return '\r', nil
	case 'n':
		return '\n', nil
	case '\\', '"', '[', ']':
		return e, nil
	}
	return 0, fmt.Errorf("unknown escape \\%c", e)
}

func (p *gParser) sequence(nested bool) (*gNode, error) {
	n := &gNode{kind: gSeq}
	repeat := func(min, max int) error {
		if len(n.kids) == 0 {
			return errors.New("expecting preceding item to */+/?/{")
		}
		if min > maxRepeat || max > maxRepeat {
			return errors.New("number of repetitions exceeds sane defaults")
		}
		last := len(n.kids) - 1
		n.kids[last] = &gNode{kind: gRep, kids: []*gNode{n.kids[last]}, min: min, max: max}
		return nil
	}
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		var err error
		switch {
		case c == '"':
			p.pos++
			lit := &gNode{kind: gLit}
			for p.at(0) != '"' {
				r, err := p.char()
				if err != nil {
					return nil, err
				}
				lit.runes = append(lit.runes, r)
			}
			p.pos++
			n.kids = append(n.kids, lit)
		case c == '[':
			p.pos++
			cl := &gNode{kind: gClass}
			if p.at(0) == '^' {
				p.pos++
				cl.negated = true
			}
			for p.at(0) != ']' {
				lo, err := p.char()
				if err != nil {
					return nil, err
				}
				hi := lo
				if p.at(0) == '-' && p.at(1) != ']' {
					p.pos++
					if hi, err = p.char(); err != nil {
						return nil, err
					}
				}
				cl.ranges = append(cl.ranges, [2]rune{lo, hi})
			}
			p.pos++
			n.kids = append(n.kids, cl)
		case isWordRune(c):
			name, _ := p.name()
			p.refs = append(p.refs, name)
			n.kids = append(n.kids, &gNode{kind: gRef, name: name})
		case c == '(':
			p.pos++
			p.space(true)
			g, err := p.alternates(true)
			if err != nil {
				return nil, err
			}
			if p.at(0) != ')' {
				return nil, errors.New("expecting ')'")
			}
			p.pos++
			n.kids = append(n.kids, g)
		case c == '.':
			p.pos++
			n.kids = append(n.kids, &gNode{kind: gAny})
		case c == '*':
			p.pos++
			err = repeat(0, -1)
		case c == '+':
			p.pos++
			err = repeat(1, -1)
		case c == '?':
			p.pos++
			err = repeat(0, 1)
		case c == '{':
			p.pos++
			p.space(nested)
			err = p.braces(repeat, nested)
		default:
			return n, nil
		}
		if err != nil {
			return nil, err
		}
		p.space(nested)
	}
	return n, nil
}

func (p *gParser) braces(repeat func(min, max int) error, nested bool) error {
	num := func() (int, error) {
		start := p.pos
		for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
			p.pos++
		}
		if start == p.pos {
			return 0, errors.New("expecting an int")
		}
		return strconv.Atoi(string(p.src[start:p.pos]))
	}
	min, err := num()
	if err != nil {
		return err
	}
	p.space(nested)
	max := min
	switch p.at(0) {
	case '}':
	case ',':
		p.pos++
		p.space(nested)
		max = -1
		if c := p.at(0); c >= '0' && c <= '9' {
			if max, err = num(); err != nil {
				return err
			}
			p.space(nested)
		}
		if p.at(0) != '}' {
			return errors.New("expecting '}'")
		}
	default:
		return errors.New("expecting ','")
	}
	p.pos++
	return repeat(min, max)
}

// A matcher computes, memoized, the set of end positions each node can reach
// from each start position of one input.
type matcher struct {
	g     *gbnf
	in    []rune
	memo  map[matchKey][]int
	busy  map[matchKey]bool
	steps int
	err   error
}

type matchKey struct {
	n   *gNode
	pos int
}

// match reports whether in matches the root rule of g. It fails on left
// recursion, which llama.cpp rejects as well.
func (g *gbnf) match(in string) (bool, error) {
	m := &matcher{g: g, in: []rune(in), memo: map[matchKey][]int{}, busy: map[matchKey]bool{}}
	ends := m.ends(g.rules["root"], 0)
	return slices.Contains(ends, len(m.in)), m.err
}

func (m *matcher) ends(n *gNode, pos int) []int {
	key := matchKey{n, pos}
	if e, ok := m.memo[key]; ok {
		return e
	}
	if m.busy[key] {
		m.err = errors.New("left recursion")
		return nil
	}
	if m.steps++; m.steps > 5_000_000 {
		m.err = errors.New("match too expensive")
		return nil
	}
	m.busy[key] = true
	e := m.compute(n, pos)
	delete(m.busy, key)
	m.memo[key] = e
	return e
}

func (m *matcher) compute(n *gNode, pos int) []int {
	switch n.kind {
	case gLit:
		if pos+len(n.runes) <= len(m.in) && slices.Equal(m.in[pos:pos+len(n.runes)], n.runes) {
			return []int{pos + len(n.runes)}
		}
		return nil
	case gAny:
		if pos < len(m.in) {
			return []int{pos + 1}
		}
		return nil
	case gClass:
		if pos >= len(m.in) {
			return nil
		}
		in := false
		for _, r := range n.ranges {
			in = in || r[0] <= m.in[pos] && m.in[pos] <= r[1]
		}
		if in != n.negated {
			return []int{pos + 1}
		}
		return nil
	case gRef:
		return m.ends(m.g.rules[n.name], pos)
	case gAlt:
		var out []int
		for _, k := range n.kids {
			out = append(out, m.ends(k, pos)...)
		}
		return sortedSet(out)
	case gSeq:
		cur := []int{pos}
		for _, k := range n.kids {
			var next []int
			for _, p := range cur {
				next = append(next, m.ends(k, p)...)
			}
			if cur = sortedSet(next); cur == nil {
				return nil
			}
		}
		return cur
	}
	// gRep: breadth-first over repetition counts. Once min is reached, a
	// position seen before at a smaller count needs no second visit.
	var out []int
	if n.min == 0 {
		out = append(out, pos)
	}
	seen := map[int]bool{}
	cur := []int{pos}
	for k := 1; n.max < 0 || k <= n.max; k++ {
		var next []int
		for _, p := range cur {
			next = append(next, m.ends(n.kids[0], p)...)
		}
		next = sortedSet(next)
		if k >= n.min {
			next = slices.DeleteFunc(next, func(p int) bool { return seen[p] })
			for _, p := range next {
				seen[p] = true
			}
			out = append(out, next...)
		}
		if len(next) == 0 {
			break
		}
		cur = next
	}
	return sortedSet(out)
}

func sortedSet(s []int) []int {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// compile converts schema and parses the result, failing the test on any
// error.
func compile(t *testing.T, schema string) *gbnf {
	t.Helper()
	return compileLimits(t, schema, DefaultSchemaLimits)
}

// compileLimits is compile with FromSchemaLimits.
func compileLimits(t *testing.T, schema string, lim SchemaLimits) *gbnf {
	t.Helper()
	text, err := FromSchemaLimits([]byte(schema), lim)
	if err != nil {
		t.Fatalf("FromSchema(%s): %v", schema, err)
	}
	g, err := parseGBNF(text)
	if err != nil {
		t.Fatalf("FromSchema(%s) gave a grammar llama.cpp would reject: %v\n%s", schema, err, text)
	}
	return g
}

// matches reports whether in matches g, failing the test on left recursion.
func matches(t *testing.T, g *gbnf, in string) bool {
	t.Helper()
	ok, err := g.match(in)
	if err != nil {
		t.Fatalf("matching %q: %v", in, err)
	}
	return ok
}

func TestRecognizer(t *testing.T) {
	g, err := parseGBNF(`# comment
root ::= "a" b{2,3} ( "x" |
  "y" )? [^a-c\x41] | "\u00e9" .
b ::= [0-9]`)
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]bool{
		"a12z": true, "a123xz": true, "a12yd": true, "é!": true,
		"a1z": false, "a1234z": false, "a12b": false, "a12A": false, "a12xb": false, "": false, "é": false,
	} {
		if got := matches(t, g, in); got != want {
			t.Errorf("match(%q) = %v, want %v", in, got, want)
		}
	}
	for _, bad := range []string{
		`root ::= x`,                     // undefined rule
		"root ::= \"a\"\nroot ::= \"b\"", // defined twice
		`root ::= "a"{2001}`,             // repetition limit
		`root ::= "\q"`,                  // unknown escape
		`root ::= * "a"`,                 // nothing to repeat
		`root ::= ("a"`,                  // unclosed group
		`root_x ::= "a"`,                 // bad name
		`a ::= "a"`,                      // no root
	} {
		if _, err := parseGBNF(bad); err == nil {
			t.Errorf("parseGBNF(%q) succeeded", bad)
		}
	}
	g, err = parseGBNF("root ::= root \"a\" | \"b\"")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.match("ba"); err == nil {
		t.Error("left recursion not reported")
	}
}
