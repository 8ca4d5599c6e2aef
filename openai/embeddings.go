package openai

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// embeddingRequest is the body of POST /v1/embeddings.
type embeddingRequest struct {
	wire.EmbeddingRequest
	// KeepAlive is Ollama's field, as in the other requests.
	KeepAlive *serving.KeepAlive  `json:"keep_alive"`
	inputs    []engine.EmbedInput // Input, parsed by Check
}

// embeddingRequest is read before the model loads: the encoding and the
// inputs, within the limits.
func (body *embeddingRequest) Check(lim *serving.Limits) *serving.Error {
	switch body.EncodingFormat {
	case "", wire.EncodingFloat, wire.EncodingBase64:
	default:
		return serving.Invalid("encoding_format", "'encoding_format' must be float or base64, got %q", body.EncodingFormat)
	}
	var e *serving.Error
	body.inputs, e = parseEmbedInput(body.Input, lim)
	return e
}

// Lease names the model and the keep_alive the request asks.
func (body *embeddingRequest) Lease() (string, *serving.KeepAlive, bool) {
	return body.Model, body.KeepAlive, true
}

// Embeddings serves POST /v1/embeddings: one embedding per input, pooled
// as the model's engine pools (engine.Config.Pooling) and normalized to
// unit length. The inputs of a request, and of requests arriving
// together, are evaluated together by the engine's scheduler.
func Embeddings(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, WriteError, false, serveEmbeddings)
}

func serveEmbeddings(x *serving.Exchange, body *embeddingRequest) *serving.Error {
	m := x.Model
	info := m.Info()
	if info.EmbedMaxTokens == 0 {
		return serving.NotEmbedding(info)
	}
	if d := body.Dimensions; d != nil && *d != info.EmbeddingSize {
		return serving.Invalid("dimensions", "'dimensions' must be %d, the model's embedding size, or left out: corral does not shorten embeddings, got %d", info.EmbeddingSize, *d)
	}
	res, err := m.Engine().Embed(x.Context(), body.inputs)
	if err != nil {
		return serving.EmbedError(err, info)
	}
	gate.Charge(x.Context(), res.Tokens)
	out := wire.EmbeddingList{
		Object: wire.ObjectList, Model: info.Name, Data: make([]wire.Embedding, len(res.Vectors)),
		Usage: wire.EmbeddingUsage{PromptTokens: res.Tokens, TotalTokens: res.Tokens},
	}
	base64 := body.EncodingFormat == wire.EncodingBase64
	for i, v := range res.Vectors {
		out.Data[i] = wire.Embedding{Object: wire.ObjectEmbedding, Index: i, Embedding: wire.Vector{Floats: v, Base64: base64}}
	}
	serving.WriteJSON(x.W, http.StatusOK, out)
	return nil
}

// parseEmbedInput accepts OpenAI's forms of 'input': a string, an array
// of strings, an array of token ids, or an array of arrays of token ids,
// as many and as long as lim allows. Token ids are checked against the
// vocabulary by the engine.
func parseEmbedInput(raw json.RawMessage, lim *serving.Limits) ([]engine.EmbedInput, *serving.Error) {
	if serving.IsNull(raw) {
		return nil, serving.Invalid("input", "'input' is required")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		if text == "" {
			return nil, serving.Invalid("input", "'input' must not be an empty string")
		}
		return serving.CheckEmbedSize([]engine.EmbedInput{{Text: text}}, lim)
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, serving.Invalid("input", "'input' must be a string, an array of strings, an array of token ids or an array of arrays of token ids")
	}
	if len(list) == 0 {
		return nil, serving.Invalid("input", "'input' must not be an empty array")
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		toks, e := embedTokens(ids, "input")
		if e != nil {
			return nil, e
		}
		return serving.CheckEmbedSize([]engine.EmbedInput{{Tokens: toks}}, lim)
	}
	if len(list) > lim.MaxEmbedInputs {
		return nil, serving.TooManyInputs(len(list), lim)
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil {
		return serving.EmbedTexts(texts, lim)
	}
	out := make([]engine.EmbedInput, len(list))
	for i, item := range list {
		var s string
		if json.Unmarshal(item, &s) == nil {
			return nil, mixed()
		}
		var ids []int64
		if err := json.Unmarshal(item, &ids); err != nil {
			return nil, serving.Invalid("input", "'input[%d]' must be a string or an array of token ids", i)
		}
		toks, e := embedTokens(ids, fmt.Sprintf("input[%d]", i))
		if e != nil {
			return nil, e
		}
		out[i].Tokens = toks
	}
	return serving.CheckEmbedSize(out, lim)
}

func mixed() *serving.Error {
	return serving.Invalid("input", "'input' mixes strings and token arrays: send one kind")
}

// embedTokens converts one input's token ids; where names the input.
func embedTokens(ids []int64, where string) ([]int32, *serving.Error) {
	if len(ids) == 0 {
		return nil, serving.Invalid("input", "'%s' is an empty array of token ids", where)
	}
	toks := make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || id > 1<<31-1 {
			return nil, serving.Invalid("input", "'%s' has token %d at index %d, outside the vocabulary", where, id, i)
		}
		toks[i] = int32(id)
	}
	return toks, nil
}
