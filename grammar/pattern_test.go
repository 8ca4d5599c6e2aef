package grammar

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// TestPatterns checks the grammar for each pattern against Go's regexp
// engine, whose syntax agrees with ECMAScript's on the supported subset
// (the inputs avoid \r, \v and Unicode spaces, where the two differ).
func TestPatterns(t *testing.T) {
	patterns := []string{
		`^abc$`, `abc`, `^a*b+c?$`, `^(ab|cd){2}$`, `^[a-c]{1,3}x$`, `^[^a-c]+$`, `\d{2}`,
		`^\w+@\w+\.com$`, `^.{3}$`, `^"\\`, `^a|b$`, `^(?:x|y)+$`, `^[\d-]+$`, `^\x41\u00e9$`,
		`^[^"]*$`, `^\t\n$`, `(?P<year>\d{4})-\d{2}`, `^a{2,}$`, `^a{0}b$`, `^\.\*$`, `^[\W]$`,
		`^\D\S$`, `^[a-]$`, `^[]a]$`, `^a+?$`, `^(a|)$`, `^[\x00-\x1f]$`, `^[^\x01]$`, `^$`,
	}
	inputs := []string{
		"", "abc", "xabcx", "ab", "aabbc", "bc", "abab", "abcd", "cdab", "aax", "x", "d e", "12", "a1",
		"x@y.com", "x@y.org", "é!?", `"\`, `"`, "a", "b", "ba", "xyx", "1-2", "Aé", `say "hi"`, "\t\n",
		"2024-01", "aa", "aaa", ".*", "\x01", "\x02", "日本", "-", "]", "a]", "!", "z1", "\x1f",
	}
	for _, p := range patterns {
		re, err := regexp.Compile(strings.ReplaceAll(p, `\u00e9`, `\x{00e9}`)) // Go lacks \u
		if err != nil {
			t.Fatalf("test pattern %q: %v", p, err)
		}
		schema, _ := json.Marshal(map[string]string{"type": "string", "pattern": p})
		text, err := FromSchema(schema)
		if p == `^[]a]$` { // ECMAScript: [] matches nothing; refused
			if err == nil {
				t.Errorf("pattern %q accepted", p)
			}
			continue
		}
		if err != nil {
			t.Errorf("pattern %q: %v", p, err)
			continue
		}
		g, err := parseGBNF(text)
		if err != nil {
			t.Fatalf("pattern %q: %v\n%s", p, err, text)
		}
		for _, in := range inputs {
			if got, want := matches(t, g, quoteJSON(in)), re.MatchString(in); got != want {
				t.Errorf("pattern %q, string %q: match = %v, want %v\n%s", p, in, got, want, text)
			}
		}
	}
}
