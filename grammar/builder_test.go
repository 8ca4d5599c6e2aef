package grammar

import (
	"errors"
	"testing"
)

// A Builder puts schema values and free text inside literal markup, as
// the XML tool-call formats write them.
func TestBuilder(t *testing.T) {
	params := []byte(`{"type": "object", "properties": {
		"city": {"type": "string", "enum": ["Paris", "Lima"]},
		"days": {"type": "integer", "minimum": 1, "maximum": 7},
		"where": {"$ref": "#/$defs/point"}},
		"$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}}`)
	b := NewBuilder(SchemaLimits{})
	days, err := b.Schema(params, "#/properties/days")
	if err != nil {
		t.Fatal(err)
	}
	where, err := b.Schema(params, "#/properties/where")
	if err != nil {
		t.Fatal(err)
	}
	param := func(name string, value Expr) Expr {
		return Seq(Lit("<parameter="+name+">\n"), value, Lit("\n</parameter>\n"))
	}
	note := b.Rule("note", param("note", b.TextExcluding("\n</parameter>")))
	call := Seq(Lit("<function=f>\n"), param("days", days), Opt(param("where", where)), Opt(note), Lit("</function>"))
	text, err := b.Grammar(Seq(call, Repeat(Seq(Lit("\n"), call), 0, -1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(text, DefaultLimits); err != nil {
		t.Fatalf("Validate: %v\n%s", err, text)
	}
	g, err := parseGBNF(text)
	if err != nil {
		t.Fatalf("a grammar llama.cpp would reject: %v\n%s", err, text)
	}
	for _, in := range []string{
		"<function=f>\n<parameter=days>\n3\n</parameter>\n</function>",
		"<function=f>\n<parameter=days>\n7\n</parameter>\n<parameter=where>\n{\"x\":1.5}\n</parameter>\n</function>",
		"<function=f>\n<parameter=days>\n1\n</parameter>\n<parameter=note>\na <b> </param\n</parameter>\n</function>\n<function=f>\n<parameter=days>\n2\n</parameter>\n</function>",
		"<function=f>\n<parameter=days>\n1\n</parameter>\n<parameter=note>\n\n</parameter>\n</function>",
		"<function=f>\n<parameter=days>\n1\n</parameter>\n<parameter=note>\n<\n</param\n</parameter>\n</function>",
	} {
		if !matches(t, g, in) {
			t.Errorf("rejects %q\n%s", in, text)
		}
	}
	for _, in := range []string{
		"<function=f>\n<parameter=days>\n8\n</parameter>\n</function>",
		"<function=f>\n<parameter=days>\n\"3\"\n</parameter>\n</function>",
		"<function=f>\n<parameter=days>\n1\n</parameter>\n<parameter=where>\n{}\n</parameter>\n</function>",
		"<function=f>\n<parameter=days>\n1\n</parameter>\n<parameter=note>\nx\n</parameter>\ny\n</parameter>\n</function>",
		"<function=f>\n</function>",
	} {
		if matches(t, g, in) {
			t.Errorf("accepts %q", in)
		}
	}
}

// TextExcluding holds for stops whose characters repeat, where a plain
// "anything but the first character" rule would be wrong.
func TestTextExcluding(t *testing.T) {
	for _, tc := range []struct {
		stop           string
		accept, reject []string
	}{
		{"<|end|>", []string{"", "a", "<", "<|en", "<<|end|", "a<|end", "|end|>"}, []string{"<|end|>", "x<|end|>y", "<<|end|>"}},
		{"aab", []string{"", "aa", "aaa", "abab", "aaa a"}, []string{"aab", "aaab", "xaab"}},
		{"\n</p>", []string{"\n</p", "</p>", "\n\n<", "a\n</q>"}, []string{"\n</p>", "x\n\n</p>"}},
	} {
		b := NewBuilder(SchemaLimits{})
		text, err := b.Grammar(b.TextExcluding(tc.stop))
		if err != nil {
			t.Fatal(err)
		}
		g, err := parseGBNF(text)
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.stop, err, text)
		}
		for _, in := range tc.accept {
			if !matches(t, g, in) {
				t.Errorf("stop %q: rejects %q\n%s", tc.stop, in, text)
			}
		}
		for _, in := range tc.reject {
			if matches(t, g, in) {
				t.Errorf("stop %q: accepts %q\n%s", tc.stop, in, text)
			}
		}
	}
}

func TestBuilderErrors(t *testing.T) {
	b := NewBuilder(SchemaLimits{})
	if _, err := b.Schema([]byte(`{"properties": {}}`), "#/properties/nope"); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("pointer to nothing: %v", err)
	}
	if _, err := b.Schema([]byte(`{"type": 3}`), "#"); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("bad schema: %v", err)
	}
	if _, err := b.Schema([]byte(`{`), "#"); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("not JSON: %v", err)
	}
}

// WithPrefix puts literal text before a grammar's output, a recursive
// root rule included.
func TestWithPrefix(t *testing.T) {
	rec, err := FromSchema([]byte(`{"type": "object", "properties": {"next": {"$ref": "#"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		gbnf           string
		accept, reject []string
	}{
		{rec, []string{`</think>{"next":{"next":{}}}`, `</think>{}`}, []string{`{}`, `</think>{"next":</think>{}}`}},
		{JSONObject, []string{`</think>{"a":[1]}`}, []string{`{"a":1}`}},
		{"# root comment\nroot ::= \"root\" [root] x\nx ::= \"[\\\"root\" root?\n", []string{`</think>rootr["root`, `</think>rooto["rootroott["root`}, []string{`rootr["root`, `</think>rootr["root</think>roots["root`}},
	} {
		text := WithPrefix(tc.gbnf, "", "</think>")
		if err := Validate(text, DefaultLimits); err != nil {
			t.Fatalf("%v\n%s", err, text)
		}
		g, err := parseGBNF(text)
		if err != nil {
			t.Fatalf("%v\n%s", err, text)
		}
		for _, in := range tc.accept {
			if !matches(t, g, in) {
				t.Errorf("rejects %q\n%s", in, text)
			}
		}
		for _, in := range tc.reject {
			if matches(t, g, in) {
				t.Errorf("accepts %q\n%s", in, text)
			}
		}
	}
}

// WithPrefix with free text first: a reasoning the prompt opened goes on
// until it closes, then the forced output follows.
func TestWithPrefixText(t *testing.T) {
	text := WithPrefix(JSONObject, "</think>", "</think>\n\n")
	if err := Validate(text, DefaultLimits); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	g, err := parseGBNF(text)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	for _, in := range []string{"</think>\n\n{}", "a < b </thin\n</think>\n\n{\"a\":1}"} {
		if !matches(t, g, in) {
			t.Errorf("rejects %q\n%s", in, text)
		}
	}
	for _, in := range []string{"{}", "a</think>\n\nb</think>\n\n{}", "x</think>{}"} {
		if matches(t, g, in) {
			t.Errorf("accepts %q\n%s", in, text)
		}
	}
}
