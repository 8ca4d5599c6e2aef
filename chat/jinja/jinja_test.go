package jinja

import (
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestPython renders the cases of testdata/cases.txt and compares them
// with what Python's Jinja2, set up as transformers sets it up, renders
// (testdata/cases.json, written by testdata/python.py): the same text, or
// an error where Python raises one.
func TestPython(t *testing.T) {
	testPython(t, "testdata/cases.json", Options{}, 200)
}

// TestPythonMutable renders the cases of testdata/cases.txt and
// testdata/mutable.txt with Options.Mutable and compares them with what
// Jinja2's SandboxedEnvironment, which lets a template change lists and
// dicts, renders (testdata/cases_mutable.json).
func TestPythonMutable(t *testing.T) {
	testPython(t, "testdata/cases_mutable.json", Options{Mutable: true}, 230)
}

func testPython(t *testing.T, file string, opt Options, least int) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Src  string          `json:"src"`
		Vars json.RawMessage `json:"vars"`
		Out  *string         `json:"out"`
		Err  string          `json:"err"`
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < least {
		t.Fatalf("only %d cases in %s", len(cases), file)
	}
	for _, c := range cases {
		v, err := FromJSON(c.Vars)
		if err != nil {
			t.Fatal(err)
		}
		vars := map[string]any{}
		d := v.(*Dict)
		for i, k := range d.keys {
			vars[k.(string)] = d.vals[i]
		}
		before := repr(v)
		tpl, err := Parse(c.Src)
		var out string
		if err == nil {
			out, err = tpl.RenderOptions(vars, opt)
		}
		switch {
		case c.Out != nil && err != nil:
			t.Errorf("%q:\n  python: %q\n  error:  %v", c.Src, *c.Out, err)
		case c.Out != nil && out != *c.Out:
			t.Errorf("%q:\n  python: %q\n  got:    %q", c.Src, *c.Out, out)
		case c.Out == nil && err == nil:
			t.Errorf("%q:\n  python raised %s\n  got: %q", c.Src, c.Err, out)
		}
		if after := repr(v); after != before {
			t.Errorf("%q changed the caller's variables: %s, then %s", c.Src, before, after)
		}
	}
}

func mustParse(t *testing.T, src string) *Template {
	t.Helper()
	tpl, err := Parse(src)
	if err != nil {
		t.Fatalf("Parse(%q): %v", src, err)
	}
	return tpl
}

func TestErrorLines(t *testing.T) {
	tests := []struct {
		src  string
		line int
		msg  string
		// syntax is set when Parse, not Render, must report it.
		syntax bool
	}{
		{"a\nb\n{% if x %}\n{% endfor %}", 4, "unknown tag 'endfor'", true},
		{"{% for x in y %}\n\n{{ x", 3, "missing }}", true},
		{"\n\n{{ 1 + }}", 3, "unexpected", true},
		{"{% if true %}\n{{ x | nosuch }}\n{% endif %}\n{{ y | nosuch2 }}", 4, "no filter named 'nosuch2'", true},
		{"{% macro m(a=1, b) %}{% endmacro %}", 1, "non-default argument", true},
		{"line\n{{ undefined_var.attr }}", 2, "'undefined_var' is undefined", false},
		{"\n\n\n{{ 'a' + 1 }}", 4, "can only concatenate str", false},
		{"{% for m in msgs %}\n{{ m.x.y }}\n{% endfor %}", 2, "has no attribute 'x'", false},
		{"{% if true %}\n{{ x | nosuch }}\n{% endif %}", 2, "No filter named 'nosuch' found", false},
		{"\n{% include 'other.jinja' %}", 2, "needs a template loader", false},
	}
	for _, tt := range tests {
		tpl, err := Parse(tt.src)
		if err == nil {
			if tt.syntax {
				t.Errorf("%q: parsed, want a syntax error", tt.src)
				continue
			}
			_, err = tpl.Render(map[string]any{"msgs": []any{NewDict()}})
		} else if !tt.syntax {
			t.Errorf("%q: Parse: %v, want it to fail only when rendered", tt.src, err)
			continue
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%q: err = %v, want a *Error", tt.src, err)
			continue
		}
		if e.Line != tt.line || !strings.Contains(e.Msg, tt.msg) {
			t.Errorf("%q: error at line %d %q, want line %d with %q", tt.src, e.Line, e.Msg, tt.line, tt.msg)
		}
	}
}

