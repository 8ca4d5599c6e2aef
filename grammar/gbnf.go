package grammar

import (
	"slices"
	"strconv"
	"strings"
)

// This file ports llama.cpp's GBNF parser (llama_grammar_parser in
// llama-grammar.cpp, as of December 2025) to Go, without its recursion, so
// that Validate sees exactly the rules llama.cpp will build. (b10573 adds a
// bound of its own on the rules a repetition multiplies: a grammar past it
// that Validate lets through fails at sampler setup, a 400.) Elements are kept only as much as the checks need: a rule
// reference, a separator, or a part of a terminal.

const (
	elEnd  int32 = -1 // end of a rule (LLAMA_GRETYPE_END)
	elAlt  int32 = -2 // start of the next alternative (LLAMA_GRETYPE_ALT)
	elTerm int32 = -3 // first element of a terminal: a character, '.' or a token
	elMore int32 = -4 // further element of a character class (CHAR_ALT, CHAR_RNG_UPPER)
	// Elements >= 0 reference the rule with that id (LLAMA_GRETYPE_RULE_REF).
)

// Estimated bytes llama.cpp allocates per grammar element and per rule
// beyond its name, which it holds twice: the parser and llama_grammar each
// hold a copy of the 8-byte elements in vectors grown by doubling, and each
// rule has a vector and a symbol table entry. Measured peak memory of
// llama.cpp's grammar loading is within 10% of the estimate for grammars
// dominated by elements, generated rules or long names.
const (
	bytesPerElement = 24
	bytesPerRule    = 128
	copiesOfNames   = 2
)

// A gbnfParser parses a grammar as llama_grammar_parser does.
type gbnfParser struct {
	src string
	pos int
	lim Limits

	ids   map[string]int32 // rule name → id
	names map[int32]string // id → name, for named rules
	owner []int32          // id → itself for a named rule, else the named rule whose definition made it
	rules [][]int32        // id → elements ending in elEnd; nil: undefined

	defs      int   // rule definitions parsed
	elems     int64 // elements created
	nameBytes int64 // bytes of rule names, generated ones included
	ruleName  string
	ruleID    int32

	depth, maxDepth int
	depthErr        *LimitError // nesting too deep: only scanning on, for the true depth
	virtual         int         // groups open above the top frame once depthErr is set
}

func newGBNFParser(src string, lim Limits) *gbnfParser {
	return &gbnfParser{src: src, lim: lim, ids: map[string]int32{}, names: map[int32]string{}}
}

// A gframe is a rule being parsed: a named rule at the bottom of the stack,
// a group above it.
type gframe struct {
	id      int32
	rule    []int32
	nested  bool // inside parentheses, where newlines are space
	lastSym int  // where the last item starts, for a repetition
}

func (p *gbnfParser) at(i int) byte {
	if i < len(p.src) {
		return p.src[i]
	}
	return 0 // llama.cpp reads the terminating NUL
}

func (p *gbnfParser) syntax(off int, format string, args ...any) error {
	if p.depthErr != nil {
		return p.finishDepth()
	}
	return syntaxError(p.src, off, format, args...)
}

func (p *gbnfParser) finishDepth() error {
	p.depthErr.Got = p.maxDepth
	return p.depthErr
}

func isGBNFWordChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// space skips blanks and comments, and newlines if newlineOK.
func (p *gbnfParser) space(i int, newlineOK bool) int {
	for i < len(p.src) {
		switch c := p.src[i]; {
		case c == ' ' || c == '\t':
			i++
		case c == '#':
			for i < len(p.src) && p.src[i] != '\r' && p.src[i] != '\n' {
				i++
			}
		case newlineOK && (c == '\r' || c == '\n'):
			i++
		default:
			return i
		}
	}
	return i
}

func (p *gbnfParser) nameEnd(i int) int {
	for i < len(p.src) && isGBNFWordChar(p.src[i]) {
		i++
	}
	return i
}

// utf8Length is decode_utf8's sequence length by the high 4 bits of the
// first byte. llama.cpp then takes that many bytes, whatever they are.
var utf8Length = [16]int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4}

// char skips one character of a literal or class at i, as parse_char does.
func (p *gbnfParser) char(i int) (int, error) {
	if p.at(i) == '\\' {
		switch p.at(i + 1) {
		case 'x':
			return p.hex(i+2, 2)
		case 'u':
			return p.hex(i+2, 4)
		case 'U':
			return p.hex(i+2, 8)
		case 't', 'r', 'n', '\\', '"', '[', ']':
			return i + 2, nil
		}
		return 0, p.syntax(i, "unknown escape")
	}
	if i >= len(p.src) {
		return 0, p.syntax(i, "unexpected end of input")
	}
	return min(i+utf8Length[p.src[i]>>4], len(p.src)), nil
}

