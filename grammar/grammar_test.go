package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// schemaCases pair schemas with JSON texts their grammar must accept and
// texts it must reject.
var schemaCases = []struct {
	name   string
	schema string
	accept []string
	reject []string
}{
	{
		name:   "any value",
		schema: `{}`,
		accept: []string{`1`, `"x"`, `null`, `[1, {"a": []}]`, `{"k": true}`, `-0.5e+3`},
		reject: []string{``, `nul`, `[1,]`, `{"a"}`, `01`, `"a`, `{'a': 1}`},
	},
	{
		name:   "true schema",
		schema: `true`,
		accept: []string{`false`, `{}`},
		reject: []string{`x`},
	},
	{
		name:   "object",
		schema: `{"type": "object"}`,
		accept: []string{`{}`, `{"a": 1}`, "{\n  \"a\": [1, 2],\n  \"b\": {\"c\": null}\n}", `{ "é\"\\u00e9": "\n" }`},
		reject: []string{`[]`, `{"a": 1,}`, `{"a" 1}`, `{a: 1}`, `"{}"`, `{"a": "raw` + "\n" + `"}`},
	},
	{
		name: "required and optional properties",
		schema: `{"type": "object", "properties": {
			"name": {"type": "string"}, "age": {"type": "integer"}, "nick": {"type": "string"}, "ok": {"type": "boolean"}},
			"required": ["age", "name"]}`,
		accept: []string{
			`{"name": "Al", "age": 3}`,
			`{"name":"Al","age":3,"nick":"x","ok":true}`,
			`{"name": "Al", "age": -3, "ok": false}`,
			"{\n\t\"name\": \"Al\",\n\t\"age\": 0\n}",
		},
		reject: []string{
			`{"name": "Al"}`,                                    // missing required
			`{"age": 3, "name": "Al"}`,                          // required out of declared order
			`{"name": "Al", "age": "3"}`,                        // wrong type
			`{"name": "Al", "age": 3.5}`,                        // not an integer
			`{"name": "Al", "age": 3, "x": 1}`,                  // extra key, closed by default
			`{"name": "Al", "age": 3, "ok": true, "nick": "x"}`, // optional out of order
			`{"name": "Al", "age": 3, "ok": true, "ok": true}`,  // repeated
			`{"name": "Al", "age": 03}`,
			"{\"name\": \"Al\",\n\n\"age\": 3}", // two line breaks
		},
	},
	{
		name:   "only optional properties",
		schema: `{"properties": {"a": {"type": "null"}, "b": {"const": 2}, "c": {"enum": ["x", 1]}}}`,
		accept: []string{`{}`, `{"a": null}`, `{"b": 2}`, `{"c": 1}`, `{"a": null, "c": "x"}`, `{"a":null,"b":2,"c":1}`},
		reject: []string{`{"b": 3}`, `{"c": "y"}`, `{, "a": null}`, `{"a": null,}`, `{"b": 2, "a": null}`, `{"d": 1}`},
	},
	{
		name:   "additionalProperties false",
		schema: `{"type": "object", "properties": {"a": {"type": "number"}}, "additionalProperties": false}`,
		accept: []string{`{}`, `{"a": 1.5}`},
		reject: []string{`{"b": 1}`, `{"a": 1, "b": 1}`},
	},
	{
		name:   "additionalProperties true",
		schema: `{"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"], "additionalProperties": true}`,
		accept: []string{`{"id": 1}`, `{"id": 1, "x": [1], "idx": "s", "i": 0, "": 2}`},
		reject: []string{`{"x": 1}`, `{"id": 1, "id": 2}`, `{"id": 1, "x": 1,}`},
	},
	{
		name:   "additionalProperties schema",
		schema: `{"type": "object", "additionalProperties": {"type": "string"}}`,
		accept: []string{`{}`, `{"a": "x", "b": "y"}`},
		reject: []string{`{"a": 1}`, `{"a": "x", "b": null}`},
	},
	{
		name:   "additional key excluded by declared names",
		schema: `{"properties": {"ab": {"type": "integer"}, "b": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}}`,
		accept: []string{`{"a": true}`, `{"abc": true}`, `{"ab": 1, "x": false}`, `{"": true}`, `{"bb": true}`},
		reject: []string{`{"ab": true}`, `{"b": 1, "ab": true}`, `{"ab": 1, "b": true}`},
	},
	{
		name:   "required without properties",
		schema: `{"type": "object", "required": ["x"]}`,
		accept: []string{`{"x": 1}`, `{"x": [], "y": 2}`},
		reject: []string{`{}`, `{"y": 2}`},
	},
	{
		name:   "array items and counts",
		schema: `{"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}`,
		accept: []string{`[1]`, `[1, 2, 3]`, "[\n  1,\n  2\n]"},
		reject: []string{`[]`, `[1, 2, 3, 4]`, `[1, "2"]`, `[1,]`, `{}`},
	},
	{
		name:   "array without items",
		schema: `{"type": "array", "maxItems": 2}`,
		accept: []string{`[]`, `[1, "a"]`},
		reject: []string{`[1, 2, 3]`},
	},
	{
		name:   "items false",
		schema: `{"type": "array", "items": false}`,
		accept: []string{`[]`, `[ ]`},
		reject: []string{`[1]`},
	},
	{
		name:   "prefixItems",
		schema: `{"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}`,
		accept: []string{`["a", 1]`},
		reject: []string{`["a"]`, `[1, "a"]`, `["a", 1, 2]`},
	},
	{
		name:   "prefixItems with items",
		schema: `{"prefixItems": [{"type": "string"}], "items": {"type": "boolean"}, "maxItems": 3}`,
		accept: []string{`["a"]`, `["a", true, false]`},
		reject: []string{`["a", true, false, true]`, `["a", 1]`},
	},
	{
		name:   "tuple items (draft 7)",
		schema: `{"items": [{"type": "null"}], "additionalItems": {"type": "integer"}}`,
		accept: []string{`[null]`, `[null, 1, 2]`},
		reject: []string{`[1]`, `[null, null]`},
	},
	{
		name:   "enum",
		schema: `{"enum": ["red", "green", 3, null, {"a": [1]}, "say \"hi\""]}`,
		accept: []string{`"red"`, `3`, `null`, `{"a":[1]}`, `"say \"hi\""`},
		reject: []string{`"blue"`, `"Red"`, `4`, `{"a": [2]}`, `"say "hi""`},
	},
	{
		name:   "const",
		schema: `{"const": "fixed"}`,
		accept: []string{`"fixed"`},
		reject: []string{`"fixe"`, `"fixedd"`},
	},
	{
		name:   "type list",
		schema: `{"type": ["string", "null"], "maxLength": 2}`,
		accept: []string{`null`, `"ab"`, `""`},
		reject: []string{`"abc"`, `1`},
	},
	{
		name:   "anyOf",
		schema: `{"anyOf": [{"type": "integer", "minimum": 10}, {"type": "string", "enum": ["x"]}, false]}`,
		accept: []string{`10`, `99`, `"x"`},
		reject: []string{`9`, `"y"`, `null`},
	},
	{
		name: "oneOf with sibling properties",
		schema: `{"type": "object", "properties": {"kind": {"type": "string"}, "n": {"type": "integer"}},
			"oneOf": [{"required": ["kind"]}, {"required": ["n"]}]}`,
		accept: []string{`{"kind": "a"}`, `{"n": 1}`, `{"kind": "a", "n": 1}`},
		reject: []string{`{}`, `{"x": 1}`},
	},
	{
		name: "allOf merges objects",
		schema: `{"allOf": [
			{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
			{"$ref": "#/$defs/b"}],
			"$defs": {"b": {"properties": {"b": {"type": "string"}}, "required": ["b"]}}}`,
		accept: []string{`{"a": 1, "b": "x"}`},
		reject: []string{`{"a": 1}`, `{"b": "x"}`, `{"b": "x", "a": 1}`},
	},
	{
		name:   "allOf of strings",
		schema: `{"allOf": [{"type": "string"}, {"minLength": 2}, {"maxLength": 3}]}`,
		accept: []string{`"ab"`, `"abc"`},
		reject: []string{`"a"`, `"abcd"`, `12`},
	},
	{
		name: "recursive $ref",
		schema: `{"$ref": "#/definitions/node", "definitions": {"node": {"type": "object",
			"properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/definitions/node"}}},
			"required": ["v"]}}}`,
		accept: []string{`{"v": 1}`, `{"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}, {"v": 4}]}`},
		reject: []string{`{"v": 1, "kids": [{}]}`, `{"kids": []}`},
	},
	{
		name:   "$ref with sibling keywords",
		schema: `{"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 1}`,
		accept: []string{`"a"`},
		reject: []string{`"ab"`, `1`},
	},
	{
		name:   "$ref to the root",
		schema: `{"type": "array", "items": {"$ref": "#"}, "maxItems": 2}`,
		accept: []string{`[]`, `[[], [[]]]`},
		reject: []string{`[1]`, `[[], [], []]`},
	},
	{
		name:   "string lengths",
		schema: `{"type": "string", "minLength": 2, "maxLength": 4}`,
		accept: []string{`"ab"`, `"a\"cd"`, `"\u00e9é"`, `"日本語"`},
		reject: []string{`"a"`, `"abcde"`, `"a` + "\t" + `b"`},
	},
	{
		name:   "date",
		schema: `{"type": "string", "format": "date"}`,
		accept: []string{`"2024-02-29"`, `"1999-12-31"`},
		reject: []string{`"2024-13-01"`, `"2024-1-01"`, `"2024-01-32"`, `"x"`},
	},
	{
		name:   "time",
		schema: `{"type": "string", "format": "time"}`,
		accept: []string{`"23:59:59Z"`, `"08:00:00.123+02:00"`},
		reject: []string{`"24:00:00Z"`, `"12:00"`, `"12:60:00Z"`},
	},
	{
		name:   "date-time",
		schema: `{"type": "string", "format": "date-time"}`,
		accept: []string{`"2024-05-06T07:08:09Z"`, `"2024-05-06T07:08:09.5-05:30"`},
		reject: []string{`"2024-05-06 07:08:09Z"`, `"2024-05-06"`},
	},
	{
		name:   "uuid",
		schema: `{"type": "string", "format": "uuid"}`,
		accept: []string{`"123e4567-e89b-12d3-a456-426614174000"`, `"123E4567-E89B-12D3-A456-426614174000"`},
		reject: []string{`"123e4567e89b12d3a456426614174000"`, `"123e4567-e89b-12d3-a456-42661417400g"`},
	},
	{
		name:   "unknown format is a plain string",
		schema: `{"type": "string", "format": "email"}`,
		accept: []string{`"a@b.c"`, `"not an email"`},
	},
	{
		name:   "integer range",
		schema: `{"type": "integer", "minimum": -5, "exclusiveMaximum": 120}`,
		accept: []string{`-5`, `0`, `7`, `119`, `99`},
		reject: []string{`-6`, `120`, `1000`, `-0`, `007`, `1.0`},
	},
	{
		name:   "integer minimum only",
		schema: `{"type": "integer", "minimum": 18}`,
		accept: []string{`18`, `100`, `9999999999999999`},
		reject: []string{`17`, `-18`, `0`},
	},
	{
		name:   "integer draft 4 exclusive minimum",
		schema: `{"type": "integer", "minimum": 0, "exclusiveMinimum": true}`,
		accept: []string{`1`},
		reject: []string{`0`},
	},
	{
		name:   "integer with both minimum forms",
		schema: `{"type": "integer", "minimum": 0, "exclusiveMinimum": 5, "maximum": 7.5}`,
		accept: []string{`6`, `7`},
		reject: []string{`5`, `0`, `8`},
	},
	{
		name: "OpenAI strict mode",
		schema: `{"type": "object", "additionalProperties": false, "required": ["steps", "answer"],
			"properties": {
				"steps": {"type": "array", "items": {"$ref": "#/$defs/step"}},
				"answer": {"type": ["string", "null"]}},
			"$defs": {"step": {"type": "object", "additionalProperties": false, "required": ["explanation", "output"],
				"properties": {"explanation": {"type": "string"}, "output": {"type": "string"}}}}}`,
		accept: []string{
			`{"steps": [], "answer": null}`,
			`{
  "steps": [
    {"explanation": "e", "output": "o"}
  ],
  "answer": "42"
}`,
		},
		reject: []string{`{"steps": [{"explanation": "e"}], "answer": null}`, `{"answer": null, "steps": []}`, `{"steps": []}`},
	},
	{
		name:   "number ignores bounds",
		schema: `{"type": "number", "minimum": 0}`,
		accept: []string{`-1`, `0.25`, `1E5`},
		reject: []string{`.5`, `1.`, `+1`},
	},
	{
		name:   "anchored pattern",
		schema: `{"type": "string", "pattern": "^[A-Z]{2}-\\d{3,4}$"}`,
		accept: []string{`"AB-123"`, `"XY-1234"`},
		reject: []string{`"ab-123"`, `"AB-12"`, `"xAB-123"`, `"AB-123x"`},
	},
	{
		name:   "unanchored pattern",
		schema: `{"type": "string", "pattern": "a(b|c)+"}`,
		accept: []string{`"ab"`, `"xxacbyy"`},
		reject: []string{`"a"`, `"bc"`},
	},
	{
		name:   "pattern with characters JSON escapes",
		schema: `{"pattern": "^\"[^\"]*\"\\n?$"}`,
		accept: []string{`"\"x\""`, `"\"\"\n"`},
		reject: []string{`""x""`, `"\"x\"\"\""`},
	},
	{
		name:   "property names needing escapes",
		schema: `{"properties": {"a\"b": {"type": "integer"}, "é/\n": {"type": "integer"}}, "required": ["a\"b", "é/\n"]}`,
		accept: []string{`{"a\"b": 1, "é/\n": 2}`},
		reject: []string{`{"a"b": 1, "é/\n": 2}`},
	},
}

