package chat

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/corral-llm/corral/wire"
)

func TestRenderInvalidMessages(t *testing.T) {
	raw := func(role, content string) Message { return Message{Role: role, Content: json.RawMessage(content)} }
	tests := []struct {
		name string
		msgs []Message
		want string // in the error text
	}{
		{"empty", nil, "no messages"},
		{"unknown role", []Message{msg("user", "hi"), msg("robot", "beep")}, `message 1: invalid messages: unknown role "robot"`},
		{"empty role", []Message{{Content: json.RawMessage(`"hi"`)}}, `message 0: invalid messages: unknown role ""`},
		{"number content", []Message{raw("user", `42`)}, "message 0: invalid messages: content must be"},
		{"object content", []Message{raw("user", `{"text": "hi"}`)}, "message 0: invalid messages: content must be"},
		{"bool content", []Message{msg("system", "s"), raw("user", `true`)}, "message 1: invalid messages: content must be"},
		{"image part", []Message{raw("user", `[{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]`)},
			`message 0: invalid messages: content part 1 has type "image_url"`},
		{"part not object", []Message{raw("user", `["hi"]`)}, "message 0: invalid messages: content part 0 is not an object"},
		{"part without text", []Message{raw("user", `[{"type": "text"}]`)}, "message 0: invalid messages: content part 0 has no text"},
		{"assistant without content or calls", []Message{msg("user", "hi"), {Role: "assistant"}},
			"message 1: invalid messages: assistant message has neither content nor tool_calls"},
		{"assistant null content", []Message{msg("user", "hi"), raw("assistant", `null`)},
			"message 1: invalid messages: assistant message has neither"},
		{"tool without content", []Message{msg("user", "hi"), {Role: "tool", ToolCallID: "c"}},
			"message 1: invalid messages: tool message has no content"},
		{"user without content", []Message{{Role: "user"}}, "message 0: invalid messages: user message has no content"},
		{"user with tool calls", []Message{{Role: "user", Content: json.RawMessage(`"x"`), ToolCalls: []wire.ToolCall{{ID: "c"}}}},
			"message 0: invalid messages: user message has tool_calls"},
	}
	tpl := mustLookup(t, "chatml")
	for _, tt := range tests {
		_, err := tpl.Render(tt.msgs, Options{})
		if !errors.Is(err, ErrInvalidMessages) {
			t.Errorf("%s: err = %v, want ErrInvalidMessages", tt.name, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %q, want it to contain %q", tt.name, err, tt.want)
		}
	}
}

func TestText(t *testing.T) {
	tests := []struct {
		content string // raw JSON; "" for absent
		want    string
	}{
		{`"plain"`, "plain"},
		{`""`, ""},
		{``, ""},
		{`null`, ""},
		{`[{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]`, "one\ntwo"},
		{`[]`, ""},
	}
	for _, tt := range tests {
		m := Message{Role: "user"}
		if tt.content != "" {
			m.Content = json.RawMessage(tt.content)
		}
		got, err := m.Text()
		if err != nil || got != tt.want {
			t.Errorf("Text(%s) = %q, %v; want %q", tt.content, got, err, tt.want)
		}
	}
	if _, err := (Message{Content: json.RawMessage(`3`)}).Text(); !errors.Is(err, ErrInvalidMessages) {
		t.Errorf("Text(3) err = %v, want ErrInvalidMessages", err)
	}
}

func TestTemplateSeesMessageFields(t *testing.T) {
	tpl, err := Parse(`{% for m in messages %}{{ m.role }}|{{ m.content }}|{{ 'name' in m }}{{ m.name }}|` +
		`{{ 'tool_calls' in m }}|{{ m.tool_call_id }};{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	named := msg("user", "hi")
	named.Name = "bob"
	call := wire.ToolCall{ID: "c1", Type: "function"}
	call.Function.Name, call.Function.Arguments = "f", "{}"
	msgs := []Message{
		msg("developer", "rules"),
		named,
		{Role: "assistant", ToolCalls: []wire.ToolCall{call}},
		{Role: "tool", ToolCallID: "c1", Content: json.RawMessage(`[{"type": "text", "text": "ok"}]`)},
	}
	got := mustRender(t, tpl, msgs, Options{})
	want := "system|rules|False|False|;user|hi|Truebob|False|;assistant||False|True|;tool|ok|False|False|c1;"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestToolCallArguments(t *testing.T) {
	tpl, err := Parse(`{% for c in messages[0].tool_calls %}{{ c.function.arguments is mapping }} {{ c.function.arguments | tojson }};{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	var calls []wire.ToolCall
	for _, args := range []string{`{"b": 1, "a": [true, null]}`, `not json`, `[1, 2]`, `{}`} {
		c := wire.ToolCall{Type: "function"}
		c.Function.Name, c.Function.Arguments = "f", args
		calls = append(calls, c)
	}
	got := mustRender(t, tpl, []Message{{Role: "assistant", ToolCalls: calls}}, Options{})
	want := `True {"b": 1, "a": [true, null]};False "not json";False "[1, 2]";True {};`
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
