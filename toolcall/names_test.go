package toolcall

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// TestLongNames: every family reads the calls of a function whose name
// has Anthropic's 128 characters as it reads get_weather's (every case
// of the family tables with get_weather renamed), whole and streamed, and
// its grammar writes that name and stays within llama.cpp's limits.
func TestLongNames(t *testing.T) {
	long := "get_weather-" + strings.Repeat("0123456789", 12)[:116]
	if len(long) != 128 {
		t.Fatal(len(long))
	}
	rename := func(s string) string { return strings.ReplaceAll(s, "get_weather", long) }
	tools := make([]wire.Tool, len(testTools))
	copy(tools, testTools)
	tools[0].Function.Name = long
	for f, cases := range familyCases {
		for _, tc := range cases {
			text, content := rename(tc.text), rename(tc.content)
			check := func(how, gotContent string, got []wire.ToolCall) {
				t.Helper()
				if gotContent != content || len(got) != len(tc.calls) {
					t.Errorf("%s/%s %s: content %q, %d calls; want %q, %d", f.Name(), tc.name, how, gotContent, len(got), content, len(tc.calls))
					return
				}
				for i, c := range got {
					if want := tc.calls[i]; c.Function.Name != rename(want.name) || c.Function.Arguments != rename(want.args) {
						t.Errorf("%s/%s %s: call %d %s(%s), want %s(%s)", f.Name(), tc.name, how, i, c.Function.Name, c.Function.Arguments, rename(want.name), rename(want.args))
					}
				}
			}
			gotContent, got := Parse(f, tools, text, tc.max, false)
			check("whole", gotContent, got)
			if strings.HasPrefix(tc.name, "cut off") {
				continue
			}
			for _, n := range []int{1, 7} {
				gotContent, got, _ := streamTools(f, tools, tc.max, text, n)
				check("streamed", gotContent, got)
			}
		}
		for _, parallel := range []bool{false, true} {
			g, err := f.Grammar(tools, parallel, grammar.SchemaLimits{})
			if err != nil {
				t.Fatalf("%s: %v", f.Name(), err)
			}
			quoted, _ := json.Marshal(long)
			if !strings.Contains(g, long) || grammar.Validate(g, grammar.DefaultLimits) != nil {
				t.Errorf("%s: the grammar does not write %s, or is over the limits:\n%s", f.Name(), quoted, g)
			}
		}
	}
}
