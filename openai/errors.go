package openai

import (
	"net/http"

	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// WriteError writes e in OpenAI's error envelope,
// {"error":{"message","type","param","code"}}, its type named by its
// status (wire.ErrorType). Every 503 carries Retry-After: 1, since the
// conditions behind it (full queue, loading, shutting down) are
// transient.
func WriteError(w http.ResponseWriter, e *serving.Error) {
	if e.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	serving.WriteJSON(w, e.Status, Envelope(e))
}

// Envelope is e as OpenAI's error envelope, {"error":{...}}.
func Envelope(e *serving.Error) wire.Envelope {
	return wire.Envelope{Error: *ErrorObject(e)}
}

// ErrorObject is e as the envelope's "error" object.
func ErrorObject(e *serving.Error) *wire.ErrorObject {
	return &wire.ErrorObject{Message: e.Message, Type: wire.ErrorType(e.Status), Param: nilIfEmpty(e.Param), Code: nilIfEmpty(e.Code)}
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