// TestSchemas: each case's grammar with WhitespaceFree accepts its texts
// as written, and with a trailing space; the default grammar, compact,
// accepts them compacted and refuses them as written where they have
// whitespace between tokens; WhitespaceSpaced accepts them compacted with
// a space after each ':' and ',', and refuses them compacted. All three
// refuse the texts to reject, and on each one's form of them (where they
// are JSON) compact and spaced agree with free.
func TestSchemas(t *testing.T) {
	for _, tc := range schemaCases {
		t.Run(tc.name, func(t *testing.T) {
			free := compileLimits(t, tc.schema, SchemaLimits{Whitespace: WhitespaceFree})
			compact := compile(t, tc.schema)
			spaced := compileLimits(t, tc.schema, SchemaLimits{Whitespace: WhitespaceSpaced})
			for _, in := range tc.accept {
				if !matches(t, free, in) {
					t.Errorf("free: rejects %s", in)
				}
				// The free grammar lets the model end with whitespace.
				if !matches(t, free, in+" ") {
					t.Errorf("free: rejects %q with a trailing space", in)
				}
				c, ok := compactJSON(in)
				if !ok {
					t.Fatalf("accepted text %q is not JSON", in)
				}
				if !matches(t, compact, c) {
					t.Errorf("compact: rejects %s", c)
				}
				if c != in && matches(t, compact, in) {
					t.Errorf("compact: accepts %q, with whitespace between tokens", in)
				}
				if matches(t, compact, c+" ") {
					t.Errorf("compact: accepts %q with a trailing space", c)
				}
				sp := spacedJSON(c)
				if !matches(t, spaced, sp) {
					t.Errorf("spaced: rejects %s", sp)
				}
				if sp != c && matches(t, spaced, c) {
					t.Errorf("spaced: accepts %s, compact", c)
				}
				if matches(t, spaced, sp+" ") {
					t.Errorf("spaced: accepts %q with a trailing space", sp)
				}
			}
			for _, in := range tc.reject {
				for name, g := range map[string]*gbnf{"free": free, "compact": compact, "spaced": spaced} {
					if matches(t, g, in) {
						t.Errorf("%s: accepts %s", name, in)
					}
				}
				if c, ok := compactJSON(in); ok {
					if matches(t, compact, c) != matches(t, free, c) {
						t.Errorf("compact and free grammars differ on %s", c)
					}
					if sp := spacedJSON(c); matches(t, spaced, sp) != matches(t, free, sp) {
						t.Errorf("spaced and free grammars differ on %s", sp)
					}
				}
			}
		})
	}
}

