package serving

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/wire"
)

// Error is an API error in no dialect's words: Status, the HTTP status,
// is its kind (a 4xx the client's fault, a 5xx the server's), Code
// names it for machines. Each dialect writes it in its own envelope and
// names its type in its own words (openai.WriteError writes OpenAI's).
type Error struct {
	Status  int
	Message string
	Param   string // the request field at fault, "" when none
	Code    string // a machine-readable code, "" when none
	// Cause is the error reported, for a dialect that words it in its
	// own way (errors.As: an *engine.PromptTooLongError, whose counts
	// Anthropic's message gives); nil when none.
	Cause error
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// Overloaded reports whether e says the server is too busy for the
// request now, so that a retry later may succeed: its queue is full, the
// request waited its longest for a slot, or its model could not get
// memory while the models holding it were in use. Dialects whose clients
// retry on their own sign of it say so in their words (Anthropic's 529
// overloaded_error, Responses' server_is_overloaded).
func (e *Error) Overloaded() bool {
	switch e.Code {
	case "queue_full", "queue_timeout", "model_busy":
		return true
	}
	return false
}

// Unwrap returns the Cause, for errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Cause }

// Invalid returns a 400 about param, the client's fault.
func Invalid(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// WriteJSON writes v as the JSON response body with status code.
func WriteJSON(w http.ResponseWriter, status int, v any) { wire.WriteJSON(w, status, v) }

// SubmitError maps an error from Engine.Submit to an API error. param names
// the request field holding the prompt.
func SubmitError(err error, param string) *Error {
	switch {
	case errors.Is(err, engine.ErrQueueFull):
		return &Error{Status: http.StatusServiceUnavailable, Code: "queue_full", Message: "the server is busy: request queue is full, retry later"}
	case errors.Is(err, engine.ErrQueueTimeout):
		return &Error{Status: http.StatusServiceUnavailable, Code: "queue_timeout", Message: "the request waited too long for a free slot, retry later"}
	case errors.Is(err, engine.ErrClosed):
		return &Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "the server is shutting down"}
	case errors.Is(err, engine.ErrPromptTooLong):
		return promptTooLong(err, param)
	case errors.Is(err, engine.ErrEmptyPrompt), errors.Is(err, engine.ErrBadToken):
		return Invalid(param, "%v", err)
	case errors.Is(err, engine.ErrTokenize):
		return Invalid(param, "the prompt has text this model's vocabulary cannot encode: %v", err)
	case errors.Is(err, engine.ErrBadSlot):
		return Invalid("id_slot", "%v", err)
	case errors.Is(err, engine.ErrGrammarUnsatisfiable):
		return Unsatisfiable(err, "grammar")
	case errors.Is(err, engine.ErrGrammar):
		return Invalid("grammar", "%v", err)
	case errors.Is(err, engine.ErrBadLogprobs):
		return Invalid("logprobs", "%v", err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client is gone; nobody reads this.
		return &Error{Status: 499, Message: err.Error()}
	}
	return &Error{Status: http.StatusInternalServerError, Message: err.Error()}
}

// promptTooLong is the 400 of a prompt longer than the context
// (engine.ErrPromptTooLong), code context_length_exceeded, about param,
// err its Cause.
func promptTooLong(err error, param string) *Error {
	e := Invalid(param, "%v", err)
	var pt *engine.PromptTooLongError
	if errors.As(err, &pt) {
		e.Message = fmt.Sprintf("the prompt has %d tokens, over the maximum context length: a prompt may have %d tokens (%d per request, one of them for the answer)", pt.Tokens, pt.Max, pt.Max+1)
	}
	e.Code, e.Cause = "context_length_exceeded", err
	return e
}

// ResultError reports a generation that did not finish normally, or nil,
// as the API's error.
func ResultError(r engine.Result) *Error { return resultError(r) }

// resultError reports a generation that did not finish normally, or nil.
func resultError(r engine.Result) *Error {
	switch r.FinishReason {
	case engine.FinishError:
		if errors.Is(r.Err, engine.ErrNoToken) {
			// The request's constraints, not the server: a grammar this
			// vocabulary cannot continue (the model wrote itself into a
			// corner no token gets out of), or biases banning every token.
			e := Invalid("", "generation stopped: %v: the grammar (from 'grammar', 'json_schema', 'response_format', 'format' or forced tools) or 'logit_bias' leaves no token of this model's vocabulary to continue the answer", r.Err)
			e.Code = "no_token"
			return e
		}
		// A queued request can fail for want of a slot: it waited too
		// long, or the server drains (engine.ErrClosed). Both are 503.
		if errors.Is(r.Err, engine.ErrQueueTimeout) || errors.Is(r.Err, engine.ErrClosed) {
			return SubmitError(r.Err, "")
		}
		// The answer reached a point of its grammar that no token of the
		// vocabulary continues: the request asked what the model cannot
		// write.
		if errors.Is(r.Err, engine.ErrGrammarUnsatisfiable) {
			return Unsatisfiable(r.Err, "grammar")
		}
		msg := "generation failed"
		if r.Err != nil {
			msg = fmt.Sprintf("generation failed: %v", r.Err)
		}
		return &Error{Status: http.StatusInternalServerError, Message: msg}
	case engine.FinishCancelled:
		// The client is connected (or we would not ask), so the engine
		// cancelled the request itself: it is shutting down.
		return &Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "the request was cancelled: the server is shutting down"}
	}
	return nil
}

// Unsatisfiable is the 400 of a grammar the model's vocabulary cannot
// write (engine.ErrGrammarUnsatisfiable), code grammar_unsatisfiable, about
// param, the request field that asked for the grammar's text.
func Unsatisfiable(err error, param string) *Error {
	what := fmt.Sprintf("what '%s' requires", param)
	if param == "tool_choice" {
		what = "the tool call 'tool_choice' requires"
	}
	msg := "the model's vocabulary cannot write " + what
	var ue *engine.UnsatisfiableError
	if errors.As(err, &ue) && ue.Reason != "" {
		msg += ": " + ue.Reason
	}
	e := Invalid(param, "%s", msg)
	e.Code = "grammar_unsatisfiable"
	return e
}
