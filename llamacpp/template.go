package llamacpp

import (
	"net/http"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/serving"
)

// Chat template variables a request sets: chat_template_kwargs (vLLM's
// and llama-server's field), OpenAI's reasoning_effort and Ollama's think.

// applyTemplateRequest is the body of POST /apply-template: a chat
// completion request, of which what makes the prompt is read.
type applyTemplateRequest struct {
	Model    string         `json:"model"`
	Messages []chat.Message `json:"messages"`
	openai.ToolFields
	openai.TemplateArgs
	// AddGenerationPrompt ends the prompt with the assistant's turn
	// header, as a chat completion's does (the default).
	AddGenerationPrompt *bool `json:"add_generation_prompt"`
	// tools are ToolFields read, and vars TemplateArgs, by Check.
	tools serving.Tools
	vars  serving.TemplateVars
}

// Check refuses more messages and tools than lim allows, and reads the
// tools.
func (body *applyTemplateRequest) Check(lim *serving.Limits) *serving.Error {
	var e *serving.Error
	if e = lim.CheckMessages(body.Messages); e != nil {
		return e
	}
	if body.tools, e = body.ToolFields.Parse(lim); e != nil {
		return e
	}
	body.vars, e = body.TemplateArgs.Parse()
	return e
}

// Lease names the model; no keep_alive.
func (body *applyTemplateRequest) Lease() (string, *serving.KeepAlive, bool) {
	return body.Model, nil, true
}

// ApplyTemplate serves llama-server's POST /apply-template: the prompt a
// chat completion request would give the model, as {"prompt": text},
// without generating. As for a completion, the text lacks the BOS token
// the tokenizer adds itself.
func ApplyTemplate(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, openai.WriteError, false, func(x *serving.Exchange, body *applyTemplateRequest) *serving.Error {
		m, lim := x.Model, x.Core.Limits()
		plan, e := serving.PlanTools(m, &body.tools, lim)
		if e != nil {
			return e
		}
		kw := serving.TemplateKwargs(m, body.vars)
		gen := body.AddGenerationPrompt == nil || *body.AddGenerationPrompt
		prompt, e := serving.Render(m, body.Messages, chat.Options{AddGenerationPrompt: gen, Tools: plan.Render, Kwargs: kw}, lim)
		if e != nil {
			return e
		}
		serving.WriteJSON(w, http.StatusOK, map[string]string{"prompt": prompt})
		return nil
	})
}
