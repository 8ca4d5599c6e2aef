package grammar

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Builder composes a GBNF grammar from literal text, JSON values that
// follow a schema, text that runs up to a closing marker, and rules of
// its caller's own: the grammar of output that writes JSON inside a
// model's own markup, such as a tool call. Build it bottom-up with the
// Expr functions, then call Grammar with the root expression.
//
// A Builder is for one grammar, in one goroutine.
type Builder struct {
	g     *ruleSet
	lim   SchemaLimits
	convs map[string]*converter // by schema document text
	where map[string]*path      // rule name → schema pointer, for errors
}

// Expr is an expression of a Builder's grammar.
type Expr struct{ e *expr }

// NewBuilder returns an empty Builder whose schema documents are each
// within lim, their JSON with the whitespace lim allows (see
// FromSchemaLimits).
func NewBuilder(lim SchemaLimits) *Builder {
	b := &Builder{g: newRuleSet(lim.Whitespace), lim: lim.withDefaults(), convs: map[string]*converter{}, where: map[string]*path{}}
	b.g.reserve("root")
	return b
}

// Lit matches s exactly.
func Lit(s string) Expr { return Expr{lit(s)} }

// Seq matches es one after another.
func Seq(es ...Expr) Expr { return Expr{seq(unwrap(es)...)} }

// Alt matches any one of es.
func Alt(es ...Expr) Expr { return Expr{alt(unwrap(es)...)} }

// Opt matches e or nothing.
func Opt(e Expr) Expr { return Expr{opt(e.e)} }

// Repeat matches e from min to max times (max < 0: without bound).
func Repeat(e Expr, min, max int) Expr { return Expr{rep(e.e, min, max)} }

// Space matches the whitespace a JSON value of b's grammar may end with:
// with WhitespaceFree nothing, a space, or a line break with up to 20
// spaces or tabs; else nothing (an empty expression).
func (b *Builder) Space() Expr { return Expr{b.g.space()} }

func unwrap(es []Expr) []*expr {
	out := make([]*expr, len(es))
	for i, e := range es {
		out[i] = e.e
	}
	return out
}

// Rule defines a rule named after base (made unique) as e, and returns a
// reference to it: a part used more than once is written once.
func (b *Builder) Rule(base string, e Expr) Expr {
	name := b.g.name(base)
	b.g.define(name, e.e)
	return Expr{ref(name)}
}

// Schema returns a JSON value that follows the subschema of doc at the
// JSON pointer at ("#" for doc itself, "#/properties/city" for one of its
// properties). References ("$ref": "#/...") resolve within doc. The value
// ends with the whitespace b allows (see Space). An invalid or unsupported
// schema is an error wrapping ErrInvalidSchema; so is a pointer to
// nothing.
func (b *Builder) Schema(doc json.RawMessage, at string) (Expr, error) {
	c, ok := b.convs[string(doc)]
	if !ok {
		v, err := parseJSON(doc, b.lim)
		if err != nil {
			var le *SchemaLimitError
			if errors.As(err, &le) {
				return Expr{}, le
			}
			return Expr{}, fmt.Errorf("%w: not JSON: %v", ErrInvalidSchema, err)
		}
		c = &converter{doc: v, dec: newDecoder(), g: b.g, refs: map[*schema]string{}, defs: map[string]*schema{}, where: b.where}
		b.convs[string(doc)] = c
	}
	s := newSchema(rootPath)
	s.ref = at
	e, err := c.refRule(s)
	if err != nil {
		return Expr{}, err
	}
	return Expr{e}, nil
}