func (p *gbnfParser) hex(i, n int) (int, error) {
	for k := 0; k < n; k++ {
		c := p.at(i + k)
		if !(isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return 0, p.syntax(i, "expecting %d hex chars", n)
		}
	}
	return i + n, nil
}

// token skips a token reference <[id]> or <text> at i, as parse_token does
// (it has a vocabulary; whether <text> is one token is left to it).
func (p *gbnfParser) token(i int) (int, error) {
	if p.at(i) != '<' {
		return 0, p.syntax(i, "expecting '<'")
	}
	i++
	if p.at(i) == '[' {
		i++
		start := i
		for isDigit(p.at(i)) {
			i++
		}
		if i == start {
			return 0, p.syntax(i, "expecting integer")
		}
		if _, err := strconv.ParseUint(p.src[start:i], 10, 64); err != nil {
			return 0, p.syntax(start, "token id out of range")
		}
		if p.at(i) != ']' {
			return 0, p.syntax(i, "expecting ']'")
		}
		if p.at(i+1) != '>' {
			return 0, p.syntax(i+1, "expecting '>'")
		}
		return i + 2, nil
	}
	for i < len(p.src) && p.src[i] != '>' {
		i++
	}
	if i >= len(p.src) {
		return 0, p.syntax(i, "expecting '>'")
	}
	return i + 1, nil
}

// symbol returns the id of the rule named name, as get_symbol_id does.
func (p *gbnfParser) symbol(name string) int32 {
	if id, ok := p.ids[name]; ok {
		return id
	}
	id := p.newID(-1)
	p.ids[name] = id
	p.names[id] = name
	p.nameBytes += int64(len(name))
	return id
}

// generated returns the id of a new rule for a group or repetition, which
// llama.cpp names after the rule being parsed: generate_symbol_id.
func (p *gbnfParser) generated() int32 {
	id := p.newID(p.ruleID)
	p.nameBytes += int64(len(p.ruleName) + 1 + decimalLen(int64(id)))
	return id
}

// decimalLen returns the number of decimal digits of n >= 0.
func decimalLen(n int64) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}

// newID returns a new rule id, made by the named rule owner (-1: the rule
// is named itself).
func (p *gbnfParser) newID(owner int32) int32 {
	id := int32(len(p.rules))
	if owner < 0 {
		owner = id
	}
	p.owner = append(p.owner, owner)
	p.rules = append(p.rules, nil)
	return id
}

func (p *gbnfParser) push(f *gframe, el int32) {
	if p.depthErr == nil {
		f.rule = append(f.rule, el)
		p.elems++
	}
}

// checkExpanded fails if the estimated memory of the grammar so far
// exceeds the limit.
func (p *gbnfParser) checkExpanded() error {
	got := bytesPerElement*p.elems + bytesPerRule*int64(len(p.rules)) + copiesOfNames*p.nameBytes
	if got > int64(p.lim.MaxExpandedBytes) {
		return &LimitError{Limit: LimitExpandedSize, Max: p.lim.MaxExpandedBytes, Got: clampInt(got), Rule: p.ruleName}
	}
	return nil
}

// parse parses the whole text: llama_grammar_parser::parse.
func (p *gbnfParser) parse() error {
	p.pos = p.space(0, true)
	for p.pos < len(p.src) {
		if err := p.rule(); err != nil {
			return err
		}
	}
	if p.depthErr != nil {
		return p.finishDepth()
	}
	if err := p.checkExpanded(); err != nil {
		return err
	}
	for id, r := range p.rules {
		if r == nil {
			return syntaxError(p.src, -1, "undefined rule %q", p.names[int32(id)])
		}
	}
	if _, ok := p.ids["root"]; !ok {
		return syntaxError(p.src, -1, "no rule named root")
	}
	return nil
}

