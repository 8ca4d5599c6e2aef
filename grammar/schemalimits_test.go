package grammar

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// manyProperties is a schema of n string properties p0..p{n-1}, all of them
// required when required is set: the shape of the 300,000-property schema
// whose decoding once took minutes (a scan of the properties per property,
// and of the required names per required name).
func manyProperties(n int, required bool) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"p%d":{"type":"string"}`, i)
	}
	b.WriteString(`}`)
	if required {
		b.WriteString(`,"required":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"p%d"`, i)
		}
		b.WriteString(`]`)
	}
	b.WriteString(`}`)
	return b.String()
}

func TestSchemaLimits(t *testing.T) {
	small := SchemaLimits{MaxNodes: 8, MaxProperties: 3}
	for _, tc := range []struct {
		name   string
		schema string
		limit  string // the SchemaLimitError's Limit, "" for none
	}{
		{"nodes at the limit", `{"type":"object","properties":{"a":{},"b":{}},"required":["a","b"]}`, ""},
		{"nodes over the limit", `{"type":"object","properties":{"a":{},"b":{}},"required":["a","b","c"]}`, LimitNodes},
		{"enum values count", `{"enum":[1,2,3,4,5,6,7,8,9,10]}`, LimitNodes},
		{"properties at the limit", `{"properties":{"a":{},"b":{},"c":{}}}`, ""},
		{"properties over the limit", `{"properties":{"a":{},"b":{},"c":{},"d":true}}`, LimitProperties},
		{"properties counted across objects", `{"properties":{"a":{"properties":{"b":true,"c":true}},"d":true}}`, LimitProperties},
		{
			// Counted as the document is read: a fault after the limit
			// is never reached.
			"refused before the rest is read", `{"enum":[1,2,3,4,5,6,7,8,9,10] "not JSON`, LimitNodes,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromSchemaLimits([]byte(tc.schema), small)
			var le *SchemaLimitError
			switch {
			case tc.limit == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.limit == "":
			case !errors.As(err, &le) || le.Limit != tc.limit:
				t.Fatalf("error %v, want a SchemaLimitError on the %s", err, tc.limit)
			case !errors.Is(err, ErrInvalidSchema):
				t.Fatalf("error %v does not wrap ErrInvalidSchema", err)
			}
		})
	}
}

// TestSchemaFindingRefusedEarly: the 300,000-property schema is refused by
// the default limits as it is read (before, it was decoded with a scan per
// property and per required name: minutes of CPU).
func TestSchemaFindingRefusedEarly(t *testing.T) {
	schema := manyProperties(300000, true)
	_, c, err := conversion([]byte(schema), nil, SchemaLimits{})
	var le *SchemaLimitError
	if !errors.As(err, &le) || le.Limit != LimitProperties || le.Max != DefaultSchemaLimits.MaxProperties {
		t.Fatalf("error %v, want the property count limit %d", err, DefaultSchemaLimits.MaxProperties)
	}
	if c != nil {
		t.Fatal("a converter was made for a document over the limits")
	}
	if want := "more than 10000 properties"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}

