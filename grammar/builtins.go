package grammar

// Builtin rules. Every rule for a JSON value ends by consuming the
// whitespace the grammar allows (g.space(): the rule "space", or nothing),
// so sequences of values need no whitespace of their own; only the text
// after '{' and '[' adds g.space(), and after ':' and ',' g.sep().

var (
	digit    = class(runeRange{'0', '9'})
	digit19  = class(runeRange{'1', '9'})
	hexDigit = class(runeRange{'0', '9'}, runeRange{'a', 'f'}, runeRange{'A', 'F'})
	quote    = lit(`"`)
)

// builtins defines the shared rules by name, for the grammar g. A rule
// referring to one of these names gets it added by (*ruleSet).addBuiltins.
var builtins = map[string]func(g *ruleSet) *expr{
	// Optional whitespace: nothing, one space, or one line break with
	// limited indentation, so a model can pretty-print but not ramble.
	// Only WhitespaceFree refers to it.
	"space": func(*ruleSet) *expr {
		return alt(empty(), lit(" "), seq(lit("\n"), rep(class(oneOf(' ', '\t')...), 0, 20)))
	},
	// One character of a JSON string, raw or escaped.
	"char": func(*ruleSet) *expr {
		return alt(
			notClass(append(oneOf('"', '\\', 0x7F), runeRange{0, 0x1F})...),
			ref("escape"),
		)
	},
	"escape": func(*ruleSet) *expr {
		return seq(lit(`\`), alt(class(oneOf('"', '\\', '/', 'b', 'f', 'n', 'r', 't')...), seq(lit("u"), rep(hexDigit, 4, 4))))
	},
	// The rest of a JSON string after its opening quote.
	"string-tail": func(*ruleSet) *expr { return seq(star(ref("char")), quote) },
	"value": func(*ruleSet) *expr {
		return alt(ref("object"), ref("array"), ref("string"), ref("number"), ref("boolean"), ref("null"))
	},
	"object": func(g *ruleSet) *expr {
		member := seq(ref("string"), lit(":"), g.sep(), ref("value"))
		return g.commaList("{", member, 0, -1, "}")
	},
	"array": func(g *ruleSet) *expr {
		return g.commaList("[", ref("value"), 0, -1, "]")
	},
	"string": func(g *ruleSet) *expr {
		return seq(quote, star(ref("char")), quote, g.space())
	},
	// Numbers are limited to 16 integral, 16 fractional and 3 exponent
	// digits so a model cannot loop on digits forever.
	"number": func(g *ruleSet) *expr {
		return seq(
			opt(lit("-")),
			alt(lit("0"), seq(digit19, rep(digit, 0, 15))),
			opt(seq(lit("."), rep(digit, 1, 16))),
			opt(seq(class(oneOf('e', 'E')...), opt(class(oneOf('+', '-')...)), rep(digit, 1, 3))),
			g.space(),
		)
	},
	"integer": func(g *ruleSet) *expr {
		return seq(opt(lit("-")), alt(lit("0"), seq(digit19, rep(digit, 0, 15))), g.space())
	},
	"boolean": func(g *ruleSet) *expr { return seq(alt(lit("true"), lit("false")), g.space()) },
	"null":    func(g *ruleSet) *expr { return seq(lit("null"), g.space()) },

	// String formats, quotes included. Dates and times follow RFC 3339.
	"date": func(g *ruleSet) *expr { return seq(quote, ref("date-part"), quote, g.space()) },
	"time": func(g *ruleSet) *expr { return seq(quote, ref("time-part"), quote, g.space()) },
	"date-time": func(g *ruleSet) *expr {
		return seq(quote, ref("date-part"), class(oneOf('T', 't')...), ref("time-part"), quote, g.space())
	},
	"uuid": func(g *ruleSet) *expr {
		hex := func(n int) *expr { return rep(hexDigit, n, n) }
		return seq(quote, hex(8), lit("-"), hex(4), lit("-"), hex(4), lit("-"), hex(4), lit("-"), hex(12), quote, g.space())
	},
	"date-part": func(*ruleSet) *expr {
		month := alt(seq(lit("0"), digit19), seq(lit("1"), class(runeRange{'0', '2'})))
		day := alt(seq(lit("0"), digit19), seq(class(runeRange{'1', '2'}), digit), seq(lit("3"), class(runeRange{'0', '1'})))
		return seq(rep(digit, 4, 4), lit("-"), month, lit("-"), day)
	},
	"time-part": func(*ruleSet) *expr {
		hour := alt(seq(class(runeRange{'0', '1'}), digit), seq(lit("2"), class(runeRange{'0', '3'})))
		minute := seq(class(runeRange{'0', '5'}), digit)
		second := alt(minute, lit("60"))
		offset := alt(class(oneOf('Z', 'z')...), seq(class(oneOf('+', '-')...), hour, lit(":"), minute))
		return seq(hour, lit(":"), minute, lit(":"), second, opt(seq(lit("."), rep(digit, 1, 9))), offset)
	},
}

// commaList matches open, lo to hi items separated by commas, and close
// (hi < 0: unbounded), with whitespace after each punctuation mark.
func (g *ruleSet) commaList(open string, item *expr, lo, hi int, close string) *expr {
	items := empty()
	if hi != 0 {
		tail := seq(lit(","), g.sep(), item)
		items = seq(item, rep(tail, max(lo-1, 0), decrement(hi)))
		if lo == 0 {
			items = opt(items)
		}
	}
	return seq(lit(open), g.space(), items, lit(close), g.space())
}

// decrement returns n-1 for a bound n, keeping unbounded (negative) as is.
func decrement(n int) int {
	if n < 0 {
		return n
	}
	return n - 1
}

// addBuiltins defines every builtin rule that a defined rule refers to.
func (g *ruleSet) addBuiltins() {
	for i := 0; i < len(g.order); i++ { // g.order grows as builtins are added
		var walk func(e *expr)
		walk = func(e *expr) {
			if e.op == opRef {
				if g.body[e.text] == nil && builtins[e.text] != nil {
					g.define(e.text, builtins[e.text](g))
				}
			}
			for _, k := range e.kids {
				walk(k)
			}
		}
		if e := g.body[g.order[i]]; e != nil {
			walk(e)
		}
	}
}
