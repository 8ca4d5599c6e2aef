package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/wire"
)

// Defaults for zero StreamConfig fields.
const (
	DefaultKeepAlive    = 15 * time.Second
	DefaultWriteTimeout = 30 * time.Second
)

// StreamConfig tunes how responses are written. The zero value uses the
// defaults. The server sets it per request with WithStreamConfig.
type StreamConfig struct {
	// KeepAlive is how long an event stream may stay silent. A stream
	// sends its headers at its first text or once KeepAlive has passed
	// without any, whichever comes first; after that it writes an SSE
	// comment ": ping" whenever KeepAlive passes without an event, so
	// that proxies with an idle timeout keep a request open while it
	// waits in the queue or in a long prefill. Default 15s.
	KeepAlive time.Duration
	// WriteTimeout bounds each write to the client (an event, a ping, a
	// whole response). A client that stops reading but keeps its
	// connection open fails the write, which ends the handler and cancels
	// the request, freeing its slot. Default 30s.
	WriteTimeout time.Duration
}

func (c StreamConfig) withDefaults() StreamConfig {
	if c.KeepAlive <= 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	return c
}

type streamConfigKey struct{}

// WithStreamConfig returns ctx carrying c, for the handlers serving a
// request with that context.
func WithStreamConfig(ctx context.Context, c StreamConfig) context.Context {
	return context.WithValue(ctx, streamConfigKey{}, c)
}

// streamConfig returns the StreamConfig ctx carries, defaults filled in.
func StreamConfigOf(ctx context.Context) StreamConfig {
	c, _ := ctx.Value(streamConfigKey{}).(StreamConfig)
	return c.withDefaults()
}

// setWriteDeadline bounds the next writes to w by d from now. Writers
// that do not support deadlines (httptest's recorder) are written without.
func setWriteDeadline(rc *http.ResponseController, d time.Duration) error {
	if err := rc.SetWriteDeadline(time.Now().Add(d)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// streamWriter frames the events of a streamed response: server-sent
// events (sseWriter) or newline-delimited JSON (ndjsonWriter).
type streamWriter interface {
	// event writes v as one event. An error means the client is gone.
	event(v any) error
	// ping shows the client, and any proxy, that the request is alive.
	ping() error
	// done writes the end-of-stream marker, where the framing has one.
	done() error
}

// flushWriter writes a streamed response, flushing after each write so
// that the client sees it at once. Every write has a deadline of
// writeTimeout.
type flushWriter struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	writeTimeout time.Duration
}

// startStream sends the headers of a 200 stream of contentType. An error
// means the client is gone or does not read.
func startStream(w http.ResponseWriter, contentType string, writeTimeout time.Duration) (flushWriter, error) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // tell nginx-like proxies not to buffer
	f := flushWriter{w: w, rc: http.NewResponseController(w), writeTimeout: writeTimeout}
	if err := setWriteDeadline(f.rc, writeTimeout); err != nil {
		return f, err
	}
	w.WriteHeader(http.StatusOK)
	return f, f.flush()
}

// write writes and flushes b within the write timeout.
func (f flushWriter) write(b []byte) error {
	_, err := f.Write(b)
	return err
}

// Write writes and flushes b within the write timeout: one event of a
// stream.
func (f flushWriter) Write(b []byte) (int, error) {
	if err := setWriteDeadline(f.rc, f.writeTimeout); err != nil {
		return 0, err
	}
	n, err := f.w.Write(b)
	if err != nil {
		return n, err
	}
	return n, f.flush()
}

