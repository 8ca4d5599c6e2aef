package grammar

import (
	"errors"
	"testing"
)

// FuzzFromSchema checks that no input panics, that every failure wraps
// ErrInvalidSchema, and that every grammar, under each Whitespace,
// parses, has no left recursion and passes Validate unless it is too big.
func FuzzFromSchema(f *testing.F) {
	for _, tc := range schemaCases {
		f.Add(tc.schema)
	}
	for _, s := range []string{
		`{"$ref": "#"}`, `{"allOf": [{"$ref": "#"}]}`, `{"anyOf": [{"$ref": "#/anyOf/0"}]}`,
		`{"type": "object", "anyOf": [{"$ref": "#"}]}`, `{"pattern": "^(a|b)*?[^\\d]{2,}$"}`,
		`{"minimum": 1.5, "maximum": 1e300, "type": "integer"}`, `{"items": [{}], "minItems": 3}`,
		`{"pattern": "^((a)*|b)+(c?d?)*$"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, schema string) {
		for _, ws := range []Whitespace{WhitespaceCompact, WhitespaceFree, WhitespaceSpaced} {
			fuzzSchema(t, schema, SchemaLimits{Whitespace: ws})
		}
	})
}

// fuzzSchema is FuzzFromSchema's check of schema converted within lim.
func fuzzSchema(t *testing.T, schema string, lim SchemaLimits) {
	text, err := FromSchemaLimits([]byte(schema), lim)
	if err != nil {
		if !errors.Is(err, ErrInvalidSchema) {
			t.Fatalf("error %v does not wrap ErrInvalidSchema", err)
		}
		return
	}
	g, err := parseGBNF(text)
	if err != nil {
		t.Fatalf("grammar does not parse: %v\n%s", err, text)
	}
	var le *LimitError
	if err := Validate(text, DefaultLimits); err != nil && !errors.As(err, &le) {
		t.Fatalf("grammar llama.cpp cannot run: %v\n%s", err, text)
	}
	for _, in := range []string{`{}`, `[]`, `"a"`, `1`, `null`} {
		if _, err := g.match(in); err != nil {
			t.Fatalf("matching %s: %v\n%s", in, err, text)
		}
	}
}
