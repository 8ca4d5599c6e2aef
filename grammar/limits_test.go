package grammar

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// repeat returns s repeated n times, for building grammars.
func repeat(s string, n int) string { return strings.Repeat(s, n) }

// nested returns a root rule with depth nested groups around "a".
func nested(depth int) string {
	return "root ::= " + repeat("(", depth) + `"a"` + repeat(")", depth) + "\n"
}

// small are limits low enough for short test grammars to reach.
var small = Limits{MaxBytes: 200, MaxDepth: 3, MaxRules: 4, MaxRepeat: 10, MaxExpandedBytes: 10000, MaxSteps: 20, MaxSetupSteps: 1000}

func TestValidate(t *testing.T) {
	// Every grammar here marked as crashing or exhausting llama.cpp did so
	// when fed to the llama.cpp corral linked in December 2025 (ec98e2002).
	deepPadded := nested(65) + repeat("pad ::= \"padding\" [a-z]* (\"x\" | \"y\")\n", 3000)
	deepPadded = strings.Replace(deepPadded, "root ::= (", "root ::= pad (", 1)
	for _, tc := range []struct {
		name    string
		grammar string
		lim     Limits
		limit   string // the LimitError expected; "syntax": a SyntaxError; "": none
		got     int    // if not 0, the LimitError's Got
		msg     string // if not "", in the message
	}{
		// Nesting.
		{name: "60000 nested groups (crashes llama.cpp)", grammar: nested(60000), limit: LimitDepth, got: 60000,
			msg: `grammar nesting depth 60000 exceeds the limit of 64 in rule "root"`},
		{name: "120 KB under the size limit but too deep", grammar: deepPadded, limit: LimitDepth, got: 65},
		{name: "depth at the limit", grammar: nested(64)},
		{name: "depth over the limit", grammar: nested(4), lim: small, limit: LimitDepth, got: 4},
		{name: "depth counted over a later syntax error", grammar: nested(70) + "x ::= (", limit: LimitDepth, got: 70},
		{name: "deepest group anywhere", grammar: "root ::= (\"a\") ((((\"b\")))) | ((\"c\"))\n", lim: small, limit: LimitDepth, got: 4},
		{name: "groups across lines", grammar: "root ::= (\n(\n(\n(\"a\")\n)\n)\n)\n", lim: small, limit: LimitDepth, got: 4},
		{
			name: "parentheses in strings, classes, comments and tokens do not count",
			grammar: `root ::= "((((" "\"((((" [((((] [\](((] "\x28(((" | # ((((` + "\n" +
				`  <((((> | !<((((> | <[40]> | "é((((" "\\" "((((" [^(((] [(-)]` + "\n" +
				`# ((((((((` + "\n",
			lim: small,
		},
		{name: "a multibyte lead byte swallows the quote, as in llama.cpp", grammar: "root ::= \"\xc3\" (((\"a\")))\"\n", lim: small, limit: "syntax"},

		// Size and counts.
		{name: "size", grammar: "root ::= \"a\"\n" + repeat("#", 300), lim: small, limit: LimitSize, got: 313},
		{name: "size of default", grammar: "root ::= \"" + repeat("a", 1<<20) + "\"", limit: LimitSize, msg: "grammar size 1048587 bytes exceeds the limit of 1048576 bytes"},
		{name: "rule count", grammar: "root ::= a\na ::= b\nb ::= c\nc ::= d\nd ::= \"x\"\n", lim: small, limit: LimitRules, got: 5},
		{name: "rule count within", grammar: "root ::= a\na ::= b\nb ::= c\nc ::= \"x\"\n", lim: small},
		{name: "repetition count", grammar: `root ::= "x"{0,100000}`, limit: LimitRepeat, got: 100000},
		{name: "repetition minimum", grammar: `root ::= "x"{11}`, lim: small, limit: LimitRepeat, got: 11},
		{name: "repetition over llama.cpp's limit", grammar: `root ::= "x"{2001,}`, lim: Limits{MaxRepeat: 5000}, limit: "syntax"},
		{name: "repetition within", grammar: `root ::= "x"{2000} [a-z]{0,2000} "y"{3,}`},

		// Expansion of repetitions.
		{name: "chained repetitions multiply (exhausts llama.cpp)", grammar: `root ::= "a"{2000}{2000}{2000}`, limit: LimitExpandedSize},
		{name: "long literal repeated", grammar: `root ::= "` + repeat("a", 100000) + `"{2000}`, limit: LimitExpandedSize},
		{name: "maximum below minimum (2^64 rules in llama.cpp)", grammar: `root ::= "a"{5,3}`, limit: "syntax", msg: "less than minimum"},
		{
			name:    "long rule name copied into every group's name (1.3 GB in llama.cpp)",
			grammar: "root ::= " + repeat("r", 60000) + "\n" + repeat("r", 60000) + " ::= " + repeat("()", 20000) + ` "a"` + "\n",
			limit:   LimitExpandedSize,
		},
		{name: "expansion within", grammar: `root ::= ("a"{2000}){2000}`},

		// llama.cpp's recursions.
		{
			name:    "60000 empty rules in a row (crashes llama.cpp)",
			grammar: "root ::= " + repeat("x ", 60000) + "\"a\"\nx ::= \"\"\n",
			limit:   LimitSteps,
		},
		{name: "empty rules in a row within", grammar: "root ::= " + repeat("x ", 1000) + "\"a\"\nx ::= \"\"\n"},
		{name: "exponential alternatives (hangs llama.cpp)", grammar: exponential(40), limit: LimitSteps},
		{name: "exponential alternatives within", grammar: exponential(10)},
		{name: "exponential empty alternatives (hangs llama.cpp)", grammar: "root ::= " + repeat("x ", 40) + "\"a\"\nx ::= \"\" | \"\"\n", limit: LimitSteps},
		{
			name:    "nesting before optional text (work grows with the output)",
			grammar: "root ::= \"a\" root x | \"\"\nx ::= \"\"\n", limit: LimitSteps, got: -1,
			msg: `grammar step count is unbounded in rule "root"`,
		},
		{name: "nesting before required text", grammar: "root ::= \"a\" root \"b\" x | \"\"\nx ::= \"\"\n"},
		{name: "tail nesting", grammar: "root ::= \"a\" root | \"\"\n"},
		{name: "right recursion through groups", grammar: "root ::= list\nlist ::= item (\",\" list)?\nitem ::= [a-z]+\n"},
		{name: "right recursion with optional tail", grammar: "expr ::= term ((\"+\" | \"-\") expr)? ws\nterm ::= [0-9]+\nws ::= \" \"?\nroot ::= expr\n", limit: LimitSteps, got: -1},
		{name: "many optional items", grammar: "root ::= " + repeat(`"a"? `, 30), lim: small, limit: LimitSteps},
		{name: "setup steps", grammar: `root ::= "a"{2000}`, lim: Limits{MaxSetupSteps: 100}, limit: LimitSetupSteps, got: 2002},
		{name: "nullable repetitions in a row (hang llama.cpp)", grammar: "root ::= " + repeat(`x{0,10} `, 10) + "\nx ::= \"\" | \"a\"\n", limit: LimitSteps},

		// Refused as llama.cpp would, or where it would crash.
		{name: "left recursion", grammar: "root ::= root \"a\" | \"b\"\n", limit: "syntax", msg: `rule "root" is left-recursive`},
		{name: "left recursion through an empty rule (crashes llama.cpp)", grammar: "root ::= x root \"a\" | \"b\"\nx ::= y\ny ::= \"\"\n", limit: "syntax", msg: "left-recursive"},
		{name: "left recursion through a group", grammar: "root ::= (x? \"\") root \"a\" | \"b\"\nx ::= \"c\"\n", limit: "syntax", msg: "left-recursive"},
		{name: "root only as root{0} (crashes llama.cpp)", grammar: `x ::= root{0} "a"`, limit: "syntax", msg: `undefined rule "root"`},
		{name: "undefined rule", grammar: `root ::= x`, limit: "syntax", msg: `undefined rule "x"`},
		{name: "no root", grammar: `x ::= "a"`, limit: "syntax", msg: "no rule named root"},
		{name: "empty", grammar: "", limit: "syntax"},
		{name: "NUL", grammar: "root ::= \"a\"\x00(((", limit: "syntax", msg: "line 1, column 13: NUL byte"},
		{name: "unclosed group", grammar: `root ::= ("a"`, limit: "syntax", msg: "expecting ')'"},
		{name: "unclosed string", grammar: `root ::= "a`, limit: "syntax"},
		{name: "unknown escape", grammar: `root ::= "\q"`, limit: "syntax", msg: "unknown escape"},
		{name: "nothing to repeat", grammar: `root ::= "a" | *`, limit: "syntax"},
		{name: "repeat an empty string", grammar: `root ::= ""*`, limit: "syntax"},
		{name: "empty body swallows the next line", grammar: "root ::=\nx ::= \"a\"\n", limit: "syntax", msg: "line 2, column 3: expecting newline or end"},
		{name: "redefinition replaces", grammar: "root ::= \"a\"\nroot ::= \"b\"\n"},
		{name: "tokens", grammar: "root ::= <think> [^<]* !<[12]> <[13]>\n"},
		{name: "CRLF and comments", grammar: "# c\r\nroot ::= a | # c\r\n  \"b\" # c\r\na ::= [a-z]{1,3}\r\n"},
		{name: "alternatives on the next line", grammar: "root ::= \"a\"\n  | \"b\"\n", limit: "syntax", msg: "expecting name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.grammar, tc.lim)
			if err != nil && !errors.Is(err, ErrInvalidGrammar) {
				t.Errorf("error %v does not wrap ErrInvalidGrammar", err)
			}
			var le *LimitError
			var se *SyntaxError
			switch {
			case tc.limit == "":
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
			case tc.limit == "syntax":
				if !errors.As(err, &se) {
					t.Fatalf("Validate = %v, want a SyntaxError", err)
				}
			default:
				if !errors.As(err, &le) || le.Limit != tc.limit {
					t.Fatalf("Validate = %v, want the %s limit", err, tc.limit)
				}
				if tc.got != 0 && le.Got != tc.got {
					t.Errorf("Got = %d, want %d", le.Got, tc.got)
				}
				if le.Got >= 0 && le.Got <= le.Max {
					t.Errorf("Got %d is within Max %d", le.Got, le.Max)
				}
			}
			if tc.msg != "" && (err == nil || !strings.Contains(err.Error(), tc.msg)) {
				t.Errorf("Validate = %v, want it to mention %q", err, tc.msg)
			}
		})
	}
}

