package openai

import (
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// ToolFields are OpenAI's tool fields of a chat request (Chat Completions,
// and llama-server's /apply-template), as they are decoded; Parse reads
// them into serving.Tools.
type ToolFields struct {
	Tools             []wire.Tool     `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
}

// functionName is OpenAI's rule for a function's name: 1 to 64 letters,
// digits, underscores and dashes (Chat Completions and Responses).
var functionName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Parse reads f, its tool_choice parsed, within lim's counts; each
// function's name follows OpenAI's rule (functionName).
func (f *ToolFields) Parse(lim *serving.Limits) (serving.Tools, *serving.Error) {
	t := serving.Tools{Defined: f.Tools}
	if e := lim.CheckTools(f.Tools); e != nil {
		return t, e
	}
	for i, tool := range f.Tools {
		if !functionName.MatchString(tool.Function.Name) {
			param := fmt.Sprintf("tools[%d].function.name", i)
			return t, serving.Invalid(param, "'%s' must be 1 to 64 letters, digits, '_' or '-', got %q", param, tool.Function.Name)
		}
	}
	var e *serving.Error
	t.Choice, e = f.Choice(lim)
	return t, e
}

// Choice reads f's tool_choice and parallel_tool_calls alone, for a
// dialect with its own rule for the tools' names (Ollama's).
func (f *ToolFields) Choice(lim *serving.Limits) (serving.ToolChoice, *serving.Error) {
	c, e := parseToolChoice(f.ToolChoice, lim)
	c.Single = f.ParallelToolCalls != nil && !*f.ParallelToolCalls
	return c, e
}

// toolChoiceForms is what a tool_choice that cannot be read is told.
const toolChoiceForms = `'tool_choice' must be "none", "auto", "required", {"type": "function", "function": {"name": ...}} or {"type": "allowed_tools", "allowed_tools": {"mode": "auto" or "required", "tools": [...]}}`

// parseToolChoice reads OpenAI's tool_choice: serving.ToolsDefault when absent
// or null, "none", "auto", "required", or a named function. Its
// allowed_tools gives its mode ("auto" or "required") and the names of
// the functions it allows, at most lim.MaxAllowedTools of them.
func parseToolChoice(raw json.RawMessage, lim *serving.Limits) (serving.ToolChoice, *serving.Error) {
	var none serving.ToolChoice
	if serving.IsNull(raw) {
		return none, nil
	}
	var mode string
	if err := json.Unmarshal(raw, &mode); err == nil {
		switch m := serving.ToolMode(mode); m {
		case serving.ToolsNone, serving.ToolsAuto, serving.ToolsRequired:
			return serving.ToolChoice{Mode: m}, nil
		}
		return none, serving.Invalid("tool_choice", "%s, got %q", toolChoiceForms, mode)
	}
	type function struct {
		Name string `json:"name"`
	}
	var obj struct {
		Type         string   `json:"type"`
		Function     function `json:"function"`
		AllowedTools *struct {
			Mode  string `json:"mode"`
			Tools []struct {
				Type     string   `json:"type"`
				Function function `json:"function"`
			} `json:"tools"`
		} `json:"allowed_tools"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return none, serving.Invalid("tool_choice", "%s", toolChoiceForms)
	}
	switch {
	case obj.Type == "function" && obj.Function.Name != "":
		return serving.ToolChoice{Mode: serving.ToolsFunction, Name: obj.Function.Name}, nil
	case obj.Type == "allowed_tools" && obj.AllowedTools != nil:
		at := obj.AllowedTools
		if m := serving.ToolMode(at.Mode); m != serving.ToolsAuto && m != serving.ToolsRequired {
			return none, serving.Invalid("tool_choice", "'tool_choice.allowed_tools.mode' must be \"auto\" or \"required\", got %q", at.Mode)
		}
		if len(at.Tools) > lim.MaxAllowedTools {
			return none, serving.OverLimit("tool_choice", "max-allowed-tools", lim.MaxAllowedTools, "entries",
				"'tool_choice.allowed_tools.tools' has %d entries", len(at.Tools))
		}
		allowed := make([]string, 0, len(at.Tools))
		for i, t := range at.Tools {
			if t.Type != "function" || t.Function.Name == "" {
				return none, serving.Invalid("tool_choice", "'tool_choice.allowed_tools.tools[%d]' must be {\"type\": \"function\", \"function\": {\"name\": ...}}", i)
			}
			allowed = append(allowed, t.Function.Name)
		}
		if len(allowed) == 0 {
			return none, serving.Invalid("tool_choice", "'tool_choice.allowed_tools.tools' must name at least one function")
		}
		return serving.ToolChoice{Mode: serving.ToolMode(at.Mode), Allowed: allowed}, nil
	}
	return none, serving.Invalid("tool_choice", "%s", toolChoiceForms)
}
