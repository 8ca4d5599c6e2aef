package anthropic

import (
	"encoding/json"
	"testing"
)

// FuzzParseMessages checks that no body panics the translation, and that
// what it accepts is messages chat can read and tools with object schemas.
func FuzzParseMessages(f *testing.F) {
	for _, name := range []string{"claude-code-tool-02-v1-messages.json"} {
		var c struct {
			Body json.RawMessage `json:"body"`
		}
		b, err := readFile(name)
		if err != nil {
			f.Fatal(err)
		}
		if err := json.Unmarshal(b, &c); err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(c.Body))
	}
	f.Add([]byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"tool_reference","tool_name":"t"}],"is_error":true}]},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}],"tools":[{"name":"t","input_schema":{},"defer_loading":true}],"tool_choice":{"type":"tool","name":"t"},"thinking":{"type":"enabled","budget_tokens":5},"output_config":{"format":{"type":"json_schema","schema":{}}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, e := ParseMessages(b)
		if (r == nil) == (e == nil) {
			t.Fatalf("request %v and error %v", r, e)
		}
		if e != nil {
			if e.Status != 400 || e.Message == "" {
				t.Fatalf("error %+v", e)
			}
			return
		}
		for i, m := range r.Messages {
			if _, err := m.Text(); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			for _, c := range m.ToolCalls {
				if !json.Valid([]byte(c.Function.Arguments)) {
					t.Fatalf("message %d: arguments %q", i, c.Function.Arguments)
				}
			}
		}
		for _, tool := range r.Tools {
			if !json.Valid(tool.Function.Parameters) {
				t.Fatalf("tool %s: schema %q", tool.Function.Name, tool.Function.Parameters)
			}
		}
	})
}