// exponential returns n rules each referring twice to the next: llama.cpp
// explores all 2^n paths.
func exponential(n int) string {
	var b strings.Builder
	b.WriteString("root ::= r0\n")
	for i := range n {
		fmt.Fprintf(&b, "r%d ::= r%d | r%d\n", i, i+1, i+1)
	}
	fmt.Fprintf(&b, "r%d ::= \"a\"\n", n)
	return b.String()
}

func TestDefaultLimits(t *testing.T) {
	if got := (Limits{}).withDefaults(); got != DefaultLimits {
		t.Errorf("zero Limits = %+v, want DefaultLimits", got)
	}
	lim := Limits{MaxDepth: 2, MaxSteps: -1}.withDefaults()
	if lim.MaxDepth != 2 || lim.MaxSteps != DefaultLimits.MaxSteps || lim.MaxBytes != DefaultLimits.MaxBytes {
		t.Errorf("withDefaults = %+v", lim)
	}
}

func TestLimitErrorMessages(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&LimitError{Limit: LimitDepth, Max: 64, Got: 60001}, "grammar nesting depth 60001 exceeds the limit of 64"},
		{&LimitError{Limit: LimitExpandedSize, Max: 10, Got: 11, Rule: "a"}, `grammar expanded size 11 bytes exceeds the limit of 10 bytes in rule "a"`},
		{&SyntaxError{Offset: -1, Msg: "m"}, "grammar: m"},
		{syntaxError("ab\ncd", 4, "m %d", 1), "grammar: line 2, column 2: m 1"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

// schemaGrammars returns grammars FromSchema makes: for this package's
// schema test cases and for realistic nested and large schemas.
func schemaGrammars(t testing.TB) map[string]string {
	out := map[string]string{"JSONObject": JSONObject, "JSONObjectFree": JSONObjectFree, "JSONObjectSpaced": JSONObjectSpaced}
	add := func(name, schema string) {
		g, err := FromSchema([]byte(schema))
		if err != nil {
			t.Fatalf("FromSchema(%s): %v", name, err)
		}
		out[name] = g
		for _, ws := range []Whitespace{WhitespaceFree, WhitespaceSpaced} {
			if g, err = FromSchemaLimits([]byte(schema), SchemaLimits{Whitespace: ws}); err != nil {
				t.Fatalf("FromSchemaLimits(%s, %v): %v", name, ws, err)
			}
			out[name+", "+ws.String()] = g
		}
	}
	for _, tc := range schemaCases {
		add(tc.name, tc.schema)
	}
	add("100 nested arrays", repeat(`{"items":`, 100)+`{"type":"integer"}`+repeat(`}`, 100))
	add("long strings", `{"type":"string","minLength":10000,"maxLength":12000}`)
	add("long arrays", `{"type":"array","items":{"type":"string","maxLength":2000},"minItems":1000,"maxItems":2000}`)
	add("nested patterns", `{"type":"string","pattern":"^(((((((((((a|b)+c)*)?d){2,5})|e)+)f)*)|g)+)$"}`)
	add("repeated optional group", `{"type":"string","pattern":"^([a-z]*\\.?)+@(\\w*-?)*$"}`)
	for _, c := range []struct{ objects, props, maxLength, depth int }{
		{10, 10, 200, 3}, {3, 30, 100, 5}, {1, 5, 2000, 20}, {3, 10, 200, 20}, {1, 200, 100, 0},
	} {
		add(fmt.Sprintf("%d objects of %d properties %d deep, maxLength %d", c.objects, c.props, c.depth, c.maxLength),
			objectSchema(c.objects, c.props, c.maxLength, c.depth))
	}
	add("recursive tree", `{"$defs": {"node": {"type": "object", "properties": {"name": {"type": "string"},
		"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}, "meta": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
		"required": ["name"]}}, "$ref": "#/$defs/node"}`)
	return out
}

// objectSchema returns a schema of objects objects, each with props
// properties of assorted types, the first of which nests another such
// object depth times.
func objectSchema(objects, props, maxLength, depth int) string {
	var b strings.Builder
	var obj func(d int)
	obj = func(d int) {
		b.WriteString(`{"type":"object","additionalProperties":false,"properties":{`)
		for i := range props {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"property_%d":`, i)
			switch {
			case i == 0 && d < depth:
				obj(d + 1)
			case i%4 == 1:
				fmt.Fprintf(&b, `{"type":"string","maxLength":%d}`, maxLength)
			case i%4 == 2:
				b.WriteString(`{"type":"array","items":{"type":"integer","minimum":0,"maximum":1000},"maxItems":20}`)
			case i%4 == 3:
				b.WriteString(`{"enum":["red","green","blue"]}`)
			default:
				b.WriteString(`{"type":["string","null"],"format":"date-time"}`)
			}
		}
		b.WriteString(`},"required":["property_0"]}`)
	}
	b.WriteString(`{"type":"object","properties":{`)
	for i := range objects {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"object_%d":`, i)
		obj(0)
	}
	b.WriteString(`}}`)
	return b.String()
}

func TestValidateSchemaGrammars(t *testing.T) {
	for name, g := range schemaGrammars(t) {
		if err := Validate(g, DefaultLimits); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// lexCounts scans a grammar independently of Validate, as a flat state
// machine following llama.cpp's lexical rules, and returns the deepest
// nesting of parentheses, the rule definitions and the largest {m,n} count
// outside strings, classes, comments and tokens. It is only meaningful for
// grammars llama.cpp accepts.
func lexCounts(g string) (depth, rules, repeat int) {
	d := 0
	for i := 0; i < len(g); {
		switch c := g[i]; c {
		case '"', '[':
			end := byte('"')
			if c == '[' {
				end = ']'
			}
			i++
			for i < len(g) && g[i] != end {
				switch {
				case g[i] == '\\':
					i += 2 + map[byte]int{'x': 2, 'u': 4, 'U': 8}[g[min(i+1, len(g)-1)]]
				default:
					i += utf8Length[g[i]>>4]
				}
			}
			i++
		case '<':
			for i < len(g) && g[i] != '>' {
				i++
			}
			i++
		case '#':
			for i < len(g) && g[i] != '\n' && g[i] != '\r' {
				i++
			}
		case '(':
			d++
			depth = max(depth, d)
			i++
		case ')':
			d--
			i++
		case ':':
			if strings.HasPrefix(g[i:], "::=") {
				rules++
			}
			i++
		case '{':
			i++
			for i < len(g) && g[i] != '}' {
				if g[i] == '#' {
					for i < len(g) && g[i] != '\n' && g[i] != '\r' {
						i++
					}
					continue
				}
				n := 0
				for i < len(g) && '0' <= g[i] && g[i] <= '9' {
					n = min(n*10+int(g[i]-'0'), 1<<30)
					i++
				}
				repeat = max(repeat, n)
				if i < len(g) && g[i] != '}' {
					i++
				}
			}
		default:
			i++
		}
	}
	return depth, rules, repeat
}

func TestLexCounts(t *testing.T) {
	d, r, n := lexCounts("root ::= ((\"(\\\"(\" [(\\]] <(> x{2, 30})) # (((\nx ::= \"a\"")
	if d != 2 || r != 2 || n != 30 {
		t.Errorf("lexCounts = %d, %d, %d, want 2, 2, 30", d, r, n)
	}
}

// FuzzValidate checks that Validate never panics, that its errors are
// typed and wrap ErrInvalidGrammar, that it is deterministic, and that no
// grammar it accepts exceeds a limit that an independent scan can measure.
func FuzzValidate(f *testing.F) {
	for _, g := range schemaGrammars(f) {
		if len(g) < 4096 {
			f.Add(g)
		}
	}
	for _, g := range []string{
		nested(70), exponential(12), "root ::= \"a\" root x | \"\"\nx ::= \"\"\n", `root ::= "a"{5,3}`,
		"root ::= x root \"a\" | \"b\"\nx ::= y\ny ::= \"\"\n", `x ::= root{0} "a"`, `root ::= "a"{2}{3}{4}`,
		"root ::= <think> [^<]* !<[12]> <[13]>\n", "root ::= ( # )\n\"a\" )", "root ::= \"\xc3\" (((\"a\")))\"\n",
		"root ::= [a-\\]] \"\\u00e9\\U0001F600\\x41\" . | \"\"\n",
	} {
		f.Add(g)
	}
	f.Fuzz(func(t *testing.T, g string) {
		for _, lim := range []Limits{small, DefaultLimits} {
			err := Validate(g, lim)
			if err2 := Validate(g, lim); fmt.Sprint(err) != fmt.Sprint(err2) {
				t.Fatalf("Validate not deterministic: %v, then %v", err, err2)
			}
			var le *LimitError
			var se *SyntaxError
			if err != nil {
				if !errors.Is(err, ErrInvalidGrammar) || !errors.As(err, &le) && !errors.As(err, &se) {
					t.Fatalf("untyped error %v", err)
				}
				if le != nil && le.Got >= 0 && le.Got <= le.Max {
					t.Fatalf("%v: Got within Max", err)
				}
				continue
			}
			if len(g) > lim.MaxBytes {
				t.Fatalf("accepted %d bytes, limit %d", len(g), lim.MaxBytes)
			}
			depth, rules, repeat := lexCounts(g)
			if depth > lim.MaxDepth || rules > lim.MaxRules || repeat > lim.MaxRepeat {
				t.Fatalf("accepted depth %d, %d rules, repetition %d with limits %+v", depth, rules, repeat, lim)
			}
		}
	})
}

func BenchmarkValidate(b *testing.B) {
	for _, bc := range []struct{ name, g string }{
		{"JSONObject", JSONObject},
		{"60000 groups", nested(60000)},
		{"60000 empty rules", "root ::= " + repeat("x ", 60000) + "\"a\"\nx ::= \"\"\n"},
		{"1 MiB literal", "root ::= \"" + repeat("a", 1<<20-20) + "\"\n"},
		{"100000 generated rules", "root ::= " + repeat("x{0,2000} ", 50) + "\nx ::= \"a\"\n"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				Validate(bc.g, DefaultLimits)
			}
		})
	}
}
