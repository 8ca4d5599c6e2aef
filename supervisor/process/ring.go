package process

import (
	"bytes"
	"sync"
)

// MaxLineBytes bounds one stored log line; longer lines are cut.
const MaxLineBytes = 16 << 10

// truncMark ends a line that was cut at MaxLineBytes.
const truncMark = " …[truncated]"

// Ring keeps the last lines written to it. It is safe for concurrent use;
// writer returns io.Writers that split their input into lines, so stdout and
// stderr of a child can feed one ring.
type Ring struct {
	mu    sync.Mutex
	lines []string // circular, len == cap once full
	next  int      // index of the oldest line once full
	full  bool
}

// NewRing returns a Ring that keeps the last n lines (at least one).
func NewRing(n int) *Ring {
	if n < 1 {
		n = 1
	}
	return &Ring{lines: make([]string, 0, n)}
}

func (r *Ring) add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		r.lines = append(r.lines, line)
		r.full = len(r.lines) == cap(r.lines)
		return
	}
	r.lines[r.next] = line
	r.next = (r.next + 1) % len(r.lines)
}

// Lines returns the stored lines, oldest first.
func (r *Ring) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.lines))
	out = append(out, r.lines[r.next:]...)
	return append(out, r.lines[:r.next]...)
}

// writer returns a writer whose complete lines are added with prefix. It is
// not safe for concurrent use by itself (one per stream).
func (r *Ring) writer(prefix string) *lineWriter {
	return &lineWriter{ring: r, prefix: prefix}
}

// lineWriter splits written bytes into lines for a Ring.
type lineWriter struct {
	ring    *Ring
	prefix  string
	partial []byte
	cut     bool      // the current line already exceeded MaxLineBytes
	tee     *logSink  // also receives every line, when set
	redact  *Redactor // hides secrets in every line, when set
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := MaxLineBytes - len(w.partial); len(chunk) > room {
			chunk, w.cut = chunk[:room], true
		}
		w.partial = append(w.partial, chunk...)
		if i < 0 {
			break
		}
		w.emit()
		p = p[i+1:]
	}
	return n, nil
}

// Flush stores a pending partial line, if any.
func (w *lineWriter) Flush() {
	if len(w.partial) > 0 || w.cut {
		w.emit()
	}
}

func (w *lineWriter) emit() {
	line := w.prefix + string(bytes.TrimSuffix(w.partial, []byte("\r")))
	if w.cut {
		line += truncMark
	}
	if w.redact != nil {
		line = w.redact.String(line)
	}
	w.ring.add(line)
	w.tee.line(line)
	w.partial, w.cut = w.partial[:0], false
}
