package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/corral-llm/corral/supervisor/agent"
	"github.com/corral-llm/corral/wire"
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

// converse runs a request: one streamed turn, then tool rounds until the
// model answers without calling a normal tool or the budget is spent. The
// BIOS is regenerated before every turn.
func (w *Worker) converse(ctx context.Context, r *request) (string, FinishReason, error) {
	normal, exit := agent.ToolNames(w.cfg.NormalTools), agent.ToolNames(w.cfg.ExitTools)
	known := func(n string) bool { return normal[n] || exit[n] }
	conv := []wire.Message{{Role: "user", Content: r.job.UserPrompt}}
	for {
		left := w.toolItersLeft(r)
		bios := w.cfg.BIOS(agent.BiosContext{
			Now:                time.Now().In(w.loc),
			TimezoneName:       w.loc.String(),
			WorkerName:         w.cfg.Name,
			ToolItersRemaining: left,
			NormalTools:        w.cfg.NormalTools,
			ExitTools:          w.cfg.ExitTools,
			ToolFormat:         w.cfg.ToolFormat,
		})
		body, err := json.Marshal(w.payload(r.job.Params, agent.BuildMessageStack(bios, r.job.SystemPrompt, conv)))
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
		var round []agent.Call
		for _, c := range calls {
			if exit[c.Name] {
				w.recordSignal(r, ExitSignal{ToolName: c.Name, Arguments: c.Args, EmittedAt: time.Now()})
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
func (w *Worker) turnCalls(t turn, known func(string) bool) ([]agent.Call, string, error) {
	if w.cfg.ToolFormat == agent.ToolFormatJSON {
		calls, content, isTools, err := agent.ParseJSONToolReply(t.text, known)
		if !isTools {
			return nil, t.text, nil
		}
		return calls, content, err
	}
	calls, err := agent.ParseNativeCalls(t.toolCalls, known)
	return calls, t.text, err
}

// runTools executes the normal tools among calls and returns the messages
// that continue the conversation: the assistant's reply and the results.
// Exit tools in the same reply get an empty acknowledgement (native format
// requires an answer to every call id).
func (w *Worker) runTools(ctx context.Context, r *request, t turn, calls []agent.Call, normal map[string]bool) ([]wire.Message, error) {
	if w.cfg.ToolRunner == nil {
		return nil, fail(FailToolExecution, "no tool runner configured")
	}
	type result struct {
		Name   string          `json:"name"`
		Result json.RawMessage `json:"result"`
	}
	var native []wire.Message
	var results []result
	for _, c := range calls {
		text := "recorded"
		if normal[c.Name] {
			v, err := w.cfg.ToolRunner.RunTool(ctx, agent.ToolInvocation{Name: c.Name, Arguments: c.Args, RequestID: r.id, JobName: r.job.Name})
			if err != nil {
				if cause := context.Cause(ctx); cause != nil {
					return nil, cause
				}
				return nil, fail(FailToolExecution, "tool %q: %v", c.Name, err)
			}
			if text, err = agent.ToolResultText(v); err != nil {
				return nil, fail(FailToolExecution, "tool %q: %v", c.Name, err)
			}
		}
		native = append(native, wire.Message{Role: "tool", ToolCallID: c.ID, Name: c.Name, Content: text})
		raw, _ := json.Marshal(text) // marshaling a string cannot fail
		if json.Valid([]byte(text)) {
			raw = []byte(text)
		}
		results = append(results, result{c.Name, raw})
	}
	if w.cfg.ToolFormat == agent.ToolFormatJSON {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(map[string]any{"tool_results": results}); err != nil {
			return nil, fail(FailToolExecution, "encode tool results: %v", err)
		}
		return []wire.Message{
			{Role: "assistant", Content: t.text},
			{Role: "user", Content: strings.TrimSpace(buf.String())},
		}, nil
	}
	msgs := []wire.Message{{Role: "assistant", Content: t.text, ToolCalls: t.toolCalls}}
	return append(msgs, native...), nil
}
