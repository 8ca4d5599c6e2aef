package reasoning

import "strings"

// Think is the reasoning between <think> and </think> at the start of the
// answer: DeepSeek R1 and V3.1 and later, Qwen3, QwQ, Qwen3.5, GLM 4.5 and
// later, MiniMax M1 and M2, Kimi K2 Thinking, SmolLM3, Nemotron and others.
// (llama-server calls the split of this markup "deepseek".)
var Think Format = &tagFormat{
	name: "think", start: "<think>", end: "</think>", close: "</think>\n\n",
	markers: []string{"<think>", "</think>"},
}

// isThink reports a template that writes <think> or </think>, or
// MiniMax-M1's, which writes none but whose model thinks in them.
func isThink(src string) bool {
	return strings.Contains(src, "<think>") || strings.Contains(src, "</think>") || isMiniMaxM1(src)
}
