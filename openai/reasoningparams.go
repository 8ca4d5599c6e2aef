package openai

import "github.com/corral-llm/corral/serving"

// ReasoningParams are a request's reasoning budget, under either name
// clients send it: thinking_budget, max_reasoning_tokens.
type ReasoningParams struct {
	ThinkingBudget     *int `json:"thinking_budget"`
	MaxReasoningTokens *int `json:"max_reasoning_tokens"`
}

// Budget is the requested budget in tokens: nil when absent (the
// server's default applies), -1 for none.
func (p *ReasoningParams) Budget() (*int, *serving.Error) {
	b, param := p.ThinkingBudget, "thinking_budget"
	if b == nil {
		b, param = p.MaxReasoningTokens, "max_reasoning_tokens"
	} else if p.MaxReasoningTokens != nil && *p.MaxReasoningTokens != *b {
		return nil, serving.Invalid("max_reasoning_tokens", "'thinking_budget' and 'max_reasoning_tokens' name the same budget: send one")
	}
	if b != nil && *b < -1 {
		return nil, serving.Invalid(param, "'%s' must be -1 (no budget) or >= 0 tokens, got %d", param, *b)
	}
	return b, nil
}
