package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// decodeBody decodes the request body, one JSON object, into v. Unknown
// fields are ignored, as OpenAI clients send many we do not use.
func decodeBody(r *http.Request, v any) *Error {
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return decodeError(err)
		}
		return invalid("", "invalid JSON body: unexpected data after the top-level object")
	}
	return nil
}

// decodeError explains why a body did not decode.
func decodeError(err error) *Error {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		te  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return &Error{Status: http.StatusRequestEntityTooLarge, Type: TypeInvalidRequest, Code: "request_too_large",
			Message: fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)}
	case errors.Is(err, io.EOF):
		return invalid("", "request body is empty: expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "invalid JSON body: unexpected end of input")
	case errors.As(err, &se):
		return invalid("", "invalid JSON body at offset %d: %v", se.Offset, se)
	case errors.As(err, &te):
		if te.Field == "" {
			return invalid("", "request body must be a JSON object, got %s", te.Value)
		}
		field := embeddedPrefix.Replace(te.Field)
		return invalid(field, "invalid type for '%s': expected %s, got %s", field, jsonKind(te.Type.Kind().String()), te.Value)
	}
	return invalid("", "invalid JSON body: %v", err)
}

// embeddedPrefix removes the names of embedded structs, which
// encoding/json puts in the field path of a type error, leaving the JSON
// field name the client sent.
var embeddedPrefix = strings.NewReplacer("oaiParams.", "", "samplingParams.", "")

// jsonKind names a Go kind the way a JSON client thinks of it.
func jsonKind(k string) string {
	switch k {
	case "float32", "float64":
		return "a number"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	}
	return k
}
