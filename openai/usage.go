package openai

import (
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/wire"
)

// UsageOf is an engine's token accounting in the wire's shape (OpenAI's,
// which the voice protocol shares).
func UsageOf(u engine.Usage) *wire.Usage {
	return &wire.Usage{
		PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens,
		PromptTokensDetails: wire.PromptTokensDetails{CachedTokens: u.CachedTokens},
	}
}