// rule parses one rule definition: parse_rule.
func (p *gbnfParser) rule() error {
	start := p.pos
	end := p.nameEnd(start)
	if end == start {
		return p.syntax(start, "expecting name")
	}
	i := p.space(end, false)
	p.ruleName = p.src[start:end]
	p.ruleID = p.symbol(p.ruleName)
	if !strings.HasPrefix(p.src[i:], "::=") {
		return p.syntax(i, "expecting ::=")
	}
	if p.defs++; p.defs > p.lim.MaxRules && p.depthErr == nil {
		return &LimitError{Limit: LimitRules, Max: p.lim.MaxRules, Got: p.defs}
	}
	p.pos = p.space(i+3, true)
	if err := p.alternates(p.ruleID); err != nil {
		return err
	}
	switch c := p.at(p.pos); {
	case c == '\r':
		p.pos++
		if p.at(p.pos) == '\n' {
			p.pos++
		}
	case c == '\n':
		p.pos++
	case p.pos < len(p.src):
		return p.syntax(p.pos, "expecting newline or end")
	}
	p.pos = p.space(p.pos, true)
	if p.depthErr == nil {
		return p.checkExpanded()
	}
	return nil
}

// alternates parses the body of rule id up to the end of the line:
// parse_alternates and parse_sequence, with a stack of groups in place of
// their recursion.
func (p *gbnfParser) alternates(id int32) error {
	frames := []gframe{{id: id}}
	for {
		f := &frames[len(frames)-1]
		nested := f.nested || p.virtual > 0
		i := p.pos
		var err error
		switch c := p.at(i); {
		case c == '"': // literal string
			i++
			f.lastSym = len(f.rule)
			for p.at(i) != '"' {
				if i >= len(p.src) {
					return p.syntax(i, "unexpected end of input")
				}
				if i, err = p.char(i); err != nil {
					return err
				}
				p.push(f, elTerm)
			}
			p.pos = p.space(i+1, nested)
		case c == '[': // character class
			i++
			if p.at(i) == '^' {
				i++
			}
			f.lastSym = len(f.rule)
			el := elTerm
			for p.at(i) != ']' {
				if i >= len(p.src) {
					return p.syntax(i, "unexpected end of input")
				}
				if i, err = p.char(i); err != nil {
					return err
				}
				p.push(f, el)
				el = elMore
				if p.at(i) == '-' && p.at(i+1) != ']' {
					if i+1 >= len(p.src) {
						return p.syntax(i+1, "unexpected end of input")
					}
					if i, err = p.char(i + 1); err != nil {
						return err
					}
					p.push(f, elMore)
				}
			}
			p.pos = p.space(i+1, nested)
		case c == '<' || c == '!': // token
			if c == '!' {
				i++
			}
			if i, err = p.token(i); err != nil {
				return err
			}
			f.lastSym = len(f.rule)
			p.push(f, elTerm)
			p.pos = p.space(i, nested)
		case isGBNFWordChar(c): // rule reference
			end := p.nameEnd(i)
			ref := p.symbol(p.src[i:end])
			p.pos = p.space(end, nested)
			f.lastSym = len(f.rule)
			p.push(f, ref)
		case c == '(': // group: a rule of its own
			p.pos = p.space(i+1, true)
			p.depth++
			p.maxDepth = max(p.maxDepth, p.depth)
			if p.depth > p.lim.MaxDepth && p.depthErr == nil {
				p.depthErr = &LimitError{Limit: LimitDepth, Max: p.lim.MaxDepth, Rule: p.ruleName}
			}
			if p.depthErr != nil { // only counting on
				p.virtual++
				break
			}
			frames = append(frames, gframe{id: p.generated(), nested: true})
		case c == '.':
			f.lastSym = len(f.rule)
			p.push(f, elTerm)
			p.pos = p.space(i+1, nested)
		case c == '*':
			p.pos = p.space(i+1, nested)
			err = p.repeat(f, i, 0, -1)
		case c == '+':
			p.pos = p.space(i+1, nested)
			err = p.repeat(f, i, 1, -1)
		case c == '?':
			p.pos = p.space(i+1, nested)
			err = p.repeat(f, i, 0, 1)
		case c == '{':
			err = p.braces(f, nested)
		case c == '|':
			p.push(f, elAlt)
			p.pos = p.space(i+1, true)
			f.lastSym = len(f.rule)
		case p.virtual > 0: // end of a group past the depth limit
			p.virtual--
			p.depth--
			if p.at(p.pos) != ')' {
				return p.syntax(p.pos, "expecting ')'")
			}
			p.pos = p.space(p.pos+1, f.nested || p.virtual > 0)
		default: // end of the alternatives of f
			p.push(f, elEnd)
			if p.depthErr == nil {
				p.rules[f.id] = f.rule // a redefinition replaces the rule
			}
			sub := f.id
			frames = frames[:len(frames)-1]
			if len(frames) == 0 {
				return nil
			}
			p.depth--
			f = &frames[len(frames)-1]
			f.lastSym = len(f.rule)
			p.push(f, sub)
			if p.at(p.pos) != ')' {
				return p.syntax(p.pos, "expecting ')'")
			}
			p.pos = p.space(p.pos+1, f.nested)
		}
		if err != nil {
			return err
		}
	}
}

