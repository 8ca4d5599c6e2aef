package openai

import (
	"net/http"

	"github.com/corral-llm/corral/serving"
)

// Routes are the endpoints of OpenAI's API (with llama-server's aliases
// without /v1) and the paced chat endpoints, then llama-server's own.
func Routes() []serving.Route {
	return []serving.Route{
		{Method: http.MethodPost, Paths: []string{"/v1/chat/completions", "/chat/completions"}, Handler: ChatCompletions},
		{Method: http.MethodPost, Paths: []string{"/v1/completions", "/completions"}, Handler: Completions},
		{Method: http.MethodPost, Paths: []string{"/completion"}, Handler: Completion},
		{Method: http.MethodPost, Paths: []string{"/v1/embeddings", "/embeddings"}, Handler: Embeddings},
		{Method: http.MethodPost, Paths: []string{"/tokenize"}, Handler: Tokenize},
		{Method: http.MethodPost, Paths: []string{"/detokenize"}, Handler: Detokenize},
		{Method: http.MethodPost, Paths: []string{"/apply-template"}, Handler: ApplyTemplate},
		{Method: http.MethodGet, Paths: []string{"/v1/models", "/models"}, Handler: Models},
		{Method: http.MethodGet, Paths: []string{"/slots"}, Handler: Slots},
		{Method: http.MethodGet, Paths: []string{"/props"}, Handler: Props},
		{Method: http.MethodPost, Paths: []string{"/v1/chat/completions/{id}/continue", "/chat/completions/{id}/continue"}, Handler: ContinueChat},
		{Method: http.MethodPost, Paths: []string{"/v1/chat/completions/{id}/cancel", "/chat/completions/{id}/cancel"}, Handler: CancelChat},
	}
}
