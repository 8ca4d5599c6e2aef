package anthropic

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/corral-llm/corral/serving"
)

// TestCheckLimits: Check refuses a body the translation refused (its
// field named), and one over the Core's limits on messages, tools and
// prompt text, before any model loads.
func TestCheckLimits(t *testing.T) {
	lim := serving.Limits{MaxMessages: 2, MaxTools: 1, MaxPromptBytes: 100}.WithDefaults()
	tool := `{"name": "f", "input_schema": {"type": "object"}}`
	for _, tc := range []struct {
		name, body, param, flag string
	}{
		{"fits", `{"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}], "tools": [` + tool + `]}`, "", ""},
		{"translation", `{"model": "m", "messages": [{"role": "user", "content": "hi"}]}`, "max_tokens", ""},
		{"messages", `{"model": "m", "max_tokens": 1, "system": "s", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}`, "messages", "max-messages"},
		{"tools", `{"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}], "tools": [` + tool + `, ` + strings.Replace(tool, `"f"`, `"g"`, 1) + `]}`, "tools", "max-tools"},
		{"prompt bytes", `{"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "` + strings.Repeat("x", 101) + `"}]}`, "messages", "max-prompt-bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body messagesRequest
			if err := json.Unmarshal([]byte(tc.body), &body); err != nil {
				t.Fatal(err)
			}
			e := body.Check(&lim)
			switch {
			case tc.param == "" && e != nil:
				t.Fatalf("refused: %+v", e)
			case tc.param == "":
			case e == nil || e.Status != 400 || e.Param != tc.param || !strings.Contains(e.Message, tc.flag):
				t.Errorf("got %+v, want a 400 about %s (%s)", e, tc.param, tc.flag)
			}
		})
	}
	// count_tokens needs no max_tokens.
	var count countRequest
	if err := json.Unmarshal([]byte(`{"model": "m", "messages": [{"role": "user", "content": "hi"}]}`), &count); err != nil {
		t.Fatal(err)
	}
	if e := count.Check(&lim); e != nil {
		t.Errorf("count_tokens: %+v", e)
	}
}
