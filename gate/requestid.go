package gate

import (
	"context"
	"crypto/rand"
	"net/http"
	"strings"
)

// RequestIDHeader carries the request id, taken from the request when the
// client sends a usable one and echoed in the response.
const RequestIDHeader = "X-Request-Id"

type requestIDKey struct{}

// RequestID returns the id of the request ctx belongs to, "" outside one.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// withRequestID assigns the request id.
func withRequestID(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(RequestIDHeader)
		if !validRequestID(id) {
			id = rand.Text()
		}
		w.Header().Set(RequestIDHeader, id)
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
	})
}

// MaxRequestIDLen bounds a client's request id.
const MaxRequestIDLen = 128

// validRequestID accepts ids of at most MaxRequestIDLen ASCII letters,
// digits and - _ . : / + = @ (UUIDs, ULIDs, base64, trace ids), so that a
// client's id goes into logs and headers as is, with nothing to quote or
// escape.
func validRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-_.:/+=@", c) >= 0:
		default:
			return false
		}
	}
	return true
}
