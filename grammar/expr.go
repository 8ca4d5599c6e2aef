package grammar

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxRepeat is the largest repetition count llama.cpp's GBNF parser accepts
// in {m,n}.
const maxRepeat = 2000

// An op is the kind of a grammar expression.
type op uint8

const (
	opLit   op = iota // exact text
	opClass           // one character inside (or, negated, outside) ranges
	opRef             // reference to a named rule
	opSeq             // kids one after another; no kids is the empty string
	opAlt             // one of kids
	opRep             // kids[0] repeated min to max times
)

// A runeRange is the inclusive character range lo-hi.
type runeRange struct{ lo, hi rune }

// An expr is a GBNF expression: the intermediate form between a schema and
// grammar text, kept as a tree so the grammar can be analysed before it is
// written out.
type expr struct {
	op      op
	text    string // opLit: the text; opRef: the rule name
	negated bool   // opClass
	ranges  []runeRange
	kids    []*expr
	min     int
	max     int // opRep; negative means unbounded
}

func lit(s string) *expr    { return &expr{op: opLit, text: s} }
func ref(name string) *expr { return &expr{op: opRef, text: name} }
func opt(e *expr) *expr     { return rep(e, 0, 1) }
func star(e *expr) *expr    { return rep(e, 0, -1) }
func empty() *expr          { return &expr{op: opSeq} }
func oneOf(rs ...rune) []runeRange {
	out := make([]runeRange, len(rs))
	for i, r := range rs {
		out[i] = runeRange{r, r}
	}
	return out
}

// class matches one character in ranges.
func class(ranges ...runeRange) *expr { return &expr{op: opClass, ranges: ranges} }

// notClass matches one character outside ranges.
func notClass(ranges ...runeRange) *expr {
	return &expr{op: opClass, negated: true, ranges: ranges}
}

// seq concatenates kids, flattening nested sequences and merging adjacent
// literals.
func seq(kids ...*expr) *expr {
	out := &expr{op: opSeq}
	for _, k := range kids {
		switch {
		case k.op == opSeq:
			for _, kk := range k.kids {
				out.appendSeq(kk)
			}
		default:
			out.appendSeq(k)
		}
	}
	if len(out.kids) == 1 {
		return out.kids[0]
	}
	return out
}

func (e *expr) appendSeq(k *expr) {
	if k.op == opLit {
		if k.text == "" {
			return
		}
		if n := len(e.kids); n > 0 && e.kids[n-1].op == opLit {
			e.kids[n-1] = lit(e.kids[n-1].text + k.text)
			return
		}
	}
	e.kids = append(e.kids, k)
}

// alt matches any one of kids, flattening nested alternations.
func alt(kids ...*expr) *expr {
	out := &expr{op: opAlt}
	for _, k := range kids {
		if k.op == opAlt {
			out.kids = append(out.kids, k.kids...)
		} else {
			out.kids = append(out.kids, k)
		}
	}
	if len(out.kids) == 1 {
		return out.kids[0]
	}
	return out
}

// rep matches e repeated min to max times (max < 0: unbounded). Counts the
// GBNF parser cannot take are rewritten: a minimum above maxRepeat is split
// into chunks, a maximum above it is dropped, because enforcing it would cost
// one grammar rule per allowed repetition.
func rep(e *expr, min, max int) *expr {
	if max > maxRepeat {
		max = -1
	}
	if max == 0 {
		return empty()
	}
	if min == 1 && max == 1 {
		return e
	}
	if min > maxRepeat {
		var parts []*expr
		for min > maxRepeat {
			parts = append(parts, &expr{op: opRep, kids: []*expr{e}, min: maxRepeat, max: maxRepeat})
			min -= maxRepeat
			if max > 0 {
				max -= maxRepeat
			}
		}
		return seq(append(parts, rep(e, min, max))...)
	}
	return &expr{op: opRep, kids: []*expr{e}, min: min, max: max}
}

// Precedence levels for writing expressions.
const (
	precAlt     = iota // anything goes
	precSeq            // inside a sequence: alternations need parentheses
	precPostfix        // operand of a repetition: sequences need them too
)

// write appends e in GBNF syntax to b.
func (e *expr) write(b *strings.Builder, prec int) {
	switch e.op {
	case opLit:
		writeLiteral(b, e.text)
	case opClass:
		writeClass(b, e.negated, e.ranges)
	case opRef:
		b.WriteString(e.text)
	case opSeq:
		if len(e.kids) == 0 {
			b.WriteString(`""`)
			return
		}
		e.writeJoined(b, prec >= precPostfix, " ", precSeq)
	case opAlt:
		e.writeJoined(b, prec >= precSeq, " | ", precAlt)
	case opRep:
		if prec >= precPostfix {
			b.WriteByte('(')
			defer b.WriteByte(')')
		}
		e.kids[0].write(b, precPostfix)
		switch {
		case e.min == 0 && e.max < 0:
			b.WriteByte('*')
		case e.min == 1 && e.max < 0:
			b.WriteByte('+')
		case e.min == 0 && e.max == 1:
			b.WriteByte('?')
		case e.min == e.max:
			fmt.Fprintf(b, "{%d}", e.min)
		case e.max < 0:
			fmt.Fprintf(b, "{%d,}", e.min)
		default:
			fmt.Fprintf(b, "{%d,%d}", e.min, e.max)
		}
	}
}

func (e *expr) writeJoined(b *strings.Builder, paren bool, sep string, prec int) {
	if paren {
		b.WriteByte('(')
	}
	for i, k := range e.kids {
		if i > 0 {
			b.WriteString(sep)
		}
		k.write(b, prec)
	}
	if paren {
		b.WriteByte(')')
	}
}

// writeLiteral writes s as a GBNF string literal.
func writeLiteral(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			writeChar(b, r)
		}
	}
	b.WriteByte('"')
}

// writeClass writes a GBNF character class.
func writeClass(b *strings.Builder, negated bool, ranges []runeRange) {
	b.WriteByte('[')
	if negated {
		b.WriteByte('^')
	}
	for i, r := range ranges {
		if r == (runeRange{'-', '-'}) && i == len(ranges)-1 {
			b.WriteByte('-') // literal before ']'
			continue
		}
		writeClassChar(b, r.lo)
		if r.hi != r.lo {
			b.WriteByte('-')
			writeClassChar(b, r.hi)
		}
	}
	b.WriteByte(']')
}

func writeClassChar(b *strings.Builder, r rune) {
	switch r {
	case '\\', ']', '[':
		b.WriteByte('\\')
		b.WriteRune(r)
	case '-', '^':
		// '-' would start a range and a leading '^' would negate.
		fmt.Fprintf(b, `\x%02X`, r)
	default:
		writeChar(b, r)
	}
}

// writeChar writes r raw when it is printable and as an escape otherwise.
func writeChar(b *strings.Builder, r rune) {
	switch {
	case r == '\n':
		b.WriteString(`\n`)
	case r == '\r':
		b.WriteString(`\r`)
	case r == '\t':
		b.WriteString(`\t`)
	case r < 0x80 && r >= 0x20 && r != 0x7F:
		b.WriteRune(r)
	case r < 0x100 && (r < 0x20 || r == 0x7F):
		fmt.Fprintf(b, `\x%02X`, r)
	case r >= 0x80 && unicode.IsPrint(r) && utf8.ValidRune(r):
		b.WriteRune(r)
	case r <= 0xFFFF:
		fmt.Fprintf(b, `\u%04X`, r)
	default:
		fmt.Fprintf(b, `\U%08X`, r)
	}
}
