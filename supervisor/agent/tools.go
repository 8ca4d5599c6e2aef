package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/corral-llm/corral/wire"
)

// ToolFunctionDef describes a function the model may call.
type ToolFunctionDef struct {
	Name        string         `json:"name" yaml:"name"`
	Description string         `json:"description,omitempty" yaml:"description"`
	Parameters  map[string]any `json:"parameters,omitempty" yaml:"parameters"`
}

// ToolDef is an OpenAI tool definition; Type is "function".
type ToolDef struct {
	Type     string          `json:"type" yaml:"type"`
	Function ToolFunctionDef `json:"function" yaml:"function"`
}

// ToolInvocation is one call of a normal tool.
type ToolInvocation struct {
	Name      string
	Arguments map[string]any
	RequestID int64
	JobName   string
}

// ToolRunner executes normal (round-trip) tools. The worker makes no
// assumption about how long a tool takes; ctx ends when the request is
// canceled or the worker restarts. The result is sent back to the model as
// text (strings as is, other values as JSON).
type ToolRunner interface {
	RunTool(ctx context.Context, call ToolInvocation) (any, error)
}

// ToolRunnerFunc adapts a function to ToolRunner.
type ToolRunnerFunc func(ctx context.Context, call ToolInvocation) (any, error)

// RunTool calls f.
func (f ToolRunnerFunc) RunTool(ctx context.Context, call ToolInvocation) (any, error) {
	return f(ctx, call)
}

// Call is a parsed tool call with decoded arguments.
type Call struct {
	ID   string         // the call id (native), or call_N by position
	Name string         // the tool
	Args map[string]any // the decoded arguments object
}

// jsonEnvelope is the ToolFormatJSON reply.
type jsonEnvelope struct {
	ToolCalls []struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"tool_calls"`
	Content *string `json:"content"`
}

// ParseJSONToolReply applies the ToolFormatJSON convention to a reply. Only
// a reply that is a JSON object whose "tool_calls" list names a known tool
// (see namesKnownTool) is a tool-call reply; anything else is content
// (isTools false) and comes back unchanged: plain text, a JSON answer (a
// response_format object, an object without "tool_calls", one whose calls
// name no configured tool), text that is not JSON at all. A tool-call reply
// must then be exactly one envelope: known keys only, a list of calls of
// known names with object arguments, nothing after it; otherwise err says
// why (a tool_parse_error).
func ParseJSONToolReply(reply string, known func(name string) bool) (calls []Call, content string, isTools bool, err error) {
	trimmed := strings.TrimSpace(reply)
	if !namesKnownTool(trimmed, known) {
		return nil, reply, false, nil
	}
	dec := json.NewDecoder(strings.NewReader(trimmed))
	dec.DisallowUnknownFields()
	var env jsonEnvelope
	if err := dec.Decode(&env); err != nil {
		return nil, "", true, fmt.Errorf("decode tool-call object: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, "", true, errors.New("decode tool-call object: data after the object")
	}
	for i, tc := range env.ToolCalls {
		c, err := decodeCall("call_"+strconv.Itoa(i+1), tc.Name, string(tc.Arguments), known)
		if err != nil {
			return nil, "", true, err
		}
		calls = append(calls, c)
	}
	if env.Content != nil {
		content = *env.Content
	}
	return calls, content, true, nil
}

// namesKnownTool reports whether reply starts with a JSON object (anything
// may follow it) that has a "tool_calls" list in which at least one entry
// is an object whose "name" is a known tool. It is deliberately lenient
// about everything else, which the strict parse then checks.
func namesKnownTool(reply string, known func(string) bool) bool {
	if !strings.HasPrefix(reply, "{") {
		return false
	}
	var probe struct {
		ToolCalls []json.RawMessage `json:"tool_calls"`
	}
	if json.NewDecoder(strings.NewReader(reply)).Decode(&probe) != nil {
		return false
	}
	for _, raw := range probe.ToolCalls {
		var c struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(raw, &c) == nil && known(c.Name) {
			return true
		}
	}
	return false
}

// decodeCall checks a tool call's name and decodes its arguments, which must
// be the JSON text of an object.
func decodeCall(id, name, arguments string, known func(string) bool) (Call, error) {
	if name == "" {
		return Call{}, errors.New("tool call without a name")
	}
	if !known(name) {
		return Call{}, fmt.Errorf("call of unknown tool %q", name)
	}
	var args map[string]any
	dec := json.NewDecoder(strings.NewReader(arguments))
	if err := dec.Decode(&args); err != nil || args == nil {
		return Call{}, fmt.Errorf("tool %q: arguments are not a JSON object: %q", name, arguments)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Call{}, fmt.Errorf("tool %q: data after the arguments object", name)
	}
	return Call{ID: id, Name: name, Args: args}, nil
}

// ToolCallAccumulator joins streamed tool-call fragments by index.
type ToolCallAccumulator struct {
	Calls []wire.ToolCall // the calls so far, in index order
}

// Add merges one streamed fragment into its call.
func (a *ToolCallAccumulator) Add(d wire.ToolCallDelta) error {
	if d.Index < 0 || d.Index > len(a.Calls) {
		return fmt.Errorf("tool call delta index %d out of order", d.Index)
	}
	if d.Index == len(a.Calls) {
		a.Calls = append(a.Calls, wire.ToolCall{Type: "function"})
	}
	c := &a.Calls[d.Index]
	if d.ID != "" {
		c.ID = d.ID
	}
	c.Function.Name += d.Function.Name
	c.Function.Arguments += d.Function.Arguments
	return nil
}

// ParseNativeCalls decodes accumulated native tool calls, giving calls
// without an id one (in place, so that the assistant message sent back
// carries the same ids as the tool results).
func ParseNativeCalls(tcs []wire.ToolCall, known func(string) bool) ([]Call, error) {
	calls := make([]Call, 0, len(tcs))
	for i := range tcs {
		if tcs[i].ID == "" {
			tcs[i].ID = "call_" + strconv.Itoa(i+1)
		}
		tc := tcs[i]
		c, err := decodeCall(tc.ID, tc.Function.Name, tc.Function.Arguments, known)
		if err != nil {
			return nil, err
		}
		calls = append(calls, c)
	}
	return calls, nil
}

// ToolResultText renders a ToolRunner result for the model.
func ToolResultText(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode tool result: %w", err)
	}
	return string(b), nil
}

// ToolNames indexes tool definitions by name.
func ToolNames(defs []ToolDef) map[string]bool {
	m := make(map[string]bool, len(defs))
	for _, d := range defs {
		m[d.Function.Name] = true
	}
	return m
}
