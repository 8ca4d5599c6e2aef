package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/corral-llm/corral/openai/wire"
)

// failure is a request-level error carrying its FailReason.
type failure struct {
	reason FailReason
	detail string
}

func (f *failure) Error() string { return string(f.reason) + ": " + f.detail }

func fail(reason FailReason, format string, args ...any) *failure {
	return &failure{reason, fmt.Sprintf(format, args...)}
}

// call is a parsed tool call with decoded arguments.
type call struct {
	id   string
	name string
	args map[string]any
}

// jsonEnvelope is the ToolFormatJSON reply.
type jsonEnvelope struct {
	ToolCalls []struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"tool_calls"`
	Content *string `json:"content"`
}

// parseJSONToolReply applies the ToolFormatJSON convention to a reply. Only
// a reply that is a JSON object whose "tool_calls" list names a known tool
// (see namesKnownTool) is a tool-call reply; anything else is content
// (isTools false) and comes back unchanged: plain text, a JSON answer (a
// response_format object, an object without "tool_calls", one whose calls
// name no configured tool), text that is not JSON at all. A tool-call reply
// must then be exactly one envelope: known keys only, a list of calls of
// known names with object arguments, nothing after it; otherwise err says
// why (a tool_parse_error).
func parseJSONToolReply(reply string, known func(name string) bool) (calls []call, content string, isTools bool, err error) {
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
func decodeCall(id, name, arguments string, known func(string) bool) (call, error) {
	if name == "" {
		return call{}, errors.New("tool call without a name")
	}
	if !known(name) {
		return call{}, fmt.Errorf("call of unknown tool %q", name)
	}
	var args map[string]any
	dec := json.NewDecoder(strings.NewReader(arguments))
	if err := dec.Decode(&args); err != nil || args == nil {
		return call{}, fmt.Errorf("tool %q: arguments are not a JSON object: %q", name, arguments)
	}
	if _, err := dec.Token(); err != io.EOF {
		return call{}, fmt.Errorf("tool %q: data after the arguments object", name)
	}
	return call{id: id, name: name, args: args}, nil
}

// toolCallAccumulator joins streamed tool-call fragments by index.
type toolCallAccumulator struct {
	calls []ToolCall
}

func (a *toolCallAccumulator) add(d wire.ToolCallDelta) error {
	if d.Index < 0 || d.Index > len(a.calls) {
		return fmt.Errorf("tool call delta index %d out of order", d.Index)
	}
	if d.Index == len(a.calls) {
		a.calls = append(a.calls, ToolCall{Type: "function"})
	}
	c := &a.calls[d.Index]
	if d.ID != "" {
		c.ID = d.ID
	}
	c.Function.Name += d.Function.Name
	c.Function.Arguments += d.Function.Arguments
	return nil
}

// parseNativeCalls decodes accumulated native tool calls, giving calls
// without an id one (in place, so that the assistant message sent back
// carries the same ids as the tool results).
func parseNativeCalls(tcs []ToolCall, known func(string) bool) ([]call, error) {
	calls := make([]call, 0, len(tcs))
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

// toolResultText renders a ToolRunner result for the model.
func toolResultText(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode tool result: %w", err)
	}
	return string(b), nil
}

// toolNames indexes tool definitions by name.
func toolNames(defs []ToolDef) map[string]bool {
	m := make(map[string]bool, len(defs))
	for _, d := range defs {
		m[d.Function.Name] = true
	}
	return m
}

// converse runs a request: one streamed turn, then tool rounds until the
// model answers without calling a normal tool or the budget is spent. The
// BIOS is regenerated before every turn.
func (w *Worker) converse(ctx context.Context, r *request) (string, FinishReason, error) {
	normal, exit := toolNames(w.cfg.NormalTools), toolNames(w.cfg.ExitTools)
	known := func(n string) bool { return normal[n] || exit[n] }
	conv := []ChatMessage{{Role: "user", Content: r.job.UserPrompt}}
	for {
		left := w.toolItersLeft(r)
		bios := w.cfg.BIOS(BiosContext{
			Now:                time.Now().In(w.loc),
			TimezoneName:       w.loc.String(),
			WorkerName:         w.cfg.Name,
			ToolItersRemaining: left,
			NormalTools:        w.cfg.NormalTools,
			ExitTools:          w.cfg.ExitTools,
			ToolFormat:         w.cfg.ToolFormat,
		})
		body, err := json.Marshal(w.payload(r.job.Params, BuildMessageStack(bios, r.job.SystemPrompt, conv)))
		if err != nil {
			return "", "", fail(FailUnknown, "encode request: %v", err)
		}
		t, err := w.streamTurn(ctx, r, body)
		if err != nil {
			return "", "", err
		}
		calls, content, err := w.turnCalls(t, known)
		if err != nil {
			return "", "", &failure{FailToolParse, err.Error()}
		}
		var round []call
		for _, c := range calls {
			if exit[c.name] {
				w.recordSignal(r, ExitSignal{ToolName: c.name, Arguments: c.args, EmittedAt: time.Now()})
			} else {
				round = append(round, c)
			}
		}
		switch {
		case len(round) == 0:
			return content, t.finish, nil
		case left == 0:
			return t.text, FinishToolBudget, nil
		}
		w.setToolRunning(r, true)
		msgs, err := w.runTools(ctx, r, t, calls, normal)
		w.setToolRunning(r, false)
		if err != nil {
			return "", "", err
		}
		conv = append(conv, msgs...)
	}
}

// turnCalls extracts the tool calls of a finished turn and its answer text.
func (w *Worker) turnCalls(t turn, known func(string) bool) ([]call, string, error) {
	if w.cfg.ToolFormat == ToolFormatJSON {
		calls, content, isTools, err := parseJSONToolReply(t.text, known)
		if !isTools {
			return nil, t.text, nil
		}
		return calls, content, err
	}
	calls, err := parseNativeCalls(t.toolCalls, known)
	return calls, t.text, err
}

// runTools executes the normal tools among calls and returns the messages
// that continue the conversation: the assistant's reply and the results.
// Exit tools in the same reply get an empty acknowledgement (native format
// requires an answer to every call id).
func (w *Worker) runTools(ctx context.Context, r *request, t turn, calls []call, normal map[string]bool) ([]ChatMessage, error) {
	if w.cfg.ToolRunner == nil {
		return nil, fail(FailToolExecution, "no tool runner configured")
	}
	type result struct {
		Name   string          `json:"name"`
		Result json.RawMessage `json:"result"`
	}
	var native []ChatMessage
	var results []result
	for _, c := range calls {
		text := "recorded"
		if normal[c.name] {
			v, err := w.cfg.ToolRunner.RunTool(ctx, ToolInvocation{Name: c.name, Arguments: c.args, RequestID: r.id, JobName: r.job.Name})
			if err != nil {
				if cause := context.Cause(ctx); cause != nil {
					return nil, cause
				}
				return nil, fail(FailToolExecution, "tool %q: %v", c.name, err)
			}
			if text, err = toolResultText(v); err != nil {
				return nil, fail(FailToolExecution, "tool %q: %v", c.name, err)
			}
		}
		native = append(native, ChatMessage{Role: "tool", ToolCallID: c.id, Name: c.name, Content: text})
		raw, _ := json.Marshal(text) // marshaling a string cannot fail
		if json.Valid([]byte(text)) {
			raw = []byte(text)
		}
		results = append(results, result{c.name, raw})
	}
	if w.cfg.ToolFormat == ToolFormatJSON {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(map[string]any{"tool_results": results}); err != nil {
			return nil, fail(FailToolExecution, "encode tool results: %v", err)
		}
		return []ChatMessage{
			{Role: "assistant", Content: t.text},
			{Role: "user", Content: strings.TrimSpace(buf.String())},
		}, nil
	}
	msgs := []ChatMessage{{Role: "assistant", Content: t.text, ToolCalls: t.toolCalls}}
	return append(msgs, native...), nil
}
