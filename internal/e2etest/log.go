package e2etest

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/corral-llm/corral/wire"
)

// LogBuffer collects JSON log lines; safe for concurrent handlers.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Records returns the log lines with message msg, failing t on a line
// that is not a JSON object.
func (b *LogBuffer) Records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// NewLogger returns a logger of JSON lines at debug level, and the
// buffer it writes to.
func NewLogger() (*slog.Logger, *LogBuffer) {
	b := &LogBuffer{}
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// ErrorEnvelope is OpenAI's error envelope as a client decodes it: Error
// is nil when the body has none.
type ErrorEnvelope struct {
	Error *wire.ErrorObject `json:"error"`
}

// ErrorOf decodes an OpenAI error envelope and returns its type and
// code, failing t when contentType is not application/json or body is
// not an envelope with a message.
func ErrorOf(t *testing.T, contentType string, body []byte) (typ, code string) {
	t.Helper()
	if contentType != "application/json" {
		t.Fatalf("Content-Type %q, want application/json (body %q)", contentType, body)
	}
	var env ErrorEnvelope
	if err := json.Unmarshal(body, &env); err != nil || env.Error == nil || env.Error.Message == "" {
		t.Fatalf("body %q is not an error envelope: %v", body, err)
	}
	if env.Error.Code != nil {
		code = *env.Error.Code
	}
	return env.Error.Type, code
}
