package agent

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/corral-llm/corral/wire"
)

func knownTools(names ...string) func(string) bool {
	return func(n string) bool {
		for _, k := range names {
			if n == k {
				return true
			}
		}
		return false
	}
}

func TestParseJSONToolReply(t *testing.T) {
	known := knownTools("lookup", "done")
	calls, content, isTools, err := ParseJSONToolReply(
		` {"tool_calls":[{"name":"lookup","arguments":{"q":"cat"}},{"name":"done","arguments":{}}],"content":"hi"}`+"\n", known)
	if err != nil || !isTools {
		t.Fatalf("valid envelope: isTools=%v err=%v", isTools, err)
	}
	want := []Call{{ID: "call_1", Name: "lookup", Args: map[string]any{"q": "cat"}}, {ID: "call_2", Name: "done", Args: map[string]any{}}}
	if !reflect.DeepEqual(calls, want) || content != "hi" {
		t.Fatalf("calls = %+v content = %q, want %+v and hi", calls, content, want)
	}

	// Everything that does not name a configured tool is content, returned
	// as it came: text, JSON answers, objects in the convention's shape
	// that call no configured tool, broken JSON.
	contents := map[string]string{
		"plain text":            "Plain answer {not json}",
		"json answer":           ` {"answer":"a cat","confidence":3}` + "\n",
		"json array":            `[{"name":"lookup","arguments":{}}]`,
		"not json":              `{tool_calls: []}`,
		"truncated":             `{"tool_calls":[{"name":"lookup","arguments":{"q":"c`,
		"no tool_calls":         `{"content":"x"}`,
		"empty tool_calls":      `{"tool_calls":[]}`,
		"tool_calls not a list": `{"tool_calls":"lookup"}`,
		"unknown tool":          `{"tool_calls":[{"name":"rm_rf","arguments":{}}]}`,
		"no name":               `{"tool_calls":[{"arguments":{}}]}`,
		"name not a string":     `{"tool_calls":[{"name":["lookup"],"arguments":{}}]}`,
	}
	for name, reply := range contents {
		t.Run("content/"+name, func(t *testing.T) {
			calls, content, isTools, err := ParseJSONToolReply(reply, known)
			if isTools || err != nil || calls != nil || content != reply {
				t.Fatalf("calls=%v content=%q isTools=%v err=%v, want the reply as content", calls, content, isTools, err)
			}
		})
	}
	// No tools configured: nothing is a call.
	if _, content, isTools, err := ParseJSONToolReply(`{"tool_calls":[{"name":"lookup","arguments":{}}]}`, knownTools()); isTools || err != nil || content == "" {
		t.Fatalf("no tools configured: content=%q isTools=%v err=%v", content, isTools, err)
	}

	// A reply that names a configured tool is held to the convention.
	bad := map[string]string{
		"unknown key":          `{"tool_calls":[{"name":"lookup","arguments":{}}],"extra":1}`,
		"unknown call key":     `{"tool_calls":[{"name":"lookup","arguments":{},"id":"x"}]}`,
		"trailing data":        `{"tool_calls":[{"name":"lookup","arguments":{}}]} and more`,
		"two objects":          `{"tool_calls":[{"name":"lookup","arguments":{}}]}{}`,
		"content not a string": `{"tool_calls":[{"name":"lookup","arguments":{}}],"content":5}`,
		"unknown tool too":     `{"tool_calls":[{"name":"lookup","arguments":{}},{"name":"rm_rf","arguments":{}}]}`,
		"no name too":          `{"tool_calls":[{"name":"lookup","arguments":{}},{"arguments":{}}]}`,
		"array arguments":      `{"tool_calls":[{"name":"lookup","arguments":[1]}]}`,
		"string arguments":     `{"tool_calls":[{"name":"lookup","arguments":"{}"}]}`,
		"missing arguments":    `{"tool_calls":[{"name":"lookup"}]}`,
	}
	for name, reply := range bad {
		t.Run("bad/"+name, func(t *testing.T) {
			_, _, isTools, err := ParseJSONToolReply(reply, known)
			if !isTools || err == nil {
				t.Fatalf("isTools=%v err=%v, want a parse error", isTools, err)
			}
		})
	}
}

func TestToolCallAccumulator(t *testing.T) {
	var a ToolCallAccumulator
	deltas := []wire.ToolCallDelta{
		{Index: 0, ID: "a"}, {Index: 0}, {Index: 1, ID: "b"}, {Index: 1},
	}
	deltas[0].Function.Name = "look"
	deltas[1].Function.Name = "up"
	deltas[1].Function.Arguments = `{"q":`
	deltas[2].Function.Name = "done"
	deltas[3].Function.Arguments = `{}`
	for _, d := range deltas {
		if err := a.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	a.Calls[0].Function.Arguments += `"x"}`
	calls, err := ParseNativeCalls(a.Calls, knownTools("lookup", "done"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Call{{ID: "a", Name: "lookup", Args: map[string]any{"q": "x"}}, {ID: "b", Name: "done", Args: map[string]any{}}}
	if !reflect.DeepEqual(calls, want) {
		t.Fatalf("calls = %+v, want %+v", calls, want)
	}
	if err := a.Add(wire.ToolCallDelta{Index: 5}); err == nil {
		t.Error("out-of-order index accepted")
	}
}

func TestParseNativeCallsFillsIDs(t *testing.T) {
	tcs := []wire.ToolCall{{Type: "function", Function: wire.FunctionCall{Name: "done", Arguments: "{}"}}}
	calls, err := ParseNativeCalls(tcs, knownTools("done"))
	if err != nil || calls[0].ID != "call_1" || tcs[0].ID != "call_1" {
		t.Fatalf("calls=%+v tcs=%+v err=%v", calls, tcs, err)
	}
	tcs[0].Function.Arguments = "{oops"
	if _, err := ParseNativeCalls(tcs, knownTools("done")); err == nil {
		t.Error("malformed arguments accepted")
	}
}

func TestToolResultText(t *testing.T) {
	if s, err := ToolResultText("plain"); s != "plain" || err != nil {
		t.Errorf("string: %q %v", s, err)
	}
	if s, err := ToolResultText(map[string]int{"n": 2}); s != `{"n":2}` || err != nil {
		t.Errorf("map: %q %v", s, err)
	}
	if _, err := ToolResultText(make(chan int)); err == nil {
		t.Error("unencodable result accepted")
	}
}

func TestCommandTools(t *testing.T) {
	tools := CommandTools{
		"echo": {"cat"},
		"fail": {"sh", "-c", "echo broken >&2; exit 3"},
	}
	ctx := context.Background()
	got, err := tools.RunTool(ctx, ToolInvocation{Name: "echo", Arguments: map[string]any{"q": "x"}})
	if err != nil || got != `{"q":"x"}` {
		t.Fatalf("echo: %v, %v", got, err)
	}
	_, err = tools.RunTool(ctx, ToolInvocation{Name: "fail", Arguments: map[string]any{}})
	if err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("fail: err = %v, want one carrying stderr", err)
	}
	if _, err := tools.RunTool(ctx, ToolInvocation{Name: "missing"}); err == nil {
		t.Fatal("unknown tool ran")
	}
	var ee interface{ ExitCode() int }
	_, err = tools.RunTool(ctx, ToolInvocation{Name: "fail", Arguments: map[string]any{}})
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("fail: err = %v, want exit status 3 wrapped", err)
	}
}
