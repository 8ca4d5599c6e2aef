package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/wire"
)

func biosContext() BiosContext {
	loc := time.FixedZone("CET", 3600)
	return BiosContext{
		Now:                time.Date(2026, 11, 21, 9, 30, 0, 0, loc),
		TimezoneName:       "Europe/Berlin",
		WorkerName:         "w1",
		ToolItersRemaining: 3,
		NormalTools: []ToolDef{{Type: "function", Function: ToolFunctionDef{
			Name: "lookup", Description: "Look a word up.",
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}},
		}}},
		ExitTools: []ToolDef{{Type: "function", Function: ToolFunctionDef{Name: "report_done", Description: "Report completion."}}},
	}
}

func TestBIOSContents(t *testing.T) {
	c := biosContext()
	got := BIOS(c)
	for _, want := range []string{
		"[platform " + BiosVersion + "]",
		"You are w1,",
		"2026-11-21 09:30:00 +0100 (Saturday), time zone Europe/Berlin",
		"at most 3 more tool rounds",
		`- lookup: Look a word up. Parameters (JSON Schema): {"properties":{"q":{"type":"string"}},"type":"object"}`,
		"- report_done: Report completion.",
		"does not end your turn",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("BIOS lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, `"tool_calls"`) {
		t.Errorf("native-format BIOS announces the JSON convention:\n%s", got)
	}
	if BIOS(c) != got {
		t.Error("BIOS is not deterministic")
	}
}

func TestBIOSVariants(t *testing.T) {
	c := biosContext()
	c.ToolItersRemaining = 0
	c.ToolFormat = ToolFormatJSON
	c.Version = "bios-test"
	got := BIOS(c)
	for _, want := range []string{"[platform bios-test]", "no tool rounds are left", `{"tool_calls":[{"name":"<name>","arguments":{...}}]`, `"tool_results"`} {
		if !strings.Contains(got, want) {
			t.Errorf("BIOS lacks %q:\n%s", want, got)
		}
	}
	c.NormalTools, c.ExitTools = nil, nil
	if got := BIOS(c); strings.Contains(got, "Tools") || strings.Contains(got, "tool_calls") || strings.Contains(got, "Signals") {
		t.Errorf("BIOS without tools mentions tools:\n%s", got)
	}
}

func TestBuildMessageStack(t *testing.T) {
	conv := []wire.Message{
		{Role: "user", Content: "question"},
		{Role: "assistant", Content: "call", ToolCalls: []wire.ToolCall{{ID: "c1", Type: "function"}}},
		{Role: "tool", ToolCallID: "c1", Content: "answer"},
	}
	msgs := BuildMessageStack("BIOS TEXT\n", "Caller rules.", conv)
	if len(msgs) != 4 {
		t.Fatalf("got %d messages, want 4", len(msgs))
	}
	if msgs[0].Role != "system" || msgs[0].Content != "BIOS TEXT\n\n---\n\nCaller rules." {
		t.Errorf("system message = %+v", msgs[0])
	}
	for i, m := range conv {
		if msgs[i+1].Role != m.Role || msgs[i+1].Content != m.Content || msgs[i+1].ToolCallID != m.ToolCallID {
			t.Errorf("message %d = %+v, want %+v", i+1, msgs[i+1], m)
		}
	}
	if got := BuildMessageStack("BIOS", "", conv[:1]); len(got) != 2 || got[0].Content != "BIOS" {
		t.Errorf("without caller prompt: %+v", got)
	}
	conv[0].Content = "changed"
	if msgs[1].Content != "question" {
		t.Error("BuildMessageStack aliases the caller's conversation")
	}
}
