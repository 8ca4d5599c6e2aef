package serving

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/corral-llm/corral/engine"
)

// Embeddings: the checks every dialect makes of an embeddings request,
// and its errors.

// EmbedTexts are text inputs: at least one, at most lim.MaxEmbedInputs,
// none empty, within lim.MaxEmbedBytes together.
func EmbedTexts(texts []string, lim *Limits) ([]engine.EmbedInput, *Error) {
	switch {
	case len(texts) == 0:
		return nil, Invalid("input", "'input' must not be an empty array")
	case len(texts) > lim.MaxEmbedInputs:
		return nil, TooManyInputs(len(texts), lim)
	}
	out := make([]engine.EmbedInput, len(texts))
	for i, s := range texts {
		if s == "" {
			return nil, Invalid("input", "'input[%d]' is an empty string", i)
		}
		out[i].Text = s
	}
	return CheckEmbedSize(out, lim)
}

// TooManyInputs is the error for n inputs, more than lim allows.
func TooManyInputs(n int, lim *Limits) *Error {
	return OverLimit("input", "max-embed-inputs", lim.MaxEmbedInputs, "items", "'input' has %d items", n)
}

// EmbedTokenBytes is what a token id counts for in Limits.MaxEmbedBytes:
// about the text of a token.
const EmbedTokenBytes = 4

// NotEmbedding is the error for a model that gives no embedding.
func NotEmbedding(info engine.ModelInfo) *Error {
	return &Error{
		Status: http.StatusBadRequest, Param: "model", Code: "model_not_embedding",
		Message: fmt.Sprintf("model %q cannot embed: its pooling is %s; serve it with --pooling mean, last or cls (or the model's pooling: field), or use an embedding model", info.Name, info.Pooling),
	}
}

// EmbedError maps an error from Engine.Embed to an API error.
func EmbedError(err error, info engine.ModelInfo) *Error {
	var ie *engine.EmbedInputError
	switch {
	case errors.Is(err, engine.ErrNotEmbedding):
		return NotEmbedding(info)
	case errors.Is(err, engine.ErrTooManyInputs):
		return Invalid("input", "%v", err)
	case errors.As(err, &ie):
		where := fmt.Sprintf("'input[%d]'", ie.Index)
		switch {
		case errors.Is(err, engine.ErrPromptTooLong):
			e := Invalid("input", "%s is too long: %v", where, ie.Err)
			e.Code, e.Cause = "context_length_exceeded", err
			return e
		case errors.Is(err, engine.ErrTokenize):
			return Invalid("input", "%s has text this model's vocabulary cannot encode: %v", where, ie.Err)
		}
		return Invalid("input", "%s: %v", where, ie.Err)
	}
	return SubmitError(err, "input")
}

// CheckEmbedSize refuses inputs larger together than lim.MaxEmbedBytes.
func CheckEmbedSize(inputs []engine.EmbedInput, lim *Limits) ([]engine.EmbedInput, *Error) {
	n := 0
	for _, in := range inputs {
		n += len(in.Text) + EmbedTokenBytes*len(in.Tokens)
	}
	if n > lim.MaxEmbedBytes {
		return nil, OverLimit("input", "max-embed-bytes", lim.MaxEmbedBytes, "bytes (a token id counts 4)", "'input' is %d bytes long together", n)
	}
	return inputs, nil
}
