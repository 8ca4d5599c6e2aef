package grammar

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// patternExpr converts a "pattern" regular expression to an expression for
// the JSON-encoded text of the strings it matches, quotes excluded.
//
// Supported: literal characters, '.', character classes with ranges and
// negation, the escapes \d \D \w \W \s \S \t \n \r \f \v \0 \xHH \uHHHH and
// escaped punctuation, groups ( ) (?: ) (?<name> ), alternation, and the
// quantifiers * + ? {n} {n,} {n,m} (lazy or not). '^' and '$' are allowed
// only at the start and end of a top-level alternative; like JSON Schema
// patterns, an alternative without them matches anywhere in the string.
// Lookaround, backreferences and word boundaries are refused.
func patternExpr(pattern string) (*expr, error) {
	p := &reParser{src: []rune(pattern)}
	e, err := p.alternation(0)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	if p.pos < len(p.src) { // only an unmatched ')' stops the top level
		return nil, fmt.Errorf("pattern %q: unmatched ')' at offset %d", pattern, p.pos)
	}
	return e, nil
}

// A reParser parses a regular expression.
type reParser struct {
	src []rune
	pos int
}

func (p *reParser) peek() (rune, bool) {
	if p.pos < len(p.src) {
		return p.src[p.pos], true
	}
	return 0, false
}

func (p *reParser) eat(r rune) bool {
	if c, ok := p.peek(); ok && c == r {
		p.pos++
		return true
	}
	return false
}

func (p *reParser) errorf(format string, args ...any) error {
	return fmt.Errorf("at offset %d: %s", p.pos, fmt.Sprintf(format, args...))
}

