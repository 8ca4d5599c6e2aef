package grammar

import (
	"errors"
	"fmt"
	"strings"
)

// Limits bound what a GBNF grammar may cost llama.cpp. Validate checks them
// before llama.cpp sees the text, because llama.cpp parses and runs
// grammars with unbounded recursion on the C stack (a deep grammar crashes
// the process) and with no bound on memory or time.
//
// A zero (or negative) field means the value in DefaultLimits.
type Limits struct {
	// MaxBytes bounds the length of the grammar text in bytes.
	MaxBytes int
	// MaxDepth bounds the nesting of parenthesized groups. llama.cpp's
	// parser recurses once per level, with about 330 bytes of C stack each:
	// around 25000 levels crash it on an 8 MiB stack.
	MaxDepth int
	// MaxRules bounds the number of rule definitions (name ::= ...).
	MaxRules int
	// MaxRepeat bounds the counts m and n in x{m,n}. llama.cpp refuses
	// counts above 2000 whatever this is.
	MaxRepeat int
	// MaxExpandedBytes bounds an estimate of the memory llama.cpp allocates
	// for the grammar once it has expanded every repetition x{m,n} into m
	// copies of x and n-m generated rules, each generated rule (and each
	// group) named after the rule it is in. The estimate is within 10% of
	// measured peaks.
	MaxExpandedBytes int
	// MaxSteps bounds the calls llama.cpp makes in one of its recursive
	// explorations: the one that finds every character that may come next
	// at a point of the grammar (run for every generated character, from
	// every point after a terminal, with any enclosing rules), and its
	// left-recursion check of one rule. It bounds the C stack depth of those
	// recursions too (about 150 bytes a call). Their cost grows with the
	// square of this count: about 40 ms per generated character at 4000.
	MaxSteps int
	// MaxSetupSteps bounds the work llama.cpp does once, when it loads the
	// grammar: grammar elements scanned by its left-recursion check of all
	// rules, plus the calls that find where the grammar can start.
	MaxSetupSteps int
}

// DefaultLimits are the limits Validate applies in place of zero fields.
// FromSchema's grammars stay within them for realistic schemas: a schema
// of 10 objects of 10 properties nested 3 deep gives 95 KB of text, 507
// rules, 9.4 MB expanded and 40 steps; 20 levels of nested objects with
// strings of maxLength 2000 give 25 MB expanded (every maxLength costs
// about 200 bytes per allowed character, more with long property names).
// Steps grow by about 4 per optional property of one object, so objects
// with more than about 1000 optional properties exceed MaxSteps.
var DefaultLimits = Limits{
	MaxBytes:         1 << 20,
	MaxDepth:         64,
	MaxRules:         10000,
	MaxRepeat:        maxRepeat,
	MaxExpandedBytes: 32 << 20,
	MaxSteps:         4096,
	MaxSetupSteps:    16 << 20,
}

// withDefaults returns l with zero fields replaced by DefaultLimits.
func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxBytes, DefaultLimits.MaxBytes)
	def(&l.MaxDepth, DefaultLimits.MaxDepth)
	def(&l.MaxRules, DefaultLimits.MaxRules)
	def(&l.MaxRepeat, DefaultLimits.MaxRepeat)
	def(&l.MaxExpandedBytes, DefaultLimits.MaxExpandedBytes)
	def(&l.MaxSteps, DefaultLimits.MaxSteps)
	def(&l.MaxSetupSteps, DefaultLimits.MaxSetupSteps)
	return l
}

// ErrInvalidGrammar is wrapped by every error of Validate: the grammar
// exceeds a limit (*LimitError), is not valid GBNF (*SyntaxError), or is
// valid GBNF that llama.cpp cannot run safely.
var ErrInvalidGrammar = errors.New("invalid grammar")

// The names a LimitError gives the limits, one for each field of Limits.
const (
	LimitSize         = "size"             // MaxBytes
	LimitDepth        = "nesting depth"    // MaxDepth
	LimitRules        = "rule count"       // MaxRules
	LimitRepeat       = "repetition count" // MaxRepeat
	LimitExpandedSize = "expanded size"    // MaxExpandedBytes
	LimitSteps        = "step count"       // MaxSteps
	LimitSetupSteps   = "setup step count" // MaxSetupSteps
)

