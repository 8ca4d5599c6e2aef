package openai

import (
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/wire"
)

// UsageOf is an engine's token accounting in the wire's shape (OpenAI's,
// which the voice protocol shares): completion_tokens_details'
// reasoning_tokens are the reasoning's tokens, as the engine counted
// them.
func UsageOf(u engine.Usage) *wire.Usage {
	return &wire.Usage{
		PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens,
		PromptTokensDetails:     wire.PromptTokensDetails{CachedTokens: u.CachedTokens},
		CompletionTokensDetails: &wire.CompletionTokensDetails{ReasoningTokens: u.ReasoningTokens},
	}
}
