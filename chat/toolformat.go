package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/corral-llm/corral/grammar"
)

// ToolFormat is how a model writes its tool calls. Each format has a
// parser (NewToolParser) and a grammar that makes the model call
// (ToolFormat.Grammar); both read and write the same markup, which is
// also how the built-in templates render the calls of earlier turns.
type ToolFormat string

// The tool-call formats of the models corral knows.
const (
	// ToolsHermes: one <tool_call>{"name": ..., "arguments": {...}}</tool_call>
	// block per call, after any text (Hermes 2 and 3, Qwen 2.5 and 3,
	// and the chatml built-in).
	ToolsHermes ToolFormat = "hermes"
	// ToolsLlama3: the whole answer is {"name": ..., "parameters": {...}},
	// possibly after <|python_tag|>, calls separated by ";" (Llama 3.1,
	// 3.2 and 3.3 with JSON tool calling).
	ToolsLlama3 ToolFormat = "llama3"
	// ToolsMistral: [TOOL_CALLS] and then a JSON array of
	// {"name": ..., "arguments": {...}} (Mistral 7B v0.3, Nemo, Small).
	// The array alone also opens an answer: in Mistral's own vocabularies
	// [TOOL_CALLS] is a control token, whose text is not output.
	ToolsMistral ToolFormat = "mistral"
	// ToolsJSON: the whole answer is a call object, an array of them, or
	// {"tool_calls": [...]}: the fallback for templates without a
	// recognised convention.
	ToolsJSON ToolFormat = "json"
)

// ToolFormats lists the formats, for flags and error messages.
func ToolFormats() []ToolFormat {
	return []ToolFormat{ToolsHermes, ToolsLlama3, ToolsMistral, ToolsJSON}
}

// ParseToolFormat checks a format name (a flag's value).
func ParseToolFormat(s string) (ToolFormat, error) {
	f := ToolFormat(s)
	if !slices.Contains(ToolFormats(), f) {
		return "", fmt.Errorf("unknown tool-call format %q (known: hermes, llama3, mistral, json)", s)
	}
	return f, nil
}

// DetectToolFormat names the tool-call format a chat template source
// uses, judged by the markup it writes for the calls of earlier turns:
// <tool_call> is Hermes, [TOOL_CALLS] is Mistral, <|python_tag|> or the
// Llama 3 headers are Llama 3, and anything else gets the JSON fallback.
func DetectToolFormat(src string) ToolFormat {
	switch {
	case strings.Contains(src, "<tool_call>"):
		return ToolsHermes
	case strings.Contains(src, "[TOOL_CALLS]"):
		return ToolsMistral
	case strings.Contains(src, "<|python_tag|>"), strings.Contains(src, "<|start_header_id|>"):
		return ToolsLlama3
	}
	return ToolsJSON
}

// syntax is the markup of a format.
type syntax struct {
	start   []string // markers that open the calls anywhere in the answer
	bare    bool     // the calls may also open the answer without a marker, with '{' (or '[')
	argsKey string   // the key of the arguments in a call object
	frame   grammar.Frame
}

func (f ToolFormat) syntax() syntax {
	switch f {
	case ToolsHermes:
		return syntax{
			start: []string{"<tool_call>"}, argsKey: "arguments",
			frame: grammar.Frame{Before: "<tool_call>\n", After: "\n</tool_call>", Sep: "\n"},
		}
	case ToolsLlama3:
		return syntax{
			start: []string{"<|python_tag|>"}, bare: true, argsKey: "parameters",
			frame: grammar.Frame{Sep: "; "},
		}
	case ToolsMistral:
		return syntax{
			start: []string{"[TOOL_CALLS]"}, bare: true, argsKey: "arguments",
			frame: grammar.Frame{Open: "[TOOL_CALLS][", Close: "]", Sep: ", "},
		}
	}
	return syntax{bare: true, argsKey: "arguments", frame: grammar.Frame{Open: "[", Close: "]", Sep: ", "}}
}

// localRef matches the start of a "$ref" to the same document.
var localRef = regexp.MustCompile(`("\$ref"\s*:\s*")#`)

// Grammar returns a GBNF grammar under which the model's whole answer is
// one call (parallel false) or one or more calls (parallel true) of the
// given tools, in this format's markup, each call's arguments following
// its function's parameters schema. It is how tool_choice "required" and
// a named function are enforced. A parameters schema the grammar
// converter cannot express is an error wrapping grammar.ErrInvalidSchema
// that names the tool.
func (f ToolFormat) Grammar(tools []Tool, parallel bool) (string, error) {
	return f.GrammarLimits(tools, parallel, grammar.DefaultSchemaLimits)
}

// GrammarLimits is Grammar with each parameters schema, and the schema of
// the calls that joins them, within lim (see grammar.FromSchemaLimits): a
// larger one is an error wrapping a *grammar.SchemaLimitError.
func (f ToolFormat) GrammarLimits(tools []Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	sx := f.syntax()
	calls := make([]json.RawMessage, len(tools))
	for i, t := range tools {
		params := bytes.TrimSpace(t.Function.Parameters)
		if len(params) == 0 || bytes.Equal(params, []byte("null")) {
			params = []byte(`{"type": "object"}`)
		}
		// Check each schema alone, so that an error names its tool.
		if _, err := grammar.FromSchemaLimits(params, lim); err != nil {
			return "", fmt.Errorf("tool %q: parameters: %w", t.Function.Name, err)
		}
		name, err := json.Marshal(t.Function.Name)
		if err != nil {
			return "", err
		}
		key, _ := json.Marshal(sx.argsKey)
		// References within the parameters ("#/$defs/...") now point
		// inside the call's schema.
		at := "#/properties/" + sx.argsKey
		if len(tools) > 1 {
			at = fmt.Sprintf("#/anyOf/%d/properties/%s", i, sx.argsKey)
		}
		params = localRef.ReplaceAll(params, []byte("${1}"+at))
		calls[i] = json.RawMessage(fmt.Sprintf(`{"type": "object", "properties": {"name": {"const": %s}, %s: %s}, "required": ["name", %s]}`, name, key, params, key))
	}
	schema := calls[0]
	if len(calls) > 1 {
		list, err := json.Marshal(calls)
		if err != nil {
			return "", err
		}
		schema = json.RawMessage(`{"anyOf": ` + string(list) + `}`)
	}
	frame := sx.frame
	if !parallel {
		frame.Max = 1
	}
	return grammar.FromSchemaFramedLimits(schema, frame, lim)
}
