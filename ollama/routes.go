package ollama

import (
	"net/http"

	"github.com/corral-llm/corral/serving"
)

// Routes are the endpoints of Ollama's API.
func Routes() []serving.Route {
	return []serving.Route{
		{Method: http.MethodPost, Paths: []string{"/api/chat"}, Handler: Chat},
		{Method: http.MethodPost, Paths: []string{"/api/generate"}, Handler: Generate},
		{Method: http.MethodPost, Paths: []string{"/api/embed"}, Handler: Embed},
		{Method: http.MethodGet, Paths: []string{"/api/tags"}, Handler: Tags},
		{Method: http.MethodGet, Paths: []string{"/api/ps"}, Handler: PS},
		{Method: http.MethodPost, Paths: []string{"/api/show"}, Handler: Show},
		{Method: http.MethodGet, Paths: []string{"/api/version"}, Handler: Version},
	}
}
