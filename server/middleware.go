package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/corral-llm/corral/openai"
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

// middleware wraps h, outermost first: request id, request log, panic
// recovery, body limit, body log.
func (s *Server) middleware(h http.Handler) http.Handler {
	if s.cfg.LogRequests {
		h = s.logBodies(h)
	}
	h = limitBody(s.cfg.MaxBody, h)
	h = s.recoverPanics(h)
	h = s.logRequests(h)
	return withRequestID(h)
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

// validRequestID accepts short ids of printable ASCII without spaces, so
// a client's id can go into logs and headers as is.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// statusWriter records the status and size of a response. Unwrap lets
// http.ResponseController reach the connection's Flush.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logRequests logs one line per request when it ends.
func (s *Server) logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() { // deferred: aborted responses are logged too
			status := sw.status
			switch {
			case status != 0:
			case r.Context().Err() != nil:
				status = 499 // nginx's "client closed request": nothing was sent
			default:
				status = http.StatusOK // nothing written: net/http sends 200
			}
			level := slog.LevelInfo
			if r.URL.Path == "/health" || r.URL.Path == "/metrics" {
				level = slog.LevelDebug // polled constantly
			}
			s.log.Log(r.Context(), level, "request",
				"id", RequestID(r.Context()), "method", r.Method, "path", r.URL.Path,
				"status", status, "bytes", sw.bytes, "duration", time.Since(start),
				"remote", r.RemoteAddr)
		}()
		h.ServeHTTP(sw, r)
	})
}

// recoverPanics turns a handler panic into a logged stack trace and a 500
// error, keeping the process alive. When the response has already begun
// it aborts the connection instead, so the client sees a broken response
// rather than a truncated one that looks complete.
func (s *Server) recoverPanics(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("handler panic", "id", RequestID(r.Context()), "method", r.Method, "path", r.URL.Path,
				"panic", v, "stack", string(debug.Stack()))
			if sw.status != 0 {
				panic(http.ErrAbortHandler)
			}
			openai.WriteError(w, &openai.Error{Status: http.StatusInternalServerError, Type: openai.TypeServer,
				Message: "internal server error"})
		}()
		h.ServeHTTP(sw, r)
	})
}

// limitBody fails reads past max bytes of the request body; the handlers
// answer 413.
func limitBody(max int64, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, max)
		h.ServeHTTP(w, r)
	})
}

// logBodies logs each request body as one line (msg "request body"),
// as JSON when it is JSON, then hands the same bytes to the handler.
func (s *Server) logBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if len(b) > 0 {
			var body any = string(b)
			if json.Valid(b) {
				body = json.RawMessage(b)
			}
			s.log.Info("request body", "id", RequestID(r.Context()), "method", r.Method, "path", r.URL.Path, "body", body)
		}
		r.Body = readCloser{io.MultiReader(bytes.NewReader(b), errReader{err}), r.Body}
		h.ServeHTTP(w, r)
	})
}

// readCloser reads from Reader and closes the original body.
type readCloser struct {
	io.Reader
	io.Closer
}

// errReader returns err, or io.EOF when err is nil.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}
