package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/corral-llm/corral/engine"
)

// sseWriter writes server-sent events, one JSON object per "data:" line,
// flushing after each so the client sees tokens as they come.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startSSE sends the event-stream headers.
func startSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // tell nginx-like proxies not to buffer
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	s.flush()
	return s
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

func (s *sseWriter) raw(data []byte) error {
	buf := make([]byte, 0, len(data)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.flush()
}

func (s *sseWriter) flush() error {
	if err := s.rc.Flush(); err != nil && err != http.ErrNotSupported {
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
