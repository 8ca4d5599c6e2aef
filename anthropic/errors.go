package anthropic

import (
	"fmt"
	"net/http"
	"strings"
)

// Error types, as Anthropic names them in the error envelope.
const (
	TypeInvalidRequest  = "invalid_request_error"
	TypeAuthentication  = "authentication_error"
	TypePermission      = "permission_error"
	TypeNotFound        = "not_found_error"
	TypeRequestTooLarge = "request_too_large"
	TypeRateLimit       = "rate_limit_error"
	TypeAPI             = "api_error"
	TypeTimeout         = "timeout_error"
	TypeOverloaded      = "overloaded_error"
)

// Error is a request the translation refuses: an HTTP status (400), the
// request field at fault in Anthropic's dotted form ("messages.0.content.1"),
// and a message that names the cause.
type Error struct {
	Status  int
	Param   string
	Message string
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// invalid returns a 400 about param.
func invalid(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// ErrorEnvelope is Anthropic's error response body,
// {"type":"error","error":{"type","message"},"request_id"}; the data of a
// stream's error event is the same object.
type ErrorEnvelope struct {
	Type      string      `json:"type"` // "error"
	Error     ErrorObject `json:"error"`
	RequestID string      `json:"request_id,omitempty"`
}

// ErrorObject is the envelope's "error" object.
type ErrorObject struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// ErrorType is the Anthropic error type of an HTTP status: 400 (and
// other 4xx not named here) invalid_request_error, 401
// authentication_error, 403 permission_error, 404 not_found_error, 413
// request_too_large, 429 rate_limit_error, 503 and 529 overloaded_error,
// 504 timeout_error, other 5xx api_error.
func ErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return TypeAuthentication
	case http.StatusForbidden:
		return TypePermission
	case http.StatusNotFound:
		return TypeNotFound
	case http.StatusRequestEntityTooLarge:
		return TypeRequestTooLarge
	case http.StatusTooManyRequests:
		return TypeRateLimit
	case http.StatusServiceUnavailable, 529:
		return TypeOverloaded
	case http.StatusGatewayTimeout:
		return TypeTimeout
	}
	if status >= 400 && status < 500 {
		return TypeInvalidRequest
	}
	return TypeAPI
}

// NewError returns the envelope of a dialect-neutral error: its HTTP
// status picks the type (ErrorType), a status of 0 counting as 500.
// Anthropic's envelope has no place for a machine-readable code, so code
// is dropped; a param the message does not mention already prefixes it,
// as Anthropic's own messages do ("max_tokens: ..."). requestID, when
// not empty, becomes the envelope's request_id.
func NewError(status int, code, message, param, requestID string) ErrorEnvelope {
	if status == 0 {
		status = http.StatusInternalServerError
	}
	if param != "" && !strings.Contains(message, param) {
		message = param + ": " + message
	}
	return ErrorEnvelope{Type: "error", Error: ErrorObject{Type: ErrorType(status), Message: message}, RequestID: requestID}
}

// Envelope is e as Anthropic's error envelope.
func (e *Error) Envelope(requestID string) ErrorEnvelope {
	return NewError(e.Status, "", e.Message, e.Param, requestID)
}