// spacedJSON is compact JSON c with a space after each ':' and ',' outside
// its strings.
func spacedJSON(c string) string {
	var b strings.Builder
	inString, escaped := false, false
	for i := 0; i < len(c); i++ {
		ch := c[i]
		b.WriteByte(ch)
		switch {
		case escaped:
			escaped = false
		case inString && ch == '\\':
			escaped = true
		case ch == '"':
			inString = !inString
		case !inString && (ch == ':' || ch == ','):
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// compactJSON is in without whitespace between its tokens, false when in
// is not JSON.
func compactJSON(in string) (string, bool) {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(in)); err != nil {
		return "", false
	}
	return b.String(), true
}

// TestWhitespace: the default grammar of JSON (FromSchema, JSONObject, a
// Builder's schema) allows no whitespace between the tokens,
// WhitespaceFree allows it, as the rule "space", and WhitespaceSpaced
// has one space after each ':' and ',' and none elsewhere.
func TestWhitespace(t *testing.T) {
	const schema = `{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "string"}}}}`
	compactText := []string{`{"a":1}`, `{"a":1,"b":["x y","z"]}`, `{"b":[]}`}
	spacedText := []string{`{"a": 1}`, `{"a": 1, "b": ["x y", "z"]}`, `{"b": []}`}
	other := []string{`{ "a" : 1 }`, `{"a":1, "b":["x y"]}`, "{\n  \"a\":1\n}", `{"a": 1} `, `{"b":[ ]}`, "{\"a\": 1}\n"}
	builder := func(lim SchemaLimits) string {
		b := NewBuilder(lim)
		doc, err := b.Schema([]byte(schema), "#")
		if err != nil {
			t.Fatal(err)
		}
		text, err := b.Grammar(Seq(Lit("<"), doc, Lit(">")))
		if err != nil {
			t.Fatal(err)
		}
		return text
	}
	fromSchema := func(lim SchemaLimits) string {
		text, err := FromSchemaLimits([]byte(schema), lim)
		if err != nil {
			t.Fatal(err)
		}
		return text
	}
	same := func(s string) string { return s }
	for _, tc := range []struct {
		name    string
		grammar func(lim SchemaLimits) string
		frame   func(string) string
	}{
		{"FromSchema", fromSchema, same},
		{"JSONObjectGrammar", JSONObjectGrammar, same},
		{"Builder", builder, func(s string) string { return "<" + s + ">" }},
	} {
		for _, ws := range []Whitespace{WhitespaceCompact, WhitespaceFree, WhitespaceSpaced} {
			text := tc.grammar(SchemaLimits{Whitespace: ws})
			g, err := parseGBNF(text)
			if err != nil {
				t.Fatalf("%s %v: %v\n%s", tc.name, ws, err, text)
			}
			if got, want := strings.Contains(text, "space"), ws == WhitespaceFree; got != want {
				t.Errorf("%s %v: the grammar refers to the rule space: %v, want %v\n%s", tc.name, ws, got, want, text)
			}
			for _, set := range []struct {
				texts []string
				want  bool
			}{
				{[]string{`{}`}, true},
				{compactText, ws != WhitespaceSpaced},
				{spacedText, ws != WhitespaceCompact},
				{other, ws == WhitespaceFree},
			} {
				for _, in := range set.texts {
					if got := matches(t, g, tc.frame(in)); got != set.want {
						t.Errorf("%s %v: match(%q) = %v, want %v\n%s", tc.name, ws, in, got, set.want, text)
					}
				}
			}
		}
	}
	// The default is compact.
	if text, _ := FromSchema([]byte(schema)); text != fromSchema(SchemaLimits{}) || strings.Contains(text, "space") {
		t.Errorf("FromSchema allows whitespace:\n%s", text)
	}
	for _, ws := range []Whitespace{WhitespaceCompact, WhitespaceFree, WhitespaceSpaced} {
		if got, err := ParseWhitespace(ws.String()); got != ws || err != nil {
			t.Errorf("ParseWhitespace(%q) = %v, %v", ws.String(), got, err)
		}
	}
	if _, err := ParseWhitespace("indented"); err == nil {
		t.Error("ParseWhitespace(indented): no error")
	}
}

func TestJSONObject(t *testing.T) {
	for _, tc := range []struct {
		ws   Whitespace
		want string
	}{{WhitespaceCompact, JSONObject}, {WhitespaceFree, JSONObjectFree}, {WhitespaceSpaced, JSONObjectSpaced}} {
		lim := SchemaLimits{Whitespace: tc.ws}
		got, err := FromSchemaLimits([]byte(`{"type": "object"}`), lim)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want || JSONObjectGrammar(lim) != tc.want {
			t.Errorf("%v: JSONObjectGrammar differs from FromSchemaLimits({\"type\":\"object\"}):\n%s", tc.ws, got)
		}
		g, err := parseGBNF(tc.want)
		if err != nil {
			t.Fatal(err)
		}
		free, spaced := tc.ws == WhitespaceFree, tc.ws == WhitespaceSpaced
		for in, want := range map[string]bool{`{}`: true, `{"a":{"b":[1,"x"]}}`: !spaced, `{"a": {"b": [1, "x"]}}`: free || spaced, `{ "a": 1 }`: free, `[]`: false, `1`: false, `{"a"}`: false} {
			if matches(t, g, in) != want {
				t.Errorf("%v: JSONObject match(%s) = %v, want %v", tc.ws, in, !want, want)
			}
		}
	}
}

func TestPropertyOrderAndRuleNames(t *testing.T) {
	text, err := FromSchema([]byte(`{"properties": {"z": {"type": "object", "properties": {"q": {"type": "array"}}}, "a": {"type": "string"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(text, "root ::= ") {
		t.Errorf("grammar does not start with the root rule:\n%s", text)
	}
	if !strings.Contains(text, "\nroot-z ::= ") {
		t.Errorf("no rule named after property z:\n%s", text)
	}
	if strings.Index(text, `"\"z\""`) > strings.Index(text, `"\"a\""`) {
		t.Errorf("property z, declared first, comes after a:\n%s", text)
	}
}

func TestInvalidSchemas(t *testing.T) {
	for _, tc := range []struct {
		schema string
		where  string // expected in the message
	}{
		{`not json`, "not JSON"},
		{`{"type": "object"} x`, "not JSON"},
		{`[]`, "#: a schema must be an object or a boolean"},
		{`false`, "#: schema false"},
		{`{"type": "strin"}`, `#/type: unknown type "strin"`},
		{`{"type": []}`, "#/type"},
		{`{"type": 3}`, "#/type"},
		{`{"properties": {"a": {"type": "foo"}}}`, "#/properties/a/type"},
		{`{"properties": {"a/b~": {"type": 1}}}`, "#/properties/a~1b~0/type"},
		{`{"properties": []}`, "#/properties: want an object"},
		{`{"required": "a"}`, "#/required"},
		{`{"required": [1]}`, "#/required/0"},
		{`{"minItems": 3, "maxItems": 2}`, "#: minItems 3 is greater than maxItems 2"},
		{`{"minLength": 3, "maxLength": 2}`, "#: minLength"},
		{`{"maxLength": -1}`, "#/maxLength"},
		{`{"maxLength": 1.5}`, "#/maxLength"},
		{`{"maxLength": "2"}`, "#/maxLength: want a number"},
		{`{"minimum": "0"}`, "#/minimum"},
		{`{"minimum": 1e999}`, "#/minimum"},
		{`{"enum": []}`, "#/enum"},
		{`{"anyOf": {}}`, "#/anyOf"},
		{`{"items": {"anyOf": [false]}}`, "#/items: no alternative"},
		{`{"$ref": 1}`, "#/$ref"},
		{`{"$ref": "#/$defs/missing"}`, `#/$ref: $ref "#/$defs/missing" points to nothing`},
		{`{"$ref": "http://example.com/s.json"}`, "#/$ref: unsupported $ref"},
		{`{"$defs": {"a": 1}, "$ref": "#/$defs/a"}`, "#/$defs/a: a schema must be"},
		{`{"$ref": "#"}`, "refers to itself"},
		{`{"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"}`, "refers to itself"},
		{`{"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}`, "no finite value"},
		{`{"allOf": [{"$ref": "#"}]}`, "allOf and $ref nest deeper"},
		{`{"allOf": [{"type": "string"}, {"type": "integer"}]}`, "#/allOf/1: allOf has no type in common"},
		{`{"type": "integer", "minimum": 5, "maximum": 4}`, "#: no integer"},
		{`{"properties": {"a": false}, "required": ["a"]}`, `#/properties/a: required property "a"`},
		{`{"prefixItems": [true, true], "maxItems": 1}`, "#: maxItems 1 is less than"},
		{`{"items": false, "minItems": 1}`, "#: minItems 1"},
		{`{"minLength": 100000}`, "#/minLength"},
		{`{"pattern": "(a"}`, "#/pattern"},
		{`{"pattern": "a(?=b)"}`, "lookahead"},
		{`{"pattern": "(a)\\1"}`, "#/pattern"},
		{`{"pattern": "a^b"}`, "#/pattern"},
		{`{"pattern": "[^\\s\\S]"}`, "matches nothing"},
		{`{"anyOf": [{}], "oneOf": [{}]}`, "anyOf and oneOf"},
	} {
		_, err := FromSchema([]byte(tc.schema))
		if !errors.Is(err, ErrInvalidSchema) {
			t.Errorf("FromSchema(%s) = %v, want ErrInvalidSchema", tc.schema, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.where) {
			t.Errorf("FromSchema(%s) = %q, want it to mention %q", tc.schema, err, tc.where)
		}
	}
}

func TestIntegerRanges(t *testing.T) {
	bounds := []int64{-1000, -101, -100, -99, -10, -9, -1, 0, 1, 9, 10, 19, 20, 99, 100, 101, 109, 110, 199, 200, 999, 1000}
	for _, lo := range bounds {
		for _, hi := range bounds {
			if lo > hi {
				continue
			}
			g, err := parseGBNF("root ::= " + exprString(intRange(lo, hi)))
			if err != nil {
				t.Fatal(err)
			}
			for n := int64(-1100); n <= 1100; n += 1 {
				if (n < -120 || n > 120) && n%7 != 0 {
					continue // keep the test quick
				}
				if got, want := matches(t, g, strconv.FormatInt(n, 10)), lo <= n && n <= hi; got != want {
					t.Fatalf("range [%d, %d]: match(%d) = %v", lo, hi, n, got)
				}
			}
		}
	}
}

// exprString writes e as a rule body.
func exprString(e *expr) string {
	var b strings.Builder
	e.write(&b, precAlt)
	return b.String()
}

func TestDeepNesting(t *testing.T) {
	deep := strings.Repeat(`{"items":`, 100) + `{"type":"integer"}` + strings.Repeat(`}`, 100)
	g := compile(t, deep)
	if in := strings.Repeat("[", 100) + "7" + strings.Repeat("]", 100); !matches(t, g, in) {
		t.Errorf("rejects %s", in)
	}
	if in := strings.Repeat("[", 99) + "7" + strings.Repeat("]", 99); matches(t, g, in) {
		t.Errorf("accepts %s", in)
	}
	tooDeep := strings.Repeat("[", maxDepth+10) + strings.Repeat("]", maxDepth+10)
	if _, err := FromSchema([]byte(tooDeep)); !errors.Is(err, ErrInvalidSchema) || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("FromSchema(too deep) = %v", err)
	}
}

func TestFromSchemaFramed(t *testing.T) {
	schema := []byte(`{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}`)
	cases := []struct {
		name   string
		ws     Whitespace
		frame  Frame
		accept []string
		reject []string
	}{
		{
			name:   "one document in tags",
			frame:  Frame{Before: "<t>\n", After: "\n</t>", Sep: "\n", Max: 1},
			accept: []string{"<t>\n{\"a\":1}\n</t>"},
			reject: []string{"{\"a\":1}", "<t>\n{\"a\":1}\n</t>\n<t>\n{\"a\":2}\n</t>", "<t>\n{\"b\":1}\n</t>", "<t>\n{\"a\": 1}\n</t>", "<t>\n{\"a\":2} \n</t>"},
		},
		{
			name:   "one document in tags, free whitespace",
			ws:     WhitespaceFree,
			frame:  Frame{Before: "<t>\n", After: "\n</t>", Sep: "\n", Max: 1},
			accept: []string{"<t>\n{\"a\": 1}\n</t>", "<t>\n{\"a\":2} \n</t>"},
			reject: []string{"{\"a\": 1}", "<t>\n{\"a\": 1}\n</t>\n<t>\n{\"a\": 2}\n</t>", "<t>\n{\"b\": 1}\n</t>"},
		},
		{
			name:   "many documents in a list",
			frame:  Frame{Open: "[X][", Close: "]", Sep: ", "},
			accept: []string{`[X][{"a":1}]`, `[X][{"a":1}, {"a":2}, {"a":3}]`},
			reject: []string{`[X][]`, `[{"a":1}]`, `[X][{"a":1},{"a":2}]`, `[X][{"a": 1}]`},
		},
		{
			name:   "many documents in a list, free whitespace",
			ws:     WhitespaceFree,
			frame:  Frame{Open: "[X][", Close: "]", Sep: ", "},
			accept: []string{`[X][{"a": 1}]`, `[X][{"a": 1}, {"a": 2}, {"a": 3}]`},
			reject: []string{`[X][]`, `[{"a": 1}]`, `[X][{"a": 1},{"a": 2}]`},
		},
		{
			name:   "many documents in a list, spaced",
			ws:     WhitespaceSpaced,
			frame:  Frame{Open: "[X][", Close: "]", Sep: ", "},
			accept: []string{`[X][{"a": 1}]`, `[X][{"a": 1}, {"a": 2}, {"a": 3}]`},
			reject: []string{`[X][{"a":1}]`, `[X][{"a": 1} ]`, `[X][{"a":  1}]`},
		},
		{
			name:   "root refers to itself",
			frame:  Frame{Before: "<", After: ">", Max: 1},
			accept: []string{`<{"a":1}>`},
			reject: []string{`<{"a":1}><{"a":1}>`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text, err := FromSchemaFramedLimits(schema, tc.frame, SchemaLimits{Whitespace: tc.ws})
			if err != nil {
				t.Fatal(err)
			}
			g, err := parseGBNF(text)
			if err != nil {
				t.Fatalf("grammar llama.cpp would reject: %v\n%s", err, text)
			}
			for _, in := range tc.accept {
				if !matches(t, g, in) {
					t.Errorf("rejects %q\n%s", in, text)
				}
			}
			for _, in := range tc.reject {
				if matches(t, g, in) {
					t.Errorf("accepts %q", in)
				}
			}
		})
	}
	// A schema whose $ref points at the document root still works framed.
	rec := []byte(`{"type": "object", "properties": {"next": {"$ref": "#"}}}`)
	text, err := FromSchemaFramed(rec, Frame{Before: "<", After: ">", Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	g, err := parseGBNF(text)
	if err != nil {
		t.Fatal(err)
	}
	if !matches(t, g, `<{"next":{"next":{}}}>`) {
		t.Errorf("rejects a nested document\n%s", text)
	}
}
