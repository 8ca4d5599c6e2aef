package supervisor

import (
	"bytes"
	"sync"
)

// maxLineBytes bounds one stored log line; longer lines are cut.
const maxLineBytes = 16 << 10

// truncMark ends a line that was cut at maxLineBytes.
const truncMark = " …[truncated]"

// lineRing keeps the last lines written to it. It is safe for concurrent use;
// Writer returns io.Writers that split their input into lines, so stdout and
// stderr of a child can feed one ring.
type lineRing struct {
	mu    sync.Mutex
	lines []string // circular, len == cap once full
	next  int      // index of the oldest line once full
	full  bool
	// proc says how the worker owning the ring runs its children
	// (childlog.go); nil means the defaults of a bare worker.
	proc *procOptions
}

func newLineRing(n int) *lineRing {
	if n < 1 {
		n = 1
	}
	return &lineRing{lines: make([]string, 0, n)}
}

func (r *lineRing) add(line string) {
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
func (r *lineRing) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.lines))
	out = append(out, r.lines[r.next:]...)
	return append(out, r.lines[:r.next]...)
}

// Writer returns a writer whose complete lines are added with prefix. It is
// not safe for concurrent use by itself (one per stream).
func (r *lineRing) Writer(prefix string) *lineWriter {
	return &lineWriter{ring: r, prefix: prefix}
}

// lineWriter splits written bytes into lines for a lineRing.
type lineWriter struct {
	ring    *lineRing
	prefix  string
	partial []byte
	cut     bool     // the current line already exceeded maxLineBytes
	tee     *logSink // also receives every line, when set
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := maxLineBytes - len(w.partial); len(chunk) > room {
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
	w.ring.add(line)
	w.tee.line(line)
	w.partial, w.cut = w.partial[:0], false
}