// TestSchemaWorkIsLinear counts the converter's elementary steps (schema
// parts decoded and gone through, rule names tried) on schemas built to
// make a scan per element quadratic, with the limits raised out of the
// way: every one stays within a step per byte of the document.
func TestSchemaWorkIsLinear(t *testing.T) {
	huge := SchemaLimits{MaxNodes: 1 << 30, MaxProperties: 1 << 30}
	symbols := func(n int) string { // property names that all sanitize to one rule name base
		var b strings.Builder
		b.WriteString(`{"type":"object","properties":{`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			name := ""
			for j := i; ; j /= 10 {
				name += string("!#$%&*+-.:"[j%10])
				if j < 10 {
					break
				}
			}
			fmt.Fprintf(&b, `"%s":{"type":"string"}`, name)
		}
		b.WriteString(`}}`)
		return b.String()
	}
	allOfParts := func(n int) string { // an allOf of n parts of one property each, every name twice
		var b strings.Builder
		b.WriteString(`{"allOf":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"properties":{"p%d":{"type":"integer"}},"required":["p%d"]}`, i/2, i/2)
		}
		b.WriteString(`]}`)
		return b.String()
	}
	duplicates := func(n int) string { // one key n times: the last stands
		return `{"type":"object","properties":{` + strings.Repeat(`"a":{"type":"string"},`, n) + `"a":{"type":"integer"}}}`
	}
	manyAnyOf := func(n int) string { // branches that each get the sibling's enum: work counted
		return `{"enum":["x","y"],"anyOf":[` + strings.TrimSuffix(strings.Repeat(`{"type":"string"},`, n), ",") + `]}`
	}
	for _, tc := range []struct {
		name   string
		schema func(n int) string
		n      int
		fails  bool // the conversion stops at a bound (maxSteps)
	}{
		{"101000 required properties (past maxSteps)", func(n int) string { return manyProperties(n, true) }, 101000, true},
		{"20000 required properties", func(n int) string { return manyProperties(n, true) }, 20000, false},
		{"20000 optional properties", func(n int) string { return manyProperties(n, false) }, 20000, false},
		{"20000 names of one rule base", symbols, 20000, false},
		{"allOf of 20000 parts", allOfParts, 20000, false},
		{"one key 100000 times", duplicates, 100000, false},
		{"anyOf of 20000 branches", manyAnyOf, 20000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := tc.schema(tc.n)
			_, c, err := conversion([]byte(schema), nil, huge)
			if (err != nil) != tc.fails {
				t.Fatalf("error %v, want one: %v", err, tc.fails)
			}
			if c == nil {
				t.Fatal("no converter")
			}
			if ops := c.ops(); ops > len(schema) {
				t.Errorf("%d steps for a %d-byte schema, want at most one a byte", ops, len(schema))
			} else {
				t.Logf("%d steps for %d bytes", ops, len(schema))
			}
		})
	}
}

// TestDuplicateKeysKeepTheLast: as in encoding/json, the last of duplicate
// keys stands, where it is written.
func TestDuplicateKeysKeepTheLast(t *testing.T) {
	for _, tc := range []struct{ schema, accepts, refuses string }{
		{`{"type":"string","type":"integer"}`, `12`, `"a"`},
		{`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},"a":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}`,
			`{"b":"x","a":1}`, `{"a":1,"b":"x"}`},
	} {
		text, err := FromSchema([]byte(tc.schema))
		if err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		g, err := parseGBNF(text)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := g.match(tc.accepts); err != nil || !ok {
			t.Errorf("%s refuses %s (%v)", tc.schema, tc.accepts, err)
		}
		if ok, _ := g.match(tc.refuses); ok {
			t.Errorf("%s accepts %s", tc.schema, tc.refuses)
		}
	}
}

// TestDeepLongNamesTakeLinearMemory: rule names and JSON pointers follow
// the path of property names to a schema; 100 levels of 50 KB names would
// have made them take memory with the square of the document (hundreds of
// MB) had they been copied at each level.
func TestDeepLongNamesTakeLinearMemory(t *testing.T) {
	const depth, nameLen = 100, 50000
	var b strings.Builder
	for i := range depth {
		fmt.Fprintf(&b, `{"type":"object","additionalProperties":true,"required":["%[1]s"],"properties":{"%[1]s":`, strings.Repeat(string(rune('a'+i%26)), nameLen))
	}
	b.WriteString(`{"type":"string"}`)
	b.WriteString(strings.Repeat("}}", depth))
	schema := b.String()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	text, err := FromSchema([]byte(schema))
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 30*uint64(len(schema)) {
		t.Errorf("converting a %d-byte schema allocated %d MB, want at most 30 bytes a byte", len(schema), alloc>>20)
	}
	if len(text) > 3*len(schema) {
		t.Errorf("a %d-byte grammar for a %d-byte schema", len(text), len(schema))
	}
}
