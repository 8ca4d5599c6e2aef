package toolcall

import (
	"strings"

	"github.com/corral-llm/corral/grammar"
)

// Hermes writes one <tool_call>{"name": ..., "arguments": {...}}</tool_call>
// block per call, after any text: Hermes 2 and 3, Qwen 2.5 and Qwen3
// (but Qwen3-Coder and Qwen3.5: see Qwen3Coder), QwQ, SmolLM3, and the
// chatml built-in.
var Hermes Format = &jsonFormat{
	name:    "hermes",
	markers: []string{"<tool_call>", "</tool_call>"},
	sx: syntax{
		start: []string{"<tool_call>"}, end: "</tool_call>", argsKey: "arguments",
		frame: grammar.Frame{Before: "<tool_call>\n", After: "\n</tool_call>", Sep: "\n"},
	},
}

// isHermes reports a template that writes earlier calls in <tool_call>
// tags, or SmolLM3's. GLM's <arg_key> and MiniMax's <invoke> markup
// inside the same tags is not Hermes's JSON.
func isHermes(src string) bool {
	return strings.Contains(src, "<tool_call>") && !strings.Contains(src, "<arg_key>") && !strings.Contains(src, "<invoke") ||
		isSmolLM3(src)
}

// isSmolLM3 reports SmolLM3's template, by the reasoning mode its system
// header writes ("Reasoning Mode: " and /think or /no_think). SmolLM3
// calls tools in Hermes's <tool_call> JSON, which its own template asks
// for when it lists tools, but the edition GGUFs carry (Unsloth's) lists
// none and writes no calls, so no markup tells; nor does its default
// system prompt ("a helpful AI assistant named SmolLM, trained by
// Hugging Face"), which is SmolLM2's too, a model that calls none.
func isSmolLM3(src string) bool {
	return strings.Contains(src, "Reasoning Mode: ") && strings.Contains(src, "/think") && strings.Contains(src, "/no_think")
}