func (f flushWriter) flush() error {
	if err := f.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// sseWriter writes server-sent events, one JSON object per "data:" line,
// framed by wire.Writer, an Event's with its name; each event is one
// write, flushed, within the write timeout.
type sseWriter struct {
	f         flushWriter
	sse       *wire.Writer
	keepAlive func() any // the ping event; nil, or nil from it: a comment
	buf       []byte
}

// startSSETimeout sends the event-stream headers. An error means the
// client is gone or does not read.
func startSSETimeout(w http.ResponseWriter, writeTimeout time.Duration, keepAlive func() any) (*sseWriter, error) {
	f, err := startStream(w, "text/event-stream", writeTimeout)
	return &sseWriter{f: f, sse: wire.NewWriter(f), keepAlive: keepAlive}, err
}

// SSEAppender is an event that frames itself as server-sent event
// text (its "event:" and "data:" lines and the blank line that ends it).
type SSEAppender interface {
	AppendSSE(dst []byte) []byte
}

// event writes v as one event. An error means the client is gone.
func (s *sseWriter) event(v any) error {
	if a, ok := v.(SSEAppender); ok {
		s.buf = a.AppendSSE(s.buf[:0])
		return s.f.write(s.buf)
	}
	ev, ok := v.(Event)
	if !ok {
		return s.sse.Event(v)
	}
	data, err := json.Marshal(ev.Data)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	s.buf = append(append(append(s.buf[:0], "event: "...), ev.Name...), '\n')
	s.buf = wire.AppendData(s.buf, data)
	return s.f.write(s.buf)
}

// done writes OpenAI's end-of-stream marker.
func (s *sseWriter) done() error { return s.sse.Done() }

// ping writes the keep-alive event, or else an SSE comment, which
// clients ignore and proxies count as traffic.
func (s *sseWriter) ping() error {
	if s.keepAlive != nil {
		if v := s.keepAlive(); v != nil {
			return s.event(v)
		}
	}
	return s.sse.Comment("ping")
}

// ndjsonWriter writes newline-delimited JSON, one object per line (the
// framing of Ollama's streams). NDJSON has no comments, so a ping is an
// event too: keepAlive's, an object that carries no text.
type ndjsonWriter struct {
	flushWriter
	keepAlive func() any
}

// startNDJSON sends the headers of an NDJSON stream. An error means the
// client is gone or does not read.
func startNDJSON(w http.ResponseWriter, writeTimeout time.Duration, keepAlive func() any) (*ndjsonWriter, error) {
	f, err := startStream(w, "application/x-ndjson", writeTimeout)
	return &ndjsonWriter{f, keepAlive}, err
}

// event writes v (an Event's data) as one line. An error means the
// client is gone.
func (s *ndjsonWriter) event(v any) error {
	if ev, ok := v.(Event); ok {
		v = ev.Data
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return s.write(append(b, '\n'))
}

// ping writes the keep-alive object.
func (s *ndjsonWriter) ping() error { return s.event(s.keepAlive()) }

// done writes nothing: an NDJSON stream ends with its last object.
func (s *ndjsonWriter) done() error { return nil }

// utf8Carry holds back an incomplete UTF-8 sequence at the end of a chunk
// (a character split across tokens) until the rest of it arrives, so that
// every event carries valid text.
type utf8Carry struct{ tail []byte }

// next returns the complete text of tail+text, keeping any trailing
// incomplete character for later.
func (c *utf8Carry) next(text string) string {
	b := append(c.tail, text...)
	cut := len(b)
	// A UTF-8 character is at most 4 bytes: look back at most 3.
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				cut = i
			}
			break
		}
	}
	c.tail = append([]byte(nil), b[cut:]...)
	return string(b[:cut])
}

// rest returns whatever is held back, at the end of the stream.
func (c *utf8Carry) rest() string {
	s := string(c.tail)
	c.tail = nil
	return s
}

// receive reads every chunk of s, calling emit for each. It returns nil at
// the end of the stream, ctx's error when the client went away, or emit's
// error. The goroutine parks in Recv; no OS thread waits for tokens.
func receive(ctx context.Context, s *engine.Stream, emit func(engine.Chunk) error) error {
	for {
		c, err := s.Recv(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := emit(c); err != nil {
			return err
		}
	}
}

// now is the clock of the streams' keep-alive (stream.alive); tests
// replace it.
var now = time.Now

// errIdle is recvWithin's "nothing arrived in time".
var errIdle = errors.New("no text within the keep-alive interval")

// recvWithin is s.Recv that gives up after d without text, returning
// errIdle. It returns io.EOF at the end of the stream and ctx's error when
// the client went away. The wait is a timer, not a goroutine.
func recvWithin(ctx context.Context, s *engine.Stream, d time.Duration) (engine.Chunk, error) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	c, err := s.Recv(wctx)
	if err != nil && err != io.EOF && ctx.Err() == nil {
		return c, errIdle
	}
	return c, err
}
