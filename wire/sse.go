package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxLine is the longest line a Reader accepts unless told
// otherwise.
const DefaultMaxLine = 4 << 20

// doneData is the data of OpenAI's end-of-stream event.
const doneData = "[DONE]"

// ErrLineTooLong is returned (wrapped) by Reader.Next for a line, or the
// data of an event, longer than the Reader's limit.
var ErrLineTooLong = errors.New("server-sent event line too long")

// Event is one server-sent event, or a comment.
type Event struct {
	// Data is the event's data: its "data:" lines joined by "\n", each
	// without the field name and the one space after it.
	Data []byte
	// Name is the event's "event:" field, "" when absent.
	Name string
	// Done marks OpenAI's end-of-stream event, "data: [DONE]".
	Done bool
	// Comment is the text of a comment line (after ":" and one space),
	// when the Reader surfaces comments; such an Event has no data.
	Comment string
	// IsComment tells a comment apart from an event.
	IsComment bool
}

// Reader reads server-sent events: lines end in "\n", "\r\n" or "\r";
// an event is its "data:" lines joined, dispatched at a blank line (or at
// the end of the input, where the last blank line may be missing).
// Comments (lines starting with ":") are skipped unless Comments is set.
// Fields other than "data" and "event" ("id", "retry", unknown ones) are
// ignored.
type Reader struct {
	br *bufio.Reader
	// MaxLine bounds a line and the data of an event, in bytes (default
	// DefaultMaxLine).
	MaxLine int
	// Comments makes Next return comments as events (IsComment set).
	Comments bool
	crSeen   bool // the last line ended in "\r": skip a "\n" that follows
	line     []byte
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), MaxLine: DefaultMaxLine}
}

// Next returns the next event. It returns io.EOF at the end of the input,
// after the last event; any other error is the underlying reader's, or
// wraps ErrLineTooLong. The returned Data is the caller's to keep.
func (r *Reader) Next() (Event, error) {
	var (
		ev      Event
		data    []byte
		hasData bool
	)
	for {
		line, err := r.readLine()
		if err == io.EOF && line == nil {
			if hasData {
				return r.dispatch(ev, data), nil
			}
			return Event{}, io.EOF
		}
		if err != nil && err != io.EOF {
			return Event{}, err
		}
		if len(line) == 0 {
			if hasData {
				return r.dispatch(ev, data), nil
			}
			ev = Event{} // an event with no data is not dispatched
			continue
		}
		if line[0] == ':' {
			if r.Comments {
				return Event{IsComment: true, Comment: string(trimSpace1(line[1:]))}, nil
			}
			continue
		}
		field, value, ok := bytes.Cut(line, []byte(":"))
		if ok {
			value = trimSpace1(value)
		}
		switch string(field) {
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			if len(data)+len(value) > r.max() {
				return Event{}, fmt.Errorf("%w: event data over %d bytes", ErrLineTooLong, r.max())
			}
			data, hasData = append(data, value...), true
		case "event":
			ev.Name = string(value)
		}
	}
}

// dispatch completes ev with data.
func (r *Reader) dispatch(ev Event, data []byte) Event {
	ev.Data = data
	ev.Done = string(bytes.TrimSpace(data)) == doneData
	return ev
}

func (r *Reader) max() int {
	if r.MaxLine > 0 {
		return r.MaxLine
	}
	return DefaultMaxLine
}

// readLine returns the next line without its end. At the end of the
// input it returns the last, unterminated line with a nil error, then
// nil and io.EOF. The line is valid until the next call. It never waits
// for more input than the line needs: the "\n" of a "\r\n" is skipped
// when the next line is read.
func (r *Reader) readLine() ([]byte, error) {
	r.line = r.line[:0]
	for {
		if _, err := r.br.Peek(1); err != nil {
			if err == io.EOF && len(r.line) > 0 {
				return r.line, nil
			}
			return nil, err
		}
		buf, _ := r.br.Peek(r.br.Buffered())
		if r.crSeen {
			r.crSeen = false
			if buf[0] == '\n' {
				r.br.Discard(1)
				continue
			}
		}
		end := bytes.IndexAny(buf, "\r\n")
		n := end
		if end < 0 {
			n = len(buf)
		}
		if len(r.line)+n > r.max() {
			return nil, fmt.Errorf("%w: a line over %d bytes", ErrLineTooLong, r.max())
		}
		r.line = append(r.line, buf[:n]...)
		if end < 0 {
			r.br.Discard(n)
			continue
		}
		r.crSeen = buf[end] == '\r'
		r.br.Discard(end + 1)
		return r.line, nil
	}
}

// trimSpace1 removes one leading space, as SSE does after a field's colon.
func trimSpace1(b []byte) []byte {
	if len(b) > 0 && b[0] == ' ' {
		return b[1:]
	}
	return b
}

// Writer frames server-sent events onto an io.Writer, each event or
// comment in one Write call (so that a writer that flushes, or bounds each
// write with a deadline, does so per event).
type Writer struct {
	w   io.Writer
	buf []byte
}

// NewWriter returns a Writer onto w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// AppendData appends data framed as one event, "data: <data>\n\n"; each
// line of a multi-line data gets its own "data: " prefix.
func AppendData(dst, data []byte) []byte {
	for {
		line, rest, more := bytes.Cut(data, []byte("\n"))
		dst = append(dst, "data: "...)
		dst = append(dst, line...)
		dst = append(dst, '\n')
		if !more {
			break
		}
		data = rest
	}
	return append(dst, '\n')
}

// AppendComment appends a comment line, ": <text>\n\n", which clients
// ignore and proxies count as traffic. text must not contain newlines.
func AppendComment(dst []byte, text string) []byte {
	dst = append(dst, ": "...)
	dst = append(dst, text...)
	return append(dst, "\n\n"...)
}

// AppendDone appends OpenAI's end-of-stream event, "data: [DONE]\n\n".
func AppendDone(dst []byte) []byte { return AppendData(dst, []byte(doneData)) }

// Event writes v, encoded as JSON, as one event.
func (w *Writer) Event(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return w.Data(b)
}

// Data writes data as one event.
func (w *Writer) Data(data []byte) error { return w.flush(AppendData(w.buf[:0], data)) }

// Comment writes a comment, such as the keep-alive "ping".
func (w *Writer) Comment(text string) error { return w.flush(AppendComment(w.buf[:0], text)) }

// Done writes OpenAI's end-of-stream event.
func (w *Writer) Done() error { return w.flush(AppendDone(w.buf[:0])) }

func (w *Writer) flush(b []byte) error {
	w.buf = b[:0]
	_, err := w.w.Write(b)
	return err
}
