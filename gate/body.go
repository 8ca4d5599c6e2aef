package gate

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// limitBody guards request bodies. Reads past Config.MaxBody fail with
// *http.MaxBytesError (the handlers answer 413); a body declared larger by
// its Content-Length fails at the first read, without reading it. Either
// way the rest of the body is read and discarded first, up to a bound and
// within the read deadline, and the response closes the connection: a
// client still sending would otherwise get a connection reset instead of
// the 413. Reading the body has a deadline of Config.BodyTimeout, set at
// the first read and cleared at its end, so a client that stalls mid-body
// gets 408 and does not hold the handler; it does not apply to the
// response, which streams as long as it needs.
func (g *Gate) limitBody(h http.Handler) http.Handler {
	drain := max(4*g.cfg.MaxBody, minDrain)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &bodyReader{
				body: r.Body, w: w, rc: http.NewResponseController(w),
				max: g.cfg.MaxBody, drain: drain, timeout: g.cfg.BodyTimeout, declared: r.ContentLength,
			}
		}
		h.ServeHTTP(w, r)
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
