package serving

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"unicode/utf8"
)

// DecodeBody decodes the request body, one JSON object, into v. Unknown
// fields are ignored, as OpenAI clients send many we do not use.
//
// The body is read whole first: the server bounds it (Config.MaxBody, a
// read deadline), and a body that is not valid UTF-8 is refused with the
// offset of the first bad byte, since encoding/json would silently turn
// such bytes inside strings into U+FFFD.
func DecodeBody(r *http.Request, v any) *Error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return ReadError(err)
	}
	return DecodeJSON(b, v)
}

// DecodeOptionalBody is decodeBody for an endpoint whose body may be
// left out: an empty body leaves v as it is.
func DecodeOptionalBody(r *http.Request, v any) *Error {
	if r.ContentLength == 0 {
		return nil
	}
	return DecodeBody(r, v)
}

// DecodeJSON decodes b, one JSON object in valid UTF-8, into v (see
// decodeBody).
func DecodeJSON(b []byte, v any) *Error {
	if off := invalidUTF8(b); off >= 0 {
		return Invalid("", "request body is not valid UTF-8: invalid byte 0x%02x at offset %d", b[off], off)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Invalid("", "invalid JSON body: unexpected data after the top-level object")
	}
	return nil
}

// invalidUTF8 returns the offset of the first byte of b that is not part
// of a valid UTF-8 sequence, or -1 when b is valid UTF-8.
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1 // not reached: b is invalid
}

// readError explains why the body could not be read: it is too large
// (413), it did not arrive in time (408), or the connection failed (400;
// nobody is likely to read it).
// ReadError is the error of a request body that could not be read: 413
// past the body bound, 408 past its time, else 400.
func ReadError(err error) *Error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: "request_too_large",
			Message: fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &Error{Status: http.StatusRequestTimeout, Code: "request_timeout",
			Message: fmt.Sprintf("read request body: %v", err)}
	}
	return Invalid("", "read request body: %v", err)
}

// decodeError explains why a body did not decode.
func decodeError(err error) *Error {
	var (
		se *json.SyntaxError
		te *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		return Invalid("", "request body is empty: expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Invalid("", "invalid JSON body: unexpected end of input")
	case errors.As(err, &se):
		return Invalid("", "invalid JSON body at offset %d: %v", se.Offset, se)
	case errors.As(err, &te):
		if te.Field == "" {
			return Invalid("", "request body must be a JSON object, got %s", te.Value)
		}
		field := embeddedPrefix.Replace(te.Field)
		return Invalid(field, "invalid type for '%s': expected %s, got %s", field, JSONKind(te.Type.Kind()), te.Value)
	}
	return Invalid("", "invalid JSON body: %v", err)
}

// embeddedPrefix removes the names of embedded structs, which
// encoding/json puts in the field path of a type error, leaving the JSON
// field name the client sent.
var embeddedPrefix = strings.NewReplacer("oaiParams.", "", "SamplingParams.", "", "EmbeddingRequest.", "", "ReasoningParams.", "", "ToolFields.", "", "TemplateArgs.", "", "modelOnly.", "")

// JSONKind names a Go kind the way a JSON client thinks of it ("a
// number", "an object", …), for errors about a field's type.
func JSONKind(k reflect.Kind) string {
	switch k.String() {
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
	return k.String()
}
