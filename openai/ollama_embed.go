package openai

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/corral-llm/corral/gate"
)

// ollamaEmbedRequest is the body of Ollama's POST /api/embed.
type ollamaEmbedRequest struct {
	Model string `json:"model"`
	// Input is a string or an array of strings.
	Input      json.RawMessage `json:"input"`
	Truncate   *bool           `json:"truncate"`
	Dimensions *int            `json:"dimensions"`
	KeepAlive  *KeepAlive      `json:"keep_alive"`
	Options    json.RawMessage `json:"options"`
}

// ollamaEmbedResponse is /api/embed's answer, durations in nanoseconds.
type ollamaEmbedResponse struct {
	Model           string        `json:"model"`
	Embeddings      [][]float32   `json:"embeddings"`
	TotalDuration   time.Duration `json:"total_duration"`
	LoadDuration    time.Duration `json:"load_duration"`
	PromptEvalCount int           `json:"prompt_eval_count"`
}

// OllamaEmbed serves Ollama's POST /api/embed: the same pooled, unit-length
// embeddings as /v1/embeddings, batched through the model's scheduler, in
// Ollama's shapes and errors. Where Ollama truncates an input longer than
// the model takes (truncate, default true), corral refuses it with a 400
// that says so: a silently shortened input gives a vector of other text.
func (a *API) OllamaEmbed(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var body ollamaEmbedRequest
	if e := decodeBody(r, &body); e != nil {
		writeOllamaError(w, e)
		return
	}
	var one string
	var many []string
	switch {
	case json.Unmarshal(body.Input, &one) == nil:
		many = []string{one}
	case json.Unmarshal(body.Input, &many) == nil:
	default:
		writeOllamaError(w, invalid("input", "'input' must be a string or an array of strings"))
		return
	}
	inputs, e := embedTexts(many, &a.limits)
	if e != nil {
		writeOllamaError(w, e)
		return
	}
	p := ollamaParams{Model: body.Model, KeepAlive: body.KeepAlive}
	l, load, e := a.ollamaAcquire(r, &p)
	if e != nil {
		writeOllamaError(w, e)
		return
	}
	defer l.Release()
	info := l.Model().Info()
	if info.EmbedMaxTokens == 0 {
		writeOllamaError(w, notEmbedding(info))
		return
	}
	if d := body.Dimensions; d != nil && *d != info.EmbeddingSize {
		writeOllamaError(w, invalid("dimensions", "'dimensions' must be %d, the model's embedding size, or left out, got %d", info.EmbeddingSize, *d))
		return
	}
	res, err := l.Model().Engine().Embed(r.Context(), inputs)
	if err != nil {
		writeOllamaError(w, embedError(err, info))
		return
	}
	gate.Charge(r.Context(), res.Tokens)
	writeJSON(w, http.StatusOK, ollamaEmbedResponse{
		Model: ollamaResponseName(body.Model, l.ID()), Embeddings: res.Vectors,
		TotalDuration: time.Since(start), LoadDuration: load, PromptEvalCount: res.Tokens,
	})
}
