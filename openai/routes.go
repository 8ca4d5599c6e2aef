// Package openai serves OpenAI's API (/v1/chat/completions,
// /v1/completions, /v1/embeddings, /v1/audio/transcriptions, /v1/models, with llama-server's aliases
// without /v1; vLLM's render endpoints) and corral's paced chat completions on package serving's
// core: it decodes OpenAI's request shapes into the core's, and encodes
// answers (server-sent events or whole) and errors in OpenAI's shapes.
package openai

import (
	"net/http"

	"github.com/corral-llm/corral/serving"
)

// Routes are the endpoints of OpenAI's API (with llama-server's aliases
// without /v1) and the paced chat endpoints.
func Routes() []serving.Route {
	return []serving.Route{
		{Method: http.MethodPost, Paths: []string{"/v1/chat/completions", "/chat/completions"}, Handler: ChatCompletions},
		{Method: http.MethodPost, Paths: []string{"/v1/completions", "/completions"}, Handler: Completions},
		{Method: http.MethodPost, Paths: []string{"/v1/chat/completions/render"}, Handler: ChatCompletionsRender},
		{Method: http.MethodPost, Paths: []string{"/v1/completions/render"}, Handler: CompletionsRender},
		{Method: http.MethodPost, Paths: []string{"/v1/embeddings", "/embeddings"}, Handler: Embeddings},
		{Method: http.MethodPost, Paths: []string{"/v1/audio/transcriptions", "/audio/transcriptions"}, Handler: Transcriptions},
		{Method: http.MethodGet, Paths: []string{"/v1/models", "/models"}, Handler: Models},
		{Method: http.MethodPost, Paths: []string{"/v1/chat/completions/{id}/continue", "/chat/completions/{id}/continue"}, Handler: ContinueChat},
		{Method: http.MethodPost, Paths: []string{"/v1/chat/completions/{id}/cancel", "/chat/completions/{id}/cancel"}, Handler: CancelChat},
	}
}