// alternation parses alternatives up to ')' or the end; depth 0 is the top
// level, where anchors are allowed.
func (p *reParser) alternation(depth int) (*expr, error) {
	if depth > maxDepth {
		return nil, p.errorf("groups nest too deeply")
	}
	var alts []*expr
	for {
		e, err := p.sequence(depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
		if !p.eat('|') {
			return alt(alts...), nil
		}
	}
}

// sequence parses one alternative.
func (p *reParser) sequence(depth int) (*expr, error) {
	anchoredStart := depth == 0 && p.eat('^')
	anchoredEnd := false
	var parts []*expr
	for {
		c, ok := p.peek()
		if !ok || c == '|' || c == ')' {
			break
		}
		if c == '$' && depth == 0 {
			p.pos++
			if c, ok := p.peek(); ok && c != '|' {
				return nil, p.errorf("'$' is supported only at the end of the pattern or of a top-level alternative")
			}
			anchoredEnd = true
			break
		}
		atom, err := p.atom(depth)
		if err != nil {
			return nil, err
		}
		if atom, err = p.quantified(atom); err != nil {
			return nil, err
		}
		parts = append(parts, atom)
	}
	if depth == 0 && !anchoredStart {
		parts = append([]*expr{star(ref("char"))}, parts...)
	}
	if depth == 0 && !anchoredEnd {
		parts = append(parts, star(ref("char")))
	}
	return seq(parts...), nil
}

// atom parses a character, class, escape or group.
func (p *reParser) atom(depth int) (*expr, error) {
	c := p.src[p.pos]
	p.pos++
	switch c {
	case '(':
		if p.eat('?') {
			switch {
			case p.eat(':'):
			case p.eat('<') || p.eat('P') && p.eat('<'):
				if c, ok := p.peek(); ok && (c == '=' || c == '!') {
					return nil, p.errorf("lookbehind is not supported")
				}
				for !p.eat('>') {
					if p.pos >= len(p.src) {
						return nil, p.errorf("unterminated group name")
					}
					p.pos++
				}
			default:
				return nil, p.errorf("lookahead and group flags are not supported")
			}
		}
		e, err := p.alternation(depth + 1)
		if err != nil {
			return nil, err
		}
		if !p.eat(')') {
			return nil, p.errorf("missing ')'")
		}
		return e, nil
	case '[':
		set, err := p.class()
		if err != nil {
			return nil, err
		}
		return p.chars(set)
	case '.':
		return p.chars(complement(oneOf('\n', '\r', 0x2028, 0x2029)))
	case '\\':
		set, err := p.escape(false)
		if err != nil {
			return nil, err
		}
		return p.chars(set)
	case '*', '+', '?', '{':
		return nil, p.errorf("nothing to repeat before %q", c)
	case '^', '$':
		return nil, p.errorf("%q is supported only at the start or end of the pattern", c)
	}
	return p.chars(oneOf(c))
}

// quantified parses an optional quantifier after atom.
func (p *reParser) quantified(atom *expr) (*expr, error) {
	c, ok := p.peek()
	if !ok {
		return atom, nil
	}
	var lo, hi int
	switch c {
	case '*':
		lo, hi = 0, -1
	case '+':
		lo, hi = 1, -1
	case '?':
		lo, hi = 0, 1
	case '{':
		var err error
		if lo, hi, err = p.braces(); err != nil {
			return nil, err
		}
	default:
		return atom, nil
	}
	if c != '{' {
		p.pos++
	}
	p.eat('?') // lazy matches the same strings
	if c, ok := p.peek(); ok && strings.ContainsRune("*+?{", c) {
		return nil, p.errorf("nested quantifier %q", c)
	}
	if nullableExpr(atom) { // see nonempty.go
		size := 0
		ne, ok := nonEmpty(atom, &size)
		if !ok {
			return nil, p.errorf("quantified group too complex")
		}
		if ne == nil {
			return empty(), nil
		}
		atom, lo = ne, 0
	}
	return rep(atom, lo, hi), nil
}

// braces parses {n}, {n,} or {n,m}.
func (p *reParser) braces() (lo, hi int, err error) {
	p.pos++ // '{'
	end := slices.Index(p.src[p.pos:], '}')
	if end < 0 {
		return 0, 0, p.errorf("missing '}'")
	}
	body := string(p.src[p.pos : p.pos+end])
	p.pos += end + 1
	loText, hiText, hasComma := strings.Cut(body, ",")
	if lo, err = count(loText); err != nil {
		return 0, 0, p.errorf("bad repetition {%s}", body)
	}
	switch {
	case !hasComma:
		hi = lo
	case hiText == "":
		hi = -1
	default:
		if hi, err = count(hiText); err != nil || hi < lo {
			return 0, 0, p.errorf("bad repetition {%s}", body)
		}
	}
	if lo > maxMinCount {
		return 0, 0, p.errorf("repetition minimum %d is above the supported %d", lo, maxMinCount)
	}
	return lo, hi, nil
}

func count(s string) (int, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, errors.New("not a count")
	}
	n, err := strconv.Atoi(s)
	if err != nil { // too large: treat as unbounded-sized
		return maxMinCount + 1, nil
	}
	return n, nil
}

// class parses a character class after '['.
func (p *reParser) class() ([]runeRange, error) {
	negated := p.eat('^')
	var set []runeRange
	for first := true; ; first = false {
		c, ok := p.peek()
		if !ok {
			return nil, p.errorf("missing ']'")
		}
		if c == ']' {
			if first {
				return nil, p.errorf("empty character class")
			}
			p.pos++
			break
		}
		lo, err := p.classAtom()
		if err != nil {
			return nil, err
		}
		if len(p.src) > p.pos+1 && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			hi, err := p.classAtom()
			if err != nil {
				return nil, err
			}
			if len(lo) != 1 || len(hi) != 1 || lo[0].lo != lo[0].hi || hi[0].lo != hi[0].hi || hi[0].lo < lo[0].lo {
				return nil, p.errorf("bad range in character class")
			}
			lo = []runeRange{{lo[0].lo, hi[0].hi}}
		}
		set = append(set, lo...)
	}
	if negated {
		return complement(set), nil
	}
	return normalize(set), nil
}

// classAtom parses one character or escape inside a class.
func (p *reParser) classAtom() ([]runeRange, error) {
	c := p.src[p.pos]
	p.pos++
	if c == '\\' {
		return p.escape(true)
	}
	return oneOf(c), nil
}

