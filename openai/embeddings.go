package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/wire"
)

// embeddingRequest is the body of POST /v1/embeddings.
type embeddingRequest struct {
	wire.EmbeddingRequest
	// KeepAlive is Ollama's field, as in the other requests.
	KeepAlive *KeepAlive `json:"keep_alive"`
}

// Embeddings serves POST /v1/embeddings: one embedding per input, pooled
// as the model's engine pools (engine.Config.Pooling) and normalized to
// unit length. The inputs of a request, and of requests arriving
// together, are evaluated together by the engine's scheduler.
func (a *API) Embeddings(w http.ResponseWriter, r *http.Request) {
	var body embeddingRequest
	if e := decodeBody(r, &body); e != nil {
		WriteError(w, e)
		return
	}
	// What needs no model is checked before it loads.
	base64 := false
	switch body.EncodingFormat {
	case "", wire.EncodingFloat:
	case wire.EncodingBase64:
		base64 = true
	default:
		WriteError(w, invalid("encoding_format", "'encoding_format' must be float or base64, got %q", body.EncodingFormat))
		return
	}
	inputs, e := parseEmbedInput(body.Input, &a.limits)
	if e != nil {
		WriteError(w, e)
		return
	}
	l, e := a.acquire(r.Context(), body.Model, body.KeepAlive)
	if e != nil {
		WriteError(w, e)
		return
	}
	defer l.Release()
	m := l.Model()
	info := m.Info()
	if info.EmbedMaxTokens == 0 {
		WriteError(w, notEmbedding(info))
		return
	}
	if d := body.Dimensions; d != nil && *d != info.EmbeddingSize {
		WriteError(w, invalid("dimensions", "'dimensions' must be %d, the model's embedding size, or left out: corral does not shorten embeddings, got %d", info.EmbeddingSize, *d))
		return
	}
	res, err := m.Engine().Embed(r.Context(), inputs)
	if err != nil {
		WriteError(w, embedError(err, info))
		return
	}
	gate.Charge(r.Context(), res.Tokens)
	out := wire.EmbeddingList{
		Object: wire.ObjectList, Model: info.Name, Data: make([]wire.Embedding, len(res.Vectors)),
		Usage: wire.EmbeddingUsage{PromptTokens: res.Tokens, TotalTokens: res.Tokens},
	}
	for i, v := range res.Vectors {
		out.Data[i] = wire.Embedding{Object: wire.ObjectEmbedding, Index: i, Embedding: wire.Vector{Floats: v, Base64: base64}}
	}
	writeJSON(w, http.StatusOK, out)
}

