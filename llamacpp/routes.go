package llamacpp

import (
	"net/http"

	"github.com/corral-llm/corral/serving"
)

// Routes are llama-server's endpoints.
func Routes() []serving.Route {
	return []serving.Route{
		{Method: http.MethodPost, Paths: []string{"/completion"}, Handler: Completion},
		{Method: http.MethodPost, Paths: []string{"/tokenize"}, Handler: Tokenize},
		{Method: http.MethodPost, Paths: []string{"/detokenize"}, Handler: Detokenize},
		{Method: http.MethodPost, Paths: []string{"/apply-template"}, Handler: ApplyTemplate},
		{Method: http.MethodGet, Paths: []string{"/slots"}, Handler: Slots},
		{Method: http.MethodGet, Paths: []string{"/props"}, Handler: Props},
	}
}