// braces parses {m}, {m,} or {m,n} at p.pos and applies it.
func (p *gbnfParser) braces(f *gframe, nested bool) error {
	at := p.pos
	i := p.space(p.pos+1, nested)
	num := func() (int, error) {
		start := i
		if !isDigit(p.at(i)) {
			return 0, p.syntax(i, "expecting an int")
		}
		n := 0
		for isDigit(p.at(i)) {
			n = min(n*10+int(p.at(i)-'0'), 1<<40)
			i++
		}
		if n > p.lim.MaxRepeat && p.depthErr == nil {
			return 0, &LimitError{Limit: LimitRepeat, Max: p.lim.MaxRepeat, Got: n, Rule: p.ruleName}
		}
		if n > maxRepeat {
			return 0, p.syntax(start, "number of repetitions exceeds %d", maxRepeat)
		}
		return n, nil
	}
	lo, err := num()
	if err != nil {
		return err
	}
	i = p.space(i, nested)
	hi := lo
	switch p.at(i) {
	case '}':
	case ',':
		i = p.space(i+1, nested)
		hi = -1
		if isDigit(p.at(i)) {
			if hi, err = num(); err != nil {
				return err
			}
			i = p.space(i, nested)
		}
		if p.at(i) != '}' {
			return p.syntax(i, "expecting '}'")
		}
	default:
		return p.syntax(i, "expecting ','")
	}
	p.pos = p.space(i+1, nested)
	return p.repeat(f, at, lo, hi)
}

// repeat applies x{lo,hi} (hi < 0: unbounded) to the last item of f the
// way handle_repetitions does:
//
//	S{m,n} --> S S ... S (m times) S'(n-m), S'(k) ::= S S'(k-1) | , S'(1) ::= S |
//	S{m,}  --> S S ... S (m times) S',      S' ::= S S' |
//
// The last item then is the whole expansion, so x{2}{3} repeats "x x".
func (p *gbnfParser) repeat(f *gframe, at, lo, hi int) error {
	if p.depthErr != nil {
		return nil // rules are no longer built
	}
	if f.lastSym == len(f.rule) {
		return p.syntax(at, "expecting preceding item to */+/?/{")
	}
	if hi >= 0 && hi < lo {
		return p.syntax(at, "repetition maximum %d is less than minimum %d", hi, lo)
	}
	prev := append([]int32(nil), f.rule[f.lastSym:]...)
	s := int64(len(prev))
	noMax := hi < 0
	nOpt := int64(1)
	if !noMax {
		nOpt = int64(hi - lo)
	}
	// Charge everything before building anything.
	add := nOpt * (s + 3)
	if lo > 0 {
		add += s * int64(lo-1)
	}
	if nOpt > 0 {
		add++
	}
	p.elems += add
	p.nameBytes += nOpt * int64(len(p.ruleName)+1+decimalLen(int64(len(p.rules))+nOpt))
	if err := p.checkExpanded(); err != nil {
		return err
	}
	p.owner = slices.Grow(p.owner, int(nOpt))
	p.rules = slices.Grow(p.rules, int(nOpt))
	if lo == 0 {
		f.rule = f.rule[:f.lastSym]
	}
	for k := 1; k < lo; k++ {
		f.rule = append(f.rule, prev...)
	}
	last := int32(0)
	buf := make([]int32, 0, nOpt*(s+3)) // one allocation for the rules
	for k := int64(0); k < nOpt; k++ {
		id := p.newID(p.ruleID)
		rec := buf[len(buf) : len(buf) : len(buf)+len(prev)+3]
		rec = append(rec, prev...)
		switch {
		case noMax:
			rec = append(rec, id)
		case k > 0:
			rec = append(rec, last)
		}
		rec = append(rec, elAlt, elEnd)
		buf = buf[:len(buf)+len(rec)]
		p.rules[id] = rec
		last = id
	}
	if nOpt > 0 {
		f.rule = append(f.rule, last)
	}
	return nil
}
