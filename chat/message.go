package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/corral-llm/corral/chat/jinja"
	"github.com/corral-llm/corral/wire"
)

// ErrInvalidMessages is wrapped by the errors Render returns for messages
// no template can render: an empty list, an unknown role, content of the
// wrong shape, or a message missing the content its role needs. It is also
// matched by a *RaiseError, a template's own rejection of the conversation.
var ErrInvalidMessages = errors.New("invalid messages")

// RaiseError is returned by Render when the template calls
// raise_exception, rejecting the conversation (for example, roles that do
// not alternate). errors.Is(err, ErrInvalidMessages) holds for it.
type RaiseError struct {
	Message string // the template's own words
}

// Error says that the template rejected the messages, and why.
func (e *RaiseError) Error() string {
	return "chat template rejected the messages: " + e.Message
}

// Is reports whether target is ErrInvalidMessages.
func (e *RaiseError) Is(target error) bool { return target == ErrInvalidMessages }

// roles are the OpenAI message roles Render accepts.
var roles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

// hasContent reports whether m carries content (absent and null do not).
func (m Message) hasContent() bool {
	c := bytes.TrimSpace(m.Content)
	return len(c) > 0 && !bytes.Equal(c, []byte("null"))
}

// Text flattens the content: a string as it is, an array of text parts
// joined by newlines (media parts, MediaPart's, as their markers, with no
// newline on either side, as llama.cpp joins them), absent or null
// content as "". Other parts (an image a dialect did not take) and other
// JSON types are an error wrapping ErrInvalidMessages.
func (m Message) Text() (string, error) {
	if !m.hasContent() {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", fmt.Errorf("%w: content must be a string or an array of content parts", ErrInvalidMessages)
	}
	var b strings.Builder
	afterMedia := false
	for i, raw := range parts {
		var part struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(raw, &part); err != nil {
			return "", fmt.Errorf("%w: content part %d is not an object", ErrInvalidMessages, i)
		}
		media := part.Type == "media_marker" && part.Text != nil && isMediaMarker(*part.Text)
		if part.Type != "text" && !media {
			return "", fmt.Errorf("%w: content part %d has type %q; only text parts are supported", ErrInvalidMessages, i, part.Type)
		}
		if part.Text == nil {
			return "", fmt.Errorf("%w: content part %d has no text", ErrInvalidMessages, i)
		}
		if !media && !afterMedia && i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(*part.Text)
		afterMedia = media
	}
	return b.String(), nil
}

// templateMessages checks msgs and converts them to what HF templates
// expect: dictionaries with role, content as a string, and name,
// tool_calls, tool_call_id, reasoning_content and reasoning only where
// set. "developer" becomes "system", which is what templates know.
// Tool-call arguments that are a JSON object are passed as one, as HF
// templates expect.
func templateMessages(msgs []Message) ([]any, error) {
	if len(msgs) == 0 {
		return nil, fmt.Errorf("%w: no messages", ErrInvalidMessages)
	}
	out := make([]any, len(msgs))
	for i, m := range msgs {
		v, err := templateMessage(m)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}

func templateMessage(m Message) (*jinja.Dict, error) {
	if !roles[m.Role] {
		return nil, fmt.Errorf("%w: unknown role %q (want system, developer, user, assistant or tool)", ErrInvalidMessages, m.Role)
	}
	text, err := m.Text()
	if err != nil {
		return nil, err
	}
	switch {
	case m.Role == "assistant" && !m.hasContent() && len(m.ToolCalls) == 0 && m.reasoning() == "":
		return nil, fmt.Errorf("%w: assistant message has neither content nor tool_calls", ErrInvalidMessages)
	case m.Role != "assistant" && !m.hasContent():
		return nil, fmt.Errorf("%w: %s message has no content", ErrInvalidMessages, m.Role)
	case m.Role != "assistant" && len(m.ToolCalls) > 0:
		return nil, fmt.Errorf("%w: %s message has tool_calls; only assistant messages may", ErrInvalidMessages, m.Role)
	case m.Role != "assistant" && m.reasoning() != "":
		return nil, fmt.Errorf("%w: %s message has reasoning_content; only assistant messages may", ErrInvalidMessages, m.Role)
	}
	role := m.Role
	if role == "developer" {
		role = "system"
	}
	d := jinja.NewDict()
	d.Set("role", role)
	d.Set("content", text)
	if m.Name != "" {
		d.Set("name", m.Name)
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]any, len(m.ToolCalls))
		for j, tc := range m.ToolCalls {
			calls[j] = templateToolCall(tc)
		}
		d.Set("tool_calls", calls)
	}
	if m.ToolCallID != "" {
		d.Set("tool_call_id", m.ToolCallID)
	}
	if r := m.reasoning(); r != "" {
		// The names templates read it by: Qwen3, DeepSeek, GLM, Kimi;
		// gpt-oss; Gemma 4, Solar.
		d.Set("reasoning_content", r)
		d.Set("thinking", r)
		d.Set("reasoning", r)
	}
	return d, nil
}

// reasoning is the message's reasoning, under either name.
func (m Message) reasoning() string {
	if m.ReasoningContent != "" {
		return m.ReasoningContent
	}
	return m.Reasoning
}

func templateToolCall(tc wire.ToolCall) *jinja.Dict {
	var args any = tc.Function.Arguments
	if v, err := jinja.FromJSON([]byte(tc.Function.Arguments)); err == nil {
		if _, ok := v.(*jinja.Dict); ok {
			args = v
		}
	}
	typ := tc.Type
	if typ == "" {
		typ = "function"
	}
	fn := jinja.NewDict()
	fn.Set("name", tc.Function.Name)
	fn.Set("arguments", args)
	d := jinja.NewDict()
	d.Set("id", tc.ID)
	d.Set("type", typ)
	d.Set("function", fn)
	return d
}
