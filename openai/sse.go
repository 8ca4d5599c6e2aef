package openai

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
func streamConfig(ctx context.Context) StreamConfig {
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

// sseWriter writes server-sent events, one JSON object per "data:" line,
// flushing after each so the client sees tokens as they come. Every write
// has a deadline of writeTimeout.
type sseWriter struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	writeTimeout time.Duration
}

// startSSE sends the event-stream headers, with the default write timeout.
func startSSE(w http.ResponseWriter) *sseWriter {
	s, _ := startSSETimeout(w, DefaultWriteTimeout)
	return s
}

// startSSETimeout sends the event-stream headers. An error means the
// client is gone or does not read.
func startSSETimeout(w http.ResponseWriter, writeTimeout time.Duration) (*sseWriter, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // tell nginx-like proxies not to buffer
	s := &sseWriter{w: w, rc: http.NewResponseController(w), writeTimeout: writeTimeout}
	if err := setWriteDeadline(s.rc, writeTimeout); err != nil {
		return s, err
	}
	w.WriteHeader(http.StatusOK)
	return s, s.flush()
}

// event writes v as one event. An error means the client is gone.
func (s *sseWriter) event(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return s.raw(b)
}

// done writes OpenAI's end-of-stream marker.
func (s *sseWriter) done() error { return s.raw([]byte("[DONE]")) }

// ping writes an SSE comment, which clients ignore and proxies count as
// traffic.
func (s *sseWriter) ping() error { return s.write([]byte(": ping\n\n")) }

func (s *sseWriter) raw(data []byte) error {
	buf := make([]byte, 0, len(data)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	return s.write(buf)
}

// write writes and flushes b within the write timeout.
func (s *sseWriter) write(b []byte) error {
	if err := setWriteDeadline(s.rc, s.writeTimeout); err != nil {
		return err
	}
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.flush()
}

func (s *sseWriter) flush() error {
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

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
