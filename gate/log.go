package gate

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"
)

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

// logRequests logs one line per request when it ends (msg "request"):
// id, method, path, status, bytes, duration, remote address, the caller's
// key id (never the key), and what Config.Prepare's attributes add (for a
// generation: model, tokens, queue time, TTFT, finish reason, ...).
func (g *Gate) logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		st := &requestState{}
		r = r.WithContext(contextWithState(r.Context(), st))
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
			if g.cfg.Quiet != nil && g.cfg.Quiet(r) {
				level = slog.LevelDebug
			}
			attrs := []slog.Attr{
				slog.String("id", RequestID(r.Context())), slog.String("method", r.Method), slog.String("path", r.URL.Path),
				slog.Int("status", status), slog.Int64("bytes", sw.bytes), slog.Duration("duration", time.Since(start)),
				slog.String("remote", r.RemoteAddr),
			}
			if st.caller != "" {
				attrs = append(attrs, slog.String("key", st.caller))
			}
			if st.attrs != nil {
				attrs = append(attrs, st.attrs()...)
			}
			g.log.LogAttrs(r.Context(), level, "request", attrs...)
		}()
		h.ServeHTTP(sw, r)
	})
}

// recoverPanics turns a handler panic into a logged stack trace and a 500
// error, keeping the process alive. When the response has already begun
// it aborts the connection instead, so the client sees a broken response
// rather than a truncated one that looks complete.
func (g *Gate) recoverPanics(h http.Handler) http.Handler {
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
			g.log.Error("handler panic", "id", RequestID(r.Context()), "method", r.Method, "path", r.URL.Path,
				"panic", v, "stack", string(debug.Stack()))
			if sw.status != 0 {
				panic(http.ErrAbortHandler)
			}
			g.refuse(w, r, &Error{Status: http.StatusInternalServerError, Code: "internal_error", Message: "internal server error"})
		}()
		h.ServeHTTP(sw, r)
	})
}

// logBodies logs each request body as one line (msg "request body", with
// the request id, method and path), as JSON when it is JSON, else as a
// string, then hands the same bytes to the handler. The body is logged as
// the client sent it, prompts and all: nothing is redacted. No header is
// logged (so never Authorization or x-api-key), nor any response.
func (g *Gate) logBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if len(b) > 0 {
			var body any = string(b)
			if json.Valid(b) {
				body = json.RawMessage(b)
			}
			g.log.Info("request body", "id", RequestID(r.Context()), "method", r.Method, "path", r.URL.Path, "body", body)
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
