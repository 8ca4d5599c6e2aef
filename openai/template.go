package openai

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/model"
)

// Chat template variables a request sets: chat_template_kwargs (vLLM's
// and llama-server's field), OpenAI's reasoning_effort and Ollama's think.

// reasoningEfforts are the values of OpenAI's reasoning_effort.
var reasoningEfforts = []string{"none", "minimal", "low", "medium", "high", "xhigh"}

// templateArgs are the fields of a chat request that set chat template
// variables.
type templateArgs struct {
	// ChatTemplateKwargs are extra variables, such as
	// {"enable_thinking": false}; they override the server's.
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
	// ReasoningEffort is given to templates that read reasoning_effort
	// (gpt-oss), unless chat_template_kwargs sets it.
	ReasoningEffort *string `json:"reasoning_effort"`
}

// templateKwargs are the template variables of a request: the model's,
// then reasoning_effort where the template reads it, then the request's
// chat_template_kwargs.
func templateKwargs(m *model.Model, t *templateArgs) (map[string]any, *Error) {
	kw := m.Kwargs()
	if t.ReasoningEffort != nil {
		if !slices.Contains(reasoningEfforts, *t.ReasoningEffort) {
			return nil, invalid("reasoning_effort", "'reasoning_effort' must be one of %s, got %q", strings.Join(reasoningEfforts, ", "), *t.ReasoningEffort)
		}
		if m.Template().Reads("reasoning_effort") {
			kw["reasoning_effort"] = *t.ReasoningEffort
		}
	}
	req, err := model.ParseKwargs(t.ChatTemplateKwargs)
	if err != nil {
		return nil, invalid("chat_template_kwargs", "'chat_template_kwargs': %v", err)
	}
	for k, v := range req {
		kw[k] = v
	}
	return kw, nil
}

// thinkKwargs are the template variables of an Ollama request: the
// model's, and "think" (true, false, "low", "medium" or "high") as the
// variables the template reads: enable_thinking (Qwen 3 and many
// others) and thinking (DeepSeek V3.1) get whether to think,
// reasoning_effort (gpt-oss) the level.
func thinkKwargs(m *model.Model, think json.RawMessage) (map[string]any, *Error) {
	kw := m.Kwargs()
	if isNull(think) {
		return kw, nil
	}
	var on bool
	var level string
	if json.Unmarshal(think, &on) != nil {
		if json.Unmarshal(think, &level) != nil || !slices.Contains([]string{"low", "medium", "high"}, level) {
			return nil, invalid("think", "'think' must be true, false, \"low\", \"medium\" or \"high\"")
		}
		on = true
	}
	for _, name := range []string{"enable_thinking", "thinking"} {
		if m.Template().Reads(name) {
			kw[name] = on
		}
	}
	if level != "" && m.Template().Reads("reasoning_effort") {
		kw["reasoning_effort"] = level
	}
	return kw, nil
}

// applyTemplateRequest is the body of POST /apply-template: a chat
// completion request, of which what makes the prompt is read.
type applyTemplateRequest struct {
	Model    string         `json:"model"`
	Messages []chat.Message `json:"messages"`
	toolFields
	templateArgs
	// AddGenerationPrompt ends the prompt with the assistant's turn
	// header, as a chat completion's does (the default).
	AddGenerationPrompt *bool `json:"add_generation_prompt"`
}

// ApplyTemplate serves llama-server's POST /apply-template: the prompt a
// chat completion request would give the model, as {"prompt": text},
// without generating. As for a completion, the text lacks the BOS token
// the tokenizer adds itself.
func (a *API) ApplyTemplate(w http.ResponseWriter, r *http.Request) {
	var body applyTemplateRequest
	if e := decodeBody(r, &body); e != nil {
		WriteError(w, e)
		return
	}
	if e := a.limits.checkChat(body.Messages, &body.toolFields); e != nil {
		WriteError(w, e)
		return
	}
	l, e := a.acquire(r.Context(), body.Model, nil)
	if e != nil {
		WriteError(w, e)
		return
	}
	defer l.Release()
	m := l.Model()
	plan, e := planTools(m, &body.toolFields, &a.limits)
	if e != nil {
		WriteError(w, e)
		return
	}
	kw, e := templateKwargs(m, &body.templateArgs)
	if e != nil {
		WriteError(w, e)
		return
	}
	gen := body.AddGenerationPrompt == nil || *body.AddGenerationPrompt
	prompt, e := render(m, body.Messages, chat.Options{AddGenerationPrompt: gen, Tools: plan.render, Kwargs: kw}, &a.limits)
	if e != nil {
		WriteError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": prompt})
}
