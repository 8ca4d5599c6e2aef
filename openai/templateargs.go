package openai

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/serving"
)

// reasoningEfforts are the values of OpenAI's reasoning_effort.
var reasoningEfforts = []string{"none", "minimal", "low", "medium", "high", "xhigh"}

// TemplateArgs are the fields of an OpenAI chat request (and of vLLM's
// and llama-server's) that set chat template variables, as they are
// decoded; Parse reads them into serving.TemplateVars.
type TemplateArgs struct {
	// ChatTemplateKwargs are extra variables, such as
	// {"enable_thinking": false}; they override the server's.
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
	// ReasoningEffort is given to templates that read reasoning_effort
	// (gpt-oss), unless chat_template_kwargs sets it.
	ReasoningEffort *string `json:"reasoning_effort"`
}

// Parse reads t: reasoning_effort one of OpenAI's values,
// chat_template_kwargs an object of variables within model.ParseKwargs'
// bounds.
func (t *TemplateArgs) Parse() (serving.TemplateVars, *serving.Error) {
	var v serving.TemplateVars
	if t.ReasoningEffort != nil {
		if !slices.Contains(reasoningEfforts, *t.ReasoningEffort) {
			return v, serving.Invalid("reasoning_effort", "'reasoning_effort' must be one of %s, got %q", strings.Join(reasoningEfforts, ", "), *t.ReasoningEffort)
		}
		v.ReasoningEffort = *t.ReasoningEffort
	}
	kw, err := model.ParseKwargs(t.ChatTemplateKwargs)
	if err != nil {
		return v, serving.Invalid("chat_template_kwargs", "'chat_template_kwargs': %v", err)
	}
	if len(kw) > 0 {
		v.Kwargs = make(map[string]any, len(kw))
		for k, raw := range kw {
			v.Kwargs[k] = raw
		}
	}
	return v, nil
}