// TestFuncError checks that an error a Func returns comes back from Render
// unchanged (callers find their own error types in it) with the line.
func TestFuncError(t *testing.T) {
	sentinel := errors.New("rejected")
	tpl := mustParse(t, "ok\n{{ fail('why') }}")
	var got []any
	_, err := tpl.Render(map[string]any{"fail": Func(func(args []any, _ map[string]any) (any, error) {
		got = args
		return nil, sentinel
	})})
	if !errors.Is(err, sentinel) {
		t.Fatalf("err = %v, want the Func's error", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Line != 2 {
		t.Errorf("err = %v, want a *Error at line 2", err)
	}
	if len(got) != 1 || got[0] != "why" {
		t.Errorf("Func got %v", got)
	}
}

// TestLimits checks that templates that would loop, recurse or grow without
// bound fail instead.
func TestLimits(t *testing.T) {
	defer func(n int) { maxSteps = n }(maxSteps)
	maxSteps = 1_000_000
	for _, tt := range []struct{ src, want string }{
		// Python stops this with RecursionError.
		{"{% macro m(x) %}{{ m(x) }}{% endmacro %}{{ m(1) }}", "RecursionError"},
		// The sandbox's MAX_RANGE.
		{"{% for i in range(100001) %}{% endfor %}", "MAX_RANGE (100000)"},
		// Too much work: 1000 * 1000 iterations; 50000 list items 50000 times.
		{"{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}", "steps of work"},
		{"{% set l = range(50000) | list %}{% for a in l %}{{ l | select | list | length }}{% endfor %}", "steps of work"},
		// Too much text.
		{"{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}", "grew past"},
		{"{{ 'x' * 100000000 }}", "grew past"},
		{"{% for i in range(100000) %}{{ '0123456789' * 100 }}{% endfor %}", "wrote more than"},
		{"{{ 'a'.center(999999999) }}", "grew past"},
		{"{{ 'ab' * 4611686018427387904 }}", "grew past"},
		{"{{ [1, 2] * 4611686018427387904 }}", "grew past"},
		{"{{ ('x\n' * 1000000) | indent(1000) }}", "grew past"},
		{"{{ [1] | slice(1000000000) | list }}", "steps of work"},
	} {
		out, err := mustParse(t, tt.src).Render(nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%.60q: %d bytes, error %v; want an error with %q", tt.src, len(out), err, tt.want)
		}
	}
	// Below the limits the same constructs work.
	out, err := mustParse(t, "{% macro m(x) %}{% if x %}{{ x }}{{ m(x - 1) }}{% endif %}{% endmacro %}{{ m(100) }}").Render(nil)
	if err != nil || !strings.HasSuffix(out, "321") {
		t.Errorf("100 nested macro calls: %q, %v", out, err)
	}
}

func TestParseNestingLimit(t *testing.T) {
	deep := strings.Repeat("(", 10000) + "1" + strings.Repeat(")", 10000)
	if _, err := Parse("{{ " + deep + " }}"); err == nil {
		t.Error("10000 nested parentheses parsed")
	}
	deep = strings.Repeat("{% if true %}", 5000) + strings.Repeat("{% endif %}", 5000)
	if _, err := Parse(deep); err == nil {
		t.Error("5000 nested if blocks parsed")
	}
	if _, err := Parse(strings.Repeat("(", 50) + "1" + strings.Repeat(")", 50)); err != nil {
		t.Errorf("50 nested parentheses: %v", err)
	}
}

func TestReads(t *testing.T) {
	tpl := mustParse(t, `{% macro m() %}{{ reasoning_effort }}{% endmacro %}{% if enable_thinking is defined %}{% set x = 1 %}{% endif %}{{ "thinking" }}`)
	for name, want := range map[string]bool{"reasoning_effort": true, "enable_thinking": true, "thinking": false, "x": false, "m": false} {
		if got := tpl.Reads(name); got != want {
			t.Errorf("Reads(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestFromJSONKeepsOrder(t *testing.T) {
	v, err := FromJSON([]byte(`{"z": 1, "a": {"y": [1, 2.5, "x", null, true]}, "m": 12345678901234}`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := mustParse(t, "{{ v | tojson }}|{% for k in v %}{{ k }}{% endfor %}|{{ v.m is integer }}|{{ v.a.y[1] is float }}").Render(map[string]any{"v": v})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"z": 1, "a": {"y": [1, 2.5, "x", null, true]}, "m": 12345678901234}|zam|True|True`; out != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	for _, bad := range []string{`{"a": 1} x`, `{"a": }`, `[1,`} {
		if _, err := FromJSON([]byte(bad)); err == nil {
			t.Errorf("FromJSON(%s) succeeded", bad)
		}
	}
}

// TestConcurrentRender renders one template from many goroutines (run
// with -race): templates are shared by a server's requests.
func TestConcurrentRender(t *testing.T) {
	tpl := mustParse(t, `{% set ns = namespace(n=0) %}{% for m in msgs %}{% set ns.n = ns.n + m %}{% endfor %}{{ ns.n }}{{ msgs | map('string') | join(',') }}`)
	var wg sync.WaitGroup
	errs := make(chan string, 32)
	for i := range 32 {
		wg.Go(func() {
			msgs := []any{i, 1, 2}
			out, err := tpl.Render(map[string]any{"msgs": msgs})
			want := itoa(i+3) + itoa(i) + ",1,2"
			if err != nil || out != want {
				errs <- out
			}
		})
	}
	wg.Wait()
	close(errs)
	for out := range errs {
		t.Errorf("concurrent render gave %q", out)
	}
}

func itoa(i int) string { return Str(i) }

// FuzzParseRender checks that no template makes Parse or Render panic or
// run away.
func FuzzParseRender(f *testing.F) {
	b, err := os.ReadFile("testdata/cases.txt")
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range strings.Split(string(b), "\n=====\n") {
		src, _, _ := strings.Cut(c, "\n-----\n")
		f.Add(src)
	}
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := Parse(src)
		if err != nil {
			return
		}
		d := NewDict()
		d.Set("role", "user")
		d.Set("content", "hi")
		_, _ = tpl.Render(map[string]any{"messages": []any{d}, "x": 1})
	})
}

// TestMutableLimits checks that the items a render's changes in place add
// count against a bound of their own and against the steps of work: a
// template that appends or extends in a loop stops instead of holding
// memory without bound.
func TestMutableLimits(t *testing.T) {
	defer func(n, g int) { maxSteps, maxGrowth = n, g }(maxSteps, maxGrowth)
	maxSteps, maxGrowth = 1_000_000, 10_000
	for _, tt := range []struct{ src, want string }{
		// Doubling a list: few steps, many items.
		{"{% set l = [1] %}{% for i in range(40) %}{% set _ = l.extend(l) %}{% endfor %}", "added more than 10000 items"},
		{"{% set l = [] %}{% for i in range(20000) %}{% set _ = l.append(i) %}{% endfor %}", "added more than 10000 items"},
		{"{% set d = {} %}{% for i in range(20000) %}{% set _ = d.update({i: i}) %}{% endfor %}", "added more than 10000 items"},
		{"{% set d = {} %}{% for i in range(20000) %}{% set _ = d.setdefault(i, i) %}{% endfor %}", "added more than 10000 items"},
		{"{% set l = [] %}{% for i in range(20000) %}{% set _ = l.insert(0, i) %}{% endfor %}", "added more than 10000 items"},
	} {
		out, err := mustParse(t, tt.src).RenderOptions(nil, Options{Mutable: true})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%.60q: %d bytes, error %v; want an error with %q", tt.src, len(out), err, tt.want)
		}
	}
	// Appending and popping keeps a list small: only what is added counts
	// against the bound, every change against the steps.
	maxGrowth = 1 << 30
	out, err := mustParse(t, "{% set l = [] %}{% for i in range(100000) %}{% set _ = l.append(i) %}{% set _ = l.pop() %}{% endfor %}{{ l }}").RenderOptions(nil, Options{Mutable: true})
	if err == nil || !strings.Contains(err.Error(), "steps of work") {
		t.Errorf("100000 appends and pops under 1000000 steps: %q, %v", out, err)
	}
	out, err = mustParse(t, "{% set l = [] %}{% for i in range(5000) %}{% set _ = l.append(i) %}{% endfor %}{{ l | length }}").RenderOptions(nil, Options{Mutable: true})
	if err != nil || out != "5000" {
		t.Errorf("5000 appends: %q, %v", out, err)
	}
}

// TestMutates checks that a template naming a method that changes a list
// or dict in place is found, with the line, and that without
// Options.Mutable calling it is the sandbox's SecurityError.
func TestMutates(t *testing.T) {
	for src, want := range map[string]string{
		"{{ x }}":                                   "",
		"{{ x.get('a') }}{{ 'a b'.split() }}":       "",
		"a\n{% set _ = ns.ids.append(1) %}":         "append:2",
		"\n\n{{ d.update({'a': 1}) }}{{ l.pop() }}": "update:3",
		"{{ l['pop'](0) }}":                         "pop:1",
		"{{ x.items() | list }}{{ x.popitem }}":     "popitem:1",
	} {
		tpl := mustParse(t, src)
		name, line := tpl.Mutates()
		got := ""
		if name != "" {
			got = name + ":" + strconv.Itoa(line)
		}
		if got != want {
			t.Errorf("%q: Mutates() = %q, want %q", src, got, want)
		}
	}
	_, err := mustParse(t, "{% set l = [] %}{% set _ = l.append(1) %}").Render(nil)
	if err == nil || !strings.Contains(err.Error(), "SecurityError") {
		t.Errorf("append without Options.Mutable: %v", err)
	}
}