// Character sets for the class escapes.
var (
	digitSet = []runeRange{{'0', '9'}}
	wordSet  = []runeRange{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}
	spaceSet = []runeRange{{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
		{0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}}
)

// escape parses an escape after '\'; inClass selects the meaning of \b.
func (p *reParser) escape(inClass bool) ([]runeRange, error) {
	c, ok := p.peek()
	if !ok {
		return nil, p.errorf("trailing '\\'")
	}
	p.pos++
	switch c {
	case 'd':
		return digitSet, nil
	case 'D':
		return complement(digitSet), nil
	case 'w':
		return wordSet, nil
	case 'W':
		return complement(wordSet), nil
	case 's':
		return spaceSet, nil
	case 'S':
		return complement(spaceSet), nil
	case 't':
		return oneOf('\t'), nil
	case 'n':
		return oneOf('\n'), nil
	case 'r':
		return oneOf('\r'), nil
	case 'f':
		return oneOf('\f'), nil
	case 'v':
		return oneOf('\v'), nil
	case '0':
		return oneOf(0), nil
	case 'b':
		if inClass {
			return oneOf('\b'), nil
		}
	case 'x', 'u':
		n := 2
		if c == 'u' {
			n = 4
		}
		if p.pos+n <= len(p.src) {
			if v, err := strconv.ParseUint(string(p.src[p.pos:p.pos+n]), 16, 32); err == nil {
				p.pos += n
				return oneOf(rune(v)), nil
			}
		}
		return nil, p.errorf("bad \\%c escape", c)
	}
	if c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
		return nil, p.errorf("escape \\%c is not supported", c)
	}
	return oneOf(c), nil
}

// chars matches one character from set, as written inside a JSON string:
// raw where JSON allows, escaped where it must be.
func (p *reParser) chars(set []runeRange) (*expr, error) {
	set = normalize(set)
	var alts []*expr
	mustEscape := normalize(append(oneOf('"', '\\'), runeRange{0, 0x1F}))
	if raw := subtract(set, mustEscape); len(raw) > 0 {
		if rest := complement(raw); len(raw) == 1 && raw[0].lo == raw[0].hi {
			alts = append(alts, lit(string(raw[0].lo)))
		} else if len(rest) < len(raw) {
			alts = append(alts, notClass(rest...))
		} else {
			alts = append(alts, class(raw...))
		}
	}
	for _, r := range intersect(set, mustEscape) {
		for c := r.lo; c <= r.hi; c++ {
			alts = append(alts, escaped(c))
		}
	}
	if alts == nil {
		return nil, p.errorf("character class matches nothing")
	}
	return alt(alts...), nil
}

// escaped matches the JSON escape of c, a character JSON must escape.
func escaped(c rune) *expr {
	switch c {
	case '"', '\\':
		return lit(`\` + string(c))
	case '\b':
		return lit(`\b`)
	case '\f':
		return lit(`\f`)
	case '\n':
		return lit(`\n`)
	case '\r':
		return lit(`\r`)
	case '\t':
		return lit(`\t`)
	}
	parts := []*expr{lit(`\u00`)}
	for _, d := range fmt.Sprintf("%02x", c) {
		if d >= 'a' {
			parts = append(parts, class(oneOf(d, d-'a'+'A')...))
		} else {
			parts = append(parts, lit(string(d)))
		}
	}
	return seq(parts...)
}

// normalize sorts set and merges overlapping and adjacent ranges.
func normalize(set []runeRange) []runeRange {
	set = slices.Clone(set)
	slices.SortFunc(set, func(a, b runeRange) int { return int(a.lo - b.lo) })
	var out []runeRange
	for _, r := range set {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// complement returns the characters not in set.
func complement(set []runeRange) []runeRange {
	var out []runeRange
	next := rune(0)
	for _, r := range normalize(set) {
		if r.lo > next {
			out = append(out, runeRange{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= 0x10FFFF {
		out = append(out, runeRange{next, 0x10FFFF})
	}
	return out
}

// intersect returns the characters in both a and b.
func intersect(a, b []runeRange) []runeRange {
	return complement(append(complement(a), complement(b)...))
}

// subtract returns the characters in a but not in b.
func subtract(a, b []runeRange) []runeRange {
	return intersect(a, complement(b))
}
