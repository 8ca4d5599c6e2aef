package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
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
// recovery, body limit and deadline, body log.
func (s *Server) middleware(h http.Handler) http.Handler {
	if s.cfg.LogRequests {
		h = s.logBodies(h)
	}
	h = s.limitBody(h)
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
// id, method, path, status, bytes, duration and remote address, and for a
// generation what openai.RequestLog records (model, tokens, queue time,
// TTFT, tokens/s, finish reason, client disconnect).
func (s *Server) logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		var gen openai.RequestLog
		r = r.WithContext(openai.WithRequestLog(r.Context(), &gen))
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
			attrs := append([]slog.Attr{
				slog.String("id", RequestID(r.Context())), slog.String("method", r.Method), slog.String("path", r.URL.Path),
				slog.Int("status", status), slog.Int64("bytes", sw.bytes), slog.Duration("duration", time.Since(start)),
				slog.String("remote", r.RemoteAddr),
			}, gen.Attrs()...)
			s.log.LogAttrs(r.Context(), level, "request", attrs...)
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

// limitBody guards request bodies. Reads past Config.MaxBody fail with
// *http.MaxBytesError (the handlers answer 413); a body declared larger by
// its Content-Length fails at the first read, without reading it. Either
// way the rest of the body is read and discarded first, up to a bound and
// within the read deadline, and the response closes the connection: a
// client still sending would otherwise get a connection reset instead of
// the 413. Reading the body has a deadline of Config.BodyTimeout, set at
// the first read and cleared at its end, so a client that stalls mid-body
// gets 408 and does not hold the handler; it does not apply to the
// response, which streams as long as it needs. The stream settings
// (keep-alive, write timeout) go into the request's context for the
// handlers.
func (s *Server) limitBody(h http.Handler) http.Handler {
	drain := max(4*s.cfg.MaxBody, minDrain)
	stream := openai.StreamConfig{KeepAlive: s.cfg.KeepAlive, WriteTimeout: s.cfg.WriteTimeout}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &bodyReader{
				body: r.Body, w: w, rc: http.NewResponseController(w),
				max: s.cfg.MaxBody, drain: drain, timeout: s.cfg.BodyTimeout, declared: r.ContentLength,
			}
		}
		h.ServeHTTP(w, r.WithContext(openai.WithStreamConfig(r.Context(), stream)))
	})
}

// minDrain is the least limitBody reads and discards of a body over the
// limit so that its client gets the 413.
const minDrain = 64 << 20

// bodyReader is a request body with a size limit and a read deadline.
type bodyReader struct {
	body     io.ReadCloser // the connection's
	w        http.ResponseWriter
	rc       *http.ResponseController
	max      int64         // bytes allowed
	drain    int64         // bytes discarded past the limit, at most
	timeout  time.Duration // for the whole body
	declared int64         // Content-Length, -1 when unknown
	n        int64         // bytes read
	armed    bool          // the read deadline is set
	err      error         // sticky error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if !b.armed {
		// Only now: once the body is read to its end, net/http reads
		// the connection in the background to notice a client going
		// away, and a deadline left behind would cut that read and
		// cancel the request.
		b.armed = true
		b.setDeadline(time.Now().Add(b.timeout))
	}
	if b.declared > b.max {
		return 0, b.fail(b.tooLarge())
	}
	if room := b.max + 1 - b.n; int64(len(p)) > room {
		p = p[:room] // one byte past the limit tells a body over it
	}
	n, err := b.body.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		return n - int(b.n-b.max), b.fail(b.tooLarge())
	}
	switch {
	case err == io.EOF:
		b.setDeadline(time.Time{})
		b.err = io.EOF
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.w.Header().Set("Connection", "close")
		err = b.fail(fmt.Errorf("request body not received within %v: %w", b.timeout, err))
	case err != nil:
		err = b.fail(err)
	}
	return n, err
}

// fail ends the body with err.
func (b *bodyReader) fail(err error) error {
	b.setDeadline(time.Time{})
	b.err = err
	return err
}

// tooLarge discards the rest of the body, up to b.drain bytes, so that the
// client finishes sending and reads the answer, and marks the connection to
// close after it.
func (b *bodyReader) tooLarge() error {
	b.w.Header().Set("Connection", "close")
	io.CopyN(io.Discard, b.body, b.drain)
	return &http.MaxBytesError{Limit: b.max}
}

func (b *bodyReader) setDeadline(t time.Time) {
	if b.timeout > 0 {
		b.rc.SetReadDeadline(t) // ErrNotSupported outside a real server: no deadline
	}
}

func (b *bodyReader) Close() error { return b.body.Close() }

// logBodies logs each request body as one line (msg "request body", with
// the request id, method and path), as JSON when it is JSON, else as a
// string, then hands the same bytes to the handler. The body is logged as
// the client sent it, prompts and all: nothing is redacted. No header is
// logged (so never Authorization), nor any response.
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
