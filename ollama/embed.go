package ollama

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/serving"
)

// ollamaEmbedRequest is the body of Ollama's POST /api/embed.
type ollamaEmbedRequest struct {
	Model string `json:"model"`
	// Input is a string or an array of strings.
	Input      json.RawMessage     `json:"input"`
	Truncate   *bool               `json:"truncate"`
	Dimensions *int                `json:"dimensions"`
	KeepAlive  *serving.KeepAlive  `json:"keep_alive"`
	Options    json.RawMessage     `json:"options"`
	inputs     []engine.EmbedInput // Input, read by Check
}

// ollamaEmbedResponse is /api/embed's answer, durations in nanoseconds.
type ollamaEmbedResponse struct {
	Model           string        `json:"model"`
	Embeddings      [][]float32   `json:"embeddings"`
	TotalDuration   time.Duration `json:"total_duration"`
	LoadDuration    time.Duration `json:"load_duration"`
	PromptEvalCount int           `json:"prompt_eval_count"`
}

// Check reads the inputs, within lim, before the model loads.
func (body *ollamaEmbedRequest) Check(lim *serving.Limits) *serving.Error {
	var one string
	var many []string
	switch {
	case json.Unmarshal(body.Input, &one) == nil:
		many = []string{one}
	case json.Unmarshal(body.Input, &many) == nil:
	default:
		return serving.Invalid("input", "'input' must be a string or an array of strings")
	}
	var e *serving.Error
	body.inputs, e = serving.EmbedTexts(many, lim)
	return e
}

// Lease names the model and the keep_alive the request asks.
func (body *ollamaEmbedRequest) Lease() (string, *serving.KeepAlive, bool) {
	return body.Model, body.KeepAlive, true
}

// ModelError words e as Ollama does when the model is unknown.
func (body *ollamaEmbedRequest) ModelError(e *serving.Error) *serving.Error {
	return ollamaModelError(e, body.Model)
}

// Embed serves Ollama's POST /api/embed: the same pooled, unit-length
// embeddings as /v1/embeddings, batched through the model's scheduler, in
// Ollama's shapes and errors. Where Ollama truncates an input longer than
// the model takes (truncate, default true), corral refuses it with a 400
// that says so: a silently shortened input gives a vector of other text.
func Embed(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, WriteError, false, serveOllamaEmbed)
}

func serveOllamaEmbed(x *serving.Exchange, body *ollamaEmbedRequest) *serving.Error {
	info := x.Model.Info()
	if info.EmbedMaxTokens == 0 {
		return serving.NotEmbedding(info)
	}
	if d := body.Dimensions; d != nil && *d != info.EmbeddingSize {
		return serving.Invalid("dimensions", "'dimensions' must be %d, the model's embedding size, or left out, got %d", info.EmbeddingSize, *d)
	}
	res, err := x.Model.Engine().Embed(x.Context(), body.inputs)
	if err != nil {
		return serving.EmbedError(err, info)
	}
	gate.Charge(x.Context(), res.Tokens)
	serving.WriteJSON(x.W, http.StatusOK, ollamaEmbedResponse{
		Model: ollamaResponseName(body.Model, x.Lease.ID()), Embeddings: res.Vectors,
		TotalDuration: time.Since(x.Start), LoadDuration: x.LoadTime, PromptEvalCount: res.Tokens,
	})
	return nil
}
