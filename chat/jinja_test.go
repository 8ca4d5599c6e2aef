package chat

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/corral-llm/corral/wire"
)

// renderExpr renders src with one user message whose content is content
// and one tool whose parameters are params.
func renderExpr(t *testing.T, src, content, params string) string {
	t.Helper()
	tpl, err := Parse(src)
	if err != nil {
		t.Fatalf("Parse(%q): %v", src, err)
	}
	tool := wire.Tool{Type: "function"}
	tool.Function.Name = "f"
	tool.Function.Parameters = json.RawMessage(params)
	out, err := tpl.Render([]Message{msg("user", content)}, Options{Tools: []wire.Tool{tool}, Now: today})
	if err != nil {
		t.Fatalf("Render(%q): %v", src, err)
	}
	return out
}

func TestToJSON(t *testing.T) {
	tests := []struct {
		args, params, want string
	}{
		{"", `{"z": 1, "a": {"y": [1, 2.5, "x"], "b": null}, "t": true}`, `{"z": 1, "a": {"y": [1, 2.5, "x"], "b": null}, "t": true}`},
		{"", `{"e": {}, "l": []}`, `{"e": {}, "l": []}`},
		{"", `{"f": [1.0, 1e-7, 1e20, 0.0001, -0.5, 123456789012]}`, `{"f": [1.0, 1e-07, 1e+20, 0.0001, -0.5, 123456789012]}`},
		{"", `{"s": "é \"q\" \\ \n\t\u0001 </tag> '"}`, `{"s": "é \"q\" \\ \n\t\u0001 </tag> '"}`},
		{"(ensure_ascii=true)", `{"s": "é😀"}`, `{"s": "\u00e9\ud83d\ude00"}`},
		{"(sort_keys=true)", `{"b": 1, "a": {"d": 1, "c": 2}}`, `{"a": {"c": 2, "d": 1}, "b": 1}`},
		{"(separators=(',', ':'))", `{"a": [1, 2]}`, `{"a":[1,2]}`},
		{"(indent=2)", `{"a": [1, {"b": []}], "c": {}}`, "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ],\n  \"c\": {}\n}"},
	}
	for _, tt := range tests {
		src := "{{ tools[0].function.parameters | tojson" + tt.args + " }}"
		if got := renderExpr(t, src, "", tt.params); got != tt.want {
			t.Errorf("%s of %s:\n got %s\nwant %s", src, tt.params, got, tt.want)
		}
	}
	// Dictionaries built in the template keep their order too.
	if got := renderExpr(t, "{{ {'z': 1, 'a': [none, false]} | tojson }}", "", "{}"); got != `{"z": 1, "a": [null, false]}` {
		t.Errorf("literal dict: got %s", got)
	}
}

func TestItemsKeepsOrder(t *testing.T) {
	got := renderExpr(t, "{% for k, v in tools[0].function.parameters | items %}{{ k }}={{ v }};{% endfor %}", "", `{"z": 1, "a": 2, "m": 3}`)
	if want := "z=1;a=2;m=3;"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestDictMethodsKeepOrder(t *testing.T) {
	const params = `{"z": 1, "a": {"y": 2, "b": 3}, "m": {}}`
	tests := []struct {
		expr, want string
	}{
		{"p.keys() | join(',')", "z,a,m"},
		{"p.values() | map('string') | join(';')", "1;{'y': 2, 'b': 3};{}"},
		{"p.items() | map('first') | join(',')", "z,a,m"},
		{"p.get('a') | tojson", `{"y": 2, "b": 3}`},
		{"p.get('nope', 'dflt')", "dflt"},
		{"p.get('nope') is none", "True"},
		{"p.m.items() | list | length", "0"},
		{"{'q': 1, 'c': 2}.keys() | join(',')", "q,c"},
	}
	for _, tt := range tests {
		src := "{% set p = tools[0].function.parameters %}{{ " + tt.expr + " }}"
		if got := renderExpr(t, src, "", params); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.expr, got, tt.want)
		}
	}
}

func TestStringMethods(t *testing.T) {
	tests := []struct {
		expr, want string
	}{
		{"c.strip()", "a  b,c"},
		{"c.lstrip() + '|'", "a  b,c \n|"},
		{"'|' + c.rstrip()", "|\t a  b,c"},
		{"c.strip(' \\t')", "a  b,c \n"},
		{"c.split() | join('/')", "a/b,c"},
		{"c.split(None, 1) | join('/')", "a/b,c \n"},
		{"c.strip().split(',') | join('/')", "a  b/c"},
		{"c.strip().split('  ', 1)[1]", "b,c"},
		{"c.replace('a', 'A')", "\t A  b,c \n"},
		{"c.strip().replace(' ', '_', 1)", "a_ b,c"},
		{"c.strip().startswith('a')", "True"},
		{"c.strip().endswith(('x', 'c'))", "True"},
		{"c.strip().upper()", "A  B,C"},
		{"c | trim", "a  b,c"},
	}
	for _, tt := range tests {
		src := "{% set c = messages[0].content %}{{ " + tt.expr + " }}"
		if got := renderExpr(t, src, "\t a  b,c \n", "{}"); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.expr, got, tt.want)
		}
	}
}

func TestStrftimeNow(t *testing.T) {
	got := renderExpr(t, `{{ strftime_now("%d %b %Y|%Y-%m-%d %H:%M:%S|%A %B %j %I%p %y %%") }}`, "", "{}")
	if want := "21 Nov 2026|2026-11-21 09:30:00|Saturday November 325 09AM 26 %"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := strftime("%e|%q", time.Date(2026, 3, 5, 15, 0, 0, 0, time.UTC)); got != " 5|%q" {
		t.Errorf("strftime(%%e|%%q) = %q", got)
	}
}

func TestLoopControls(t *testing.T) {
	got := renderExpr(t, "{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", "", "{}")
	if got != "13" {
		t.Errorf("got %q, want 13", got)
	}
}

func TestNegativeIndex(t *testing.T) {
	tests := []struct {
		expr, want string
	}{
		{"messages[-1].role", "user"},
		{"(messages | selectattr('role', 'equalto', 'user') | list)[-1].content", "hi"},
		{"'a'.split(',')[-1]", "a"},
		{"tools[0].function.parameters.l[-1]", "7"},
		{"tools[0].function.parameters.l[-2] is defined", "False"},
		{"messages[1:][-1] is defined", "False"},
	}
	for _, tt := range tests {
		if got := renderExpr(t, "{{ "+tt.expr+" }}", "hi", `{"l": [7]}`); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.expr, got, tt.want)
		}
	}
}
