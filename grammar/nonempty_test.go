package grammar

import (
	"errors"
	"strings"
	"testing"
)

// Patterns that repeat something able to match the empty string gave
// grammars on which llama.cpp recursed until it crashed.
func TestPatternsRepeatingEmpty(t *testing.T) {
	for _, tc := range []struct {
		pattern        string
		accept, reject []string
	}{
		{`^(a?)*$`, []string{``, `a`, `aaa`}, []string{`b`}},
		{`^((a)*|b)+$`, []string{``, `a`, `abba`}, []string{`c`}},
		{`^(a|)+x$`, []string{`x`, `aax`}, []string{`a`, `xx`}},
		{`^(a*b*)*$`, []string{``, `ab`, `bba`, `abab`}, []string{`c`}},
		{`^(()|a){2,3}$`, []string{``, `a`, `aa`, `aaa`}, []string{`aaaa`}},
		{`^(a?b?){0,2}c$`, []string{`c`, `abc`, `bac`, `abbc`, `ababc`}, []string{`abababc`, `aaac`}},
		{`^()*x(|y)+$`, []string{`x`, `xy`, `xyy`}, []string{``, `y`}},
	} {
		g := compile(t, `{"type": "string", "pattern": "`+strings.ReplaceAll(tc.pattern, `\`, `\\`)+`"}`)
		text, _ := FromSchema([]byte(`{"type": "string", "pattern": "` + tc.pattern + `"}`))
		if err := Validate(text, DefaultLimits); err != nil {
			t.Errorf("%s: %v\n%s", tc.pattern, err, text)
		}
		for _, s := range tc.accept {
			if !matches(t, g, `"`+s+`"`) {
				t.Errorf("%s rejects %q", tc.pattern, s)
			}
		}
		for _, s := range tc.reject {
			if matches(t, g, `"`+s+`"`) {
				t.Errorf("%s accepts %q", tc.pattern, s)
			}
		}
	}
	_, err := FromSchema([]byte(`{"pattern": "^(` + strings.Repeat("a?", 200) + `)*$"}`))
	if !errors.Is(err, ErrInvalidSchema) || !strings.Contains(err.Error(), "too complex") {
		t.Errorf("FromSchema(200 optional items repeated) = %v", err)
	}
}
