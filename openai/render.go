package openai

import (
	"net/http"

	"github.com/corral-llm/corral/serving"
)

// rendered is one prompt of a render answer, in vLLM's shape (the
// generate request its render endpoints return): the request's id, the
// model, and the token ids the model evaluates for the prompt.
type rendered struct {
	RequestID string  `json:"request_id"`
	Model     string  `json:"model"`
	TokenIDs  []int32 `json:"token_ids"`
}

// CompletionsRender serves POST /v1/completions/render: the body of
// /v1/completions, checked as it is, answered with the token ids of its
// prompt, as vLLM answers: a list with one entry per prompt (corral's
// completions take one). Nothing is generated; a router keys its prefix
// index on the ids.
func CompletionsRender(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, WriteError, false, func(x *serving.Exchange, body *completionRequest) *serving.Error {
		out, e := render(x, &body.req, "cmpl-")
		if e != nil {
			return e
		}
		serving.WriteJSON(w, http.StatusOK, []rendered{out})
		return nil
	})
}

// ChatCompletionsRender serves POST /v1/chat/completions/render: the body
// of /v1/chat/completions, checked as it is, answered with the token ids
// of the prompt its chat template renders (tools, template arguments and
// reasoning settings included), as vLLM answers: one object.
func ChatCompletionsRender(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, WriteError, false, func(x *serving.Exchange, body *chatRequest) *serving.Error {
		out, e := render(x, &body.req, "chatcmpl-")
		if e != nil {
			return e
		}
		serving.WriteJSON(w, http.StatusOK, out)
		return nil
	})
}

// render tokenizes r's prompt as generation would.
func render(x *serving.Exchange, r *serving.Request, prefix string) (rendered, *serving.Error) {
	req, g, e := x.Core.Build(x.Model, r)
	if e != nil {
		return rendered{}, e
	}
	toks, err := x.Model.Engine().Render(x.R.Context(), req)
	if err != nil {
		return rendered{}, serving.SubmitError(err, g.PromptParam)
	}
	h := header(x.Model, prefix)
	return rendered{RequestID: h.ID, Model: h.Model, TokenIDs: toks}, nil
}
