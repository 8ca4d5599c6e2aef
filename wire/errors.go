package wire

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// Error types, as OpenAI names them in the error envelope.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeServer         = "server_error"
)

// ErrorType is OpenAI's error type for an error answered with HTTP
// status: TypeServer for a 5xx, else TypeInvalidRequest.
func ErrorType(status int) string {
	if status >= 500 {
		return TypeServer
	}
	return TypeInvalidRequest
}

// Envelope is OpenAI's error response body, {"error":{...}}; an error
// event of a stream carries the same object.
type Envelope struct {
	Error ErrorObject `json:"error"`
}

// ErrorObject is the envelope's "error" object. Param and Code are null
// when not set.
type ErrorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// EventError is an error event of a stream, {"error": ...}, as
// DecodeEvent returns it.
type EventError struct {
	// Raw is the "error" value as sent.
	Raw json.RawMessage
	// Object is Raw decoded, when it is an object.
	Object ErrorObject
}

// Error returns the error's message, else the raw value.
func (e *EventError) Error() string {
	if e.Object.Message != "" {
		return e.Object.Message
	}
	return string(e.Raw)
}

// DecodeEvent decodes the JSON data of a stream event into v. An event
// with an "error" that is present and not null is returned as an
// *EventError, v left untouched; data that is not JSON is the decoder's
// error.
func DecodeEvent(data []byte, v any) error {
	var probe struct {
		Error json.RawMessage `json:"error"`
	}
	if bytes.Contains(data, []byte(`"error"`)) {
		if err := json.Unmarshal(data, &probe); err != nil {
			return err
		}
		if len(probe.Error) > 0 && string(probe.Error) != "null" {
			e := &EventError{Raw: probe.Error}
			json.Unmarshal(probe.Error, &e.Object) // a string or other value leaves Object empty
			return e
		}
	}
	return json.Unmarshal(data, v)
}

// WriteJSON writes v as a JSON response body with status, followed by a
// newline. A v that does not marshal (a programming error) is written as a
// 500 error envelope instead.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"encode response","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