// parseEmbedInput accepts OpenAI's forms of 'input': a string, an array
// of strings, an array of token ids, or an array of arrays of token ids,
// as many and as long as lim allows. Token ids are checked against the
// vocabulary by the engine.
func parseEmbedInput(raw json.RawMessage, lim *Limits) ([]engine.EmbedInput, *Error) {
	if isNull(raw) {
		return nil, invalid("input", "'input' is required")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		if text == "" {
			return nil, invalid("input", "'input' must not be an empty string")
		}
		return checkEmbedSize([]engine.EmbedInput{{Text: text}}, lim)
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, invalid("input", "'input' must be a string, an array of strings, an array of token ids or an array of arrays of token ids")
	}
	if len(list) == 0 {
		return nil, invalid("input", "'input' must not be an empty array")
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		toks, e := embedTokens(ids, "input")
		if e != nil {
			return nil, e
		}
		return checkEmbedSize([]engine.EmbedInput{{Tokens: toks}}, lim)
	}
	if len(list) > lim.MaxEmbedInputs {
		return nil, tooManyInputs(len(list), lim)
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil {
		return embedTexts(texts, lim)
	}
	out := make([]engine.EmbedInput, len(list))
	for i, item := range list {
		var s string
		if json.Unmarshal(item, &s) == nil {
			return nil, mixed()
		}
		var ids []int64
		if err := json.Unmarshal(item, &ids); err != nil {
			return nil, invalid("input", "'input[%d]' must be a string or an array of token ids", i)
		}
		toks, e := embedTokens(ids, fmt.Sprintf("input[%d]", i))
		if e != nil {
			return nil, e
		}
		out[i].Tokens = toks
	}
	return checkEmbedSize(out, lim)
}

// embedTexts are text inputs: at least one, at most lim.MaxEmbedInputs,
// none empty, within lim.MaxEmbedBytes together.
func embedTexts(texts []string, lim *Limits) ([]engine.EmbedInput, *Error) {
	switch {
	case len(texts) == 0:
		return nil, invalid("input", "'input' must not be an empty array")
	case len(texts) > lim.MaxEmbedInputs:
		return nil, tooManyInputs(len(texts), lim)
	}
	out := make([]engine.EmbedInput, len(texts))
	for i, s := range texts {
		if s == "" {
			return nil, invalid("input", "'input[%d]' is an empty string", i)
		}
		out[i].Text = s
	}
	return checkEmbedSize(out, lim)
}

// tooManyInputs is the error for n inputs, more than lim allows.
func tooManyInputs(n int, lim *Limits) *Error {
	return overLimit("input", "max-embed-inputs", lim.MaxEmbedInputs, "items", "'input' has %d items", n)
}

// embedTokenBytes is what a token id counts for in Limits.MaxEmbedBytes:
// about the text of a token.
const embedTokenBytes = 4

// checkEmbedSize refuses inputs larger together than lim.MaxEmbedBytes.
func checkEmbedSize(inputs []engine.EmbedInput, lim *Limits) ([]engine.EmbedInput, *Error) {
	n := 0
	for _, in := range inputs {
		n += len(in.Text) + embedTokenBytes*len(in.Tokens)
	}
	if n > lim.MaxEmbedBytes {
		return nil, overLimit("input", "max-embed-bytes", lim.MaxEmbedBytes, "bytes (a token id counts 4)", "'input' is %d bytes long together", n)
	}
	return inputs, nil
}

func mixed() *Error {
	return invalid("input", "'input' mixes strings and token arrays: send one kind")
}

// embedTokens converts one input's token ids; where names the input.
func embedTokens(ids []int64, where string) ([]int32, *Error) {
	if len(ids) == 0 {
		return nil, invalid("input", "'%s' is an empty array of token ids", where)
	}
	toks := make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || id > 1<<31-1 {
			return nil, invalid("input", "'%s' has token %d at index %d, outside the vocabulary", where, id, i)
		}
		toks[i] = int32(id)
	}
	return toks, nil
}

// notEmbedding is the error for a model that gives no embedding.
func notEmbedding(info engine.ModelInfo) *Error {
	return &Error{
		Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: "model", Code: "model_not_embedding",
		Message: fmt.Sprintf("model %q cannot embed: its pooling is %s; serve it with --pooling mean, last or cls (or the model's pooling: field), or use an embedding model", info.Name, info.Pooling),
	}
}

// embedError maps an error from Engine.Embed to an API error.
func embedError(err error, info engine.ModelInfo) *Error {
	var ie *engine.EmbedInputError
	switch {
	case errors.Is(err, engine.ErrNotEmbedding):
		return notEmbedding(info)
	case errors.Is(err, engine.ErrTooManyInputs):
		return invalid("input", "%v", err)
	case errors.As(err, &ie):
		where := fmt.Sprintf("'input[%d]'", ie.Index)
		switch {
		case errors.Is(err, engine.ErrPromptTooLong):
			e := invalid("input", "%s is too long: %v", where, ie.Err)
			e.Code = "context_length_exceeded"
			return e
		case errors.Is(err, engine.ErrTokenize):
			return invalid("input", "%s has text this model's vocabulary cannot encode: %v", where, ie.Err)
		}
		return invalid("input", "%s: %v", where, ie.Err)
	}
	return submitError(err, "input")
}