// A LimitError reports a grammar exceeding one of the Limits.
type LimitError struct {
	Limit string // which limit: one of the Limit* names
	Max   int    // the limit
	// Got is the grammar's value, or a lower bound of it where counting
	// stopped at the limit; -1 means it grows without bound (the grammar
	// makes llama.cpp's work grow with the length of the generated text).
	Got  int
	Rule string // where the limit was exceeded, if known
}

func (e *LimitError) Error() string {
	unit := ""
	if e.Limit == LimitSize || e.Limit == LimitExpandedSize {
		unit = " bytes"
	}
	in := ""
	if e.Rule != "" {
		in = fmt.Sprintf(" in rule %q", e.Rule)
	}
	if e.Got < 0 {
		return fmt.Sprintf("grammar %s is unbounded%s: a rule nests inside itself with only optional text after it, "+
			"so llama.cpp's work would grow with the generated text (the limit is %d)", e.Limit, in, e.Max)
	}
	return fmt.Sprintf("grammar %s %d%s exceeds the limit of %d%s%s", e.Limit, e.Got, unit, e.Max, unit, in)
}

// Unwrap makes a LimitError match ErrInvalidGrammar.
func (e *LimitError) Unwrap() error { return ErrInvalidGrammar }

// A SyntaxError reports text llama.cpp's GBNF parser would reject, or a
// grammar it would accept but cannot run safely (left recursion).
type SyntaxError struct {
	Offset int // byte offset of the fault in the text, or -1
	Line   int // 1-based line of Offset, 0 if Offset is -1
	Column int // 1-based byte column of Offset, 0 if Offset is -1
	Msg    string
}

func (e *SyntaxError) Error() string {
	if e.Offset < 0 {
		return "grammar: " + e.Msg
	}
	return fmt.Sprintf("grammar: line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// Unwrap makes a SyntaxError match ErrInvalidGrammar.
func (e *SyntaxError) Unwrap() error { return ErrInvalidGrammar }

// Validate checks, in time linear in the size of the grammar and of its
// expansion, and without recursion, that gbnf is a grammar llama.cpp
// accepts and can run safely within lim (zero fields: the DefaultLimits
// values). It returns nil, a *LimitError or a *SyntaxError, both wrapping
// ErrInvalidGrammar. Grammars from FromSchema need checking too: their
// size grows with the schema.
//
// Validate follows llama.cpp's GBNF parser byte for byte (strings and
// character classes with their escapes, comments, rule definitions,
// groups, repetitions, <token> references) and builds the same rules,
// expanding repetitions as llama.cpp does, so the limits hold for what
// llama.cpp will build. Beyond the limits it refuses what llama.cpp would
// refuse (syntax errors, undefined rules, no "root" rule) and what would
// crash or exhaust it:
//   - x{m,n} with n < m, for which llama.cpp generates rules until memory
//     runs out;
//   - left recursion through rules that match only the empty string but
//     have no empty alternative, which llama.cpp's own check misses and then
//     recurses on until the C stack overflows;
//   - a rule named root referred to only as root{0} and never defined,
//     which makes llama.cpp read past its rules;
//   - NUL bytes, after which llama.cpp would ignore the text.
//
// It does not bound the growth of llama.cpp's parse stacks with the
// generated text for ambiguous grammars, where several parses of the same
// text stay alive: that depends on the text, not only on the grammar.
//
// Validate allocates up to about 1.5 times the grammar's expanded size
// (and 20 bytes per byte of text), taking about 2 ms per MB of it: about
// 50 MB and 70 ms for a grammar at the default MaxExpandedBytes.
func Validate(gbnf string, lim Limits) error {
	lim = lim.withDefaults()
	if len(gbnf) > lim.MaxBytes {
		return &LimitError{Limit: LimitSize, Max: lim.MaxBytes, Got: len(gbnf)}
	}
	if i := strings.IndexByte(gbnf, 0); i >= 0 {
		return syntaxError(gbnf, i, "NUL byte")
	}
	p := newGBNFParser(gbnf, lim)
	if err := p.parse(); err != nil {
		return err
	}
	return p.analyze()
}

// syntaxError returns a *SyntaxError at byte offset off of src.
func syntaxError(src string, off int, format string, args ...any) *SyntaxError {
	e := &SyntaxError{Offset: off, Msg: fmt.Sprintf(format, args...)}
	if off >= 0 {
		off = min(off, len(src))
		e.Line = 1 + strings.Count(src[:off], "\n")
		e.Column = 1 + off - (strings.LastIndexByte(src[:off], '\n') + 1)
	}
	return e
}