// TextExcluding matches any text, empty included, that does not contain
// stop: the free text of a field that the markup closes with stop. It
// may end with the first characters of stop (which stop then follows
// whole).
func (b *Builder) TextExcluding(stop string) Expr {
	s := []rune(stop)
	if len(s) == 0 {
		return Expr{empty()}
	}
	// The states of a matcher of stop: state k has read s[:k] as the end
	// of the text. A rule per state, each character leading to the state
	// it gives; reaching len(s) is not allowed.
	alphabet := slices.Compact(slices.Sorted(slices.Values(s)))
	next := func(k int, r rune) int {
		t := append(slices.Clone(s[:k]), r)
		for n := min(len(t), len(s)); n > 0; n-- {
			if slices.Equal(t[len(t)-n:], s[:n]) {
				return n
			}
		}
		return 0
	}
	names := make([]string, len(s))
	for k := range s {
		names[k] = b.g.name("text")
	}
	for k := range s {
		var alts []*expr
		var toZero []runeRange // characters of stop that lead back to state 0
		for to := range len(s) {
			var rs []rune
			for _, r := range alphabet {
				if n := next(k, r); n == to {
					rs = append(rs, r)
				}
			}
			if to == 0 {
				toZero = oneOf(rs...)
				continue
			}
			if len(rs) > 0 {
				alts = append(alts, seq(class(oneOf(rs...)...), ref(names[to])))
			}
		}
		// Characters outside stop's, and those of stop that start over.
		others := notClass(oneOf(alphabet...)...)
		if len(toZero) > 0 {
			others = alt(others, class(toZero...))
		}
		alts = append(alts, seq(others, ref(names[0])))
		b.g.define(names[k], opt(alt(alts...)))
	}
	return Expr{ref(names[0])}
}

// Grammar returns the grammar text, its root rule matching root. It
// fails (wrapping ErrInvalidSchema) when a rule can reach itself without
// consuming text, which llama.cpp refuses, or when root matches nothing
// finite.
func (b *Builder) Grammar(root Expr) (string, error) {
	b.g.define("root", root.e)
	b.g.addBuiltins()
	if n := b.g.leftRecursive(); n != "" {
		ptr := b.where[n]
		if ptr == nil {
			ptr = rootPath
		}
		return "", invalid(ptr, "schema refers to itself before any JSON text is written")
	}
	if !b.g.productive()["root"] {
		return "", invalid(rootPath, "schema accepts no finite value (required properties or items recurse without end)")
	}
	return b.g.String(), nil
}

// WithPrefix returns gbnf changed so that its output begins with free
// text that does not contain stop (none when stop is ""), then the
// literal text lit, then what gbnf's root rule matches: how a forced
// output lets a model finish what its prompt opened (its reasoning) and
// close it, before the output the grammar forces. The root rule keeps its
// place wherever gbnf refers to it. gbnf is assumed valid (see Validate).
func WithPrefix(gbnf, stop, lit string) string {
	if stop == "" && lit == "" {
		return gbnf
	}
	b := NewBuilder(SchemaLimits{})
	scanGBNF(gbnf, func(tok string, name bool) {
		if name && !b.g.used[tok] {
			b.g.reserve(tok)
		}
	})
	body := b.g.name("root-body")
	var out strings.Builder
	scanGBNF(gbnf, func(tok string, name bool) {
		if name && tok == "root" {
			tok = body
		}
		out.WriteString(tok)
	})
	if out.Len() > 0 && !strings.HasSuffix(out.String(), "\n") {
		out.WriteByte('\n')
	}
	prefix := Lit(lit)
	if stop != "" {
		prefix = Seq(b.TextExcluding(stop), prefix)
	}
	// The rules written here refer to body, which gbnf defines.
	b.g.define("root", seq(prefix.e, ref(body)))
	out.WriteString(b.g.String())
	return out.String()
}

// scanGBNF splits GBNF text into pieces that together are the text,
// calling each with name true when it is a rule name (a name defined or
// referred to), false for anything else: literals, character classes,
// comments, operators and space.
func scanGBNF(src string, each func(tok string, name bool)) {
	isName := func(c byte) bool {
		return c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	for i := 0; i < len(src); {
		c := src[i]
		j := i + 1
		switch {
		case isName(c):
			for j < len(src) && isName(src[j]) {
				j++
			}
			// {m,n} counts are digits, never names.
			if c < '0' || c > '9' {
				each(src[i:j], true)
				i = j
				continue
			}
		case c == '"' || c == '[':
			end := byte('"')
			if c == '[' {
				end = ']'
			}
			for j < len(src) && src[j] != end {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(src))
		case c == '#':
			for j < len(src) && src[j] != '\n' {
				j++
			}
		}
		each(src[i:j], false)
		i = j
	}
}
