package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

const (
	// maxTries is how many attempts in a row a download may make without
	// receiving a byte before Pull gives up (leaving the part to resume).
	maxTries = 5
	// stallTimeout ends an attempt that receives nothing for this long.
	stallTimeout = 60 * time.Second
	// copyBuffer is the size of the reads from the connection.
	copyBuffer = 256 << 10
)

// errStalled is why an attempt that received nothing for stallTimeout
// ended.
var errStalled = fmt.Errorf("no data received for %v", stallTimeout)

// download fetches src into part, resuming what part holds, and returns
// its SHA-256. A failed connection is retried (with resume); a part whose
// hash is wrong is removed.
func (p *puller) download(ctx context.Context, src *source, part string) (string, error) {
	for idle := 0; ; { // attempts in a row that received nothing
		progressed, got, err := p.attempt(ctx, src, part)
		if err == nil {
			return got, nil
		}
		if errors.Is(err, ErrChecksum) {
			if rerr := os.Remove(part); rerr != nil {
				return "", errors.Join(err, fmt.Errorf("remove bad download: %w", rerr))
			}
			return "", err
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("interrupted (pull again to resume): %w", context.Cause(ctx))
		}
		var r retryable
		if !errors.As(err, &r) {
			return "", err
		}
		if progressed {
			idle = 0
		} else {
			idle++
		}
		if idle >= maxTries {
			return "", fmt.Errorf("%w (gave up after %d tries; pull again to resume)", err, idle)
		}
		wait := p.backoff(max(idle, 1))
		p.prog.event("%s: %v; retrying in %v", p.prog.name, err, wait)
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return "", fmt.Errorf("interrupted (pull again to resume): %w", context.Cause(ctx))
			}
		}
	}
}

// retryable marks an error after which a download can go on: a connection
// failure, a server's temporary failure, or a part that had to be
// discarded.
type retryable struct{ err error }

func (e retryable) Error() string { return e.err.Error() }
func (e retryable) Unwrap() error { return e.err }

// attempt makes one request for the rest of src, appends what it receives
// to part and, once part is complete, checks and syncs it. progressed
// reports whether it received any bytes; got is the part's SHA-256.
func (p *puller) attempt(ctx context.Context, src *source, part string) (progressed bool, got string, err error) {
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return false, "", fmt.Errorf("partial download: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("partial download: %w", cerr)
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return false, "", fmt.Errorf("partial download: %w", err)
	}
	have := st.Size()
	h := sha256.New()
	if src.size >= 0 && have > src.size {
		have, err = 0, restart(f, h)
	} else if have > 0 {
		// The bytes already there count towards the hash: read them back.
		_, err = io.CopyN(h, f, have)
	}
	if err != nil {
		return false, "", fmt.Errorf("partial download: %w", err)
	}

	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchdog := time.AfterFunc(stallTimeout, func() { cancel(errStalled) })
	defer watchdog.Stop()
	req, err := p.newRequest(actx, http.MethodGet, src.url)
	if err != nil {
		return false, "", err
	}
	if have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return false, "", connError(actx, cleanURLError(err))
	}
	defer resp.Body.Close()
	p.learn(src, resp)

	var total int64
	switch resp.StatusCode {
	case http.StatusOK:
		if have > 0 {
			p.prog.event("%s: the server does not resume downloads; starting over", p.prog.name)
			if err := restart(f, h); err != nil {
				return false, "", fmt.Errorf("partial download: %w", err)
			}
			have = 0
		}
		total = resp.ContentLength
	case http.StatusPartialContent:
		start, t, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != have {
			err := fmt.Errorf("asked for bytes from %d, got Content-Range %q; starting over", have, resp.Header.Get("Content-Range"))
			if rerr := restart(f, h); rerr != nil {
				return false, "", fmt.Errorf("partial download: %w", rerr)
			}
			return false, "", retryable{err}
		}
		total = t
	case http.StatusRequestedRangeNotSatisfiable:
		// Nothing after byte have: the part is the whole file, or too long.
		_, t, _ := parseContentRange(resp.Header.Get("Content-Range"))
		if (t >= 0 && t != have) || (src.size >= 0 && src.size != have) {
			err := fmt.Errorf("the partial download (%d bytes) is longer than the file; starting over", have)
			if rerr := restart(f, h); rerr != nil {
				return false, "", fmt.Errorf("partial download: %w", rerr)
			}
			return false, "", retryable{err}
		}
		total = have
	default:
		return false, "", statusError(resp)
	}
	if total >= 0 && src.size >= 0 && total != src.size {
		return false, "", fmt.Errorf("the server sends %d bytes; the hub lists %d", total, src.size)
	}
	if src.size < 0 {
		src.size = total
	}

	done := have
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		p.prog.begin(have, src.size)
		n, rerr, werr := p.copy(f, h, resp.Body, have, src.size, watchdog)
		done += n
		progressed = n > 0
		switch {
		case werr != nil:
			return progressed, "", fmt.Errorf("partial download: %w", werr)
		case rerr != nil:
			return progressed, "", connError(actx, fmt.Errorf("connection lost at %s: %w", fraction(done, src.size), rerr))
		case src.size >= 0 && done < src.size:
			return progressed, "", retryable{fmt.Errorf("connection closed at %s: %w", fraction(done, src.size), io.ErrUnexpectedEOF)}
		case src.size >= 0 && done > src.size:
			return progressed, "", fmt.Errorf("the server sent %d bytes, more than the %d it announced", done, src.size)
		}
		p.prog.end(done, src.size)
	}
	if src.size < 0 {
		src.size = done
	}
	if err := f.Sync(); err != nil {
		return progressed, "", fmt.Errorf("partial download: %w", err)
	}
	got = hex.EncodeToString(h.Sum(nil))
	if src.sha256 != "" && got != src.sha256 {
		return progressed, "", fmt.Errorf("%w: the download has sha256 %s, the hub publishes %s; deleted it", ErrChecksum, got, src.sha256)
	}
	return progressed, got, nil
}

// copy appends body to f and h, reporting progress, until body ends. done
// is what f held before; total the expected size, or -1. Each read pushes
// the watchdog back.
func (p *puller) copy(f *os.File, h hash.Hash, body io.Reader, done, total int64, watchdog *time.Timer) (n int64, readErr, writeErr error) {
	buf := make([]byte, copyBuffer)
	for {
		m, err := body.Read(buf)
		if m > 0 {
			watchdog.Reset(stallTimeout)
			if _, werr := f.Write(buf[:m]); werr != nil {
				return n, nil, werr
			}
			h.Write(buf[:m])
			n += int64(m)
			p.prog.update(done+n, total, int64(m))
		}
		if err == io.EOF {
			return n, nil, nil
		}
		if err != nil {
			return n, err, nil
		}
	}
}

// restart empties the partial download f and resets its hash.
func restart(f *os.File, h hash.Hash) error {
	h.Reset()
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.Seek(0, io.SeekStart)
	return err
}

// connError classifies err, the failure of a request made with actx: a
// stall or a connection failure is retryable; a cancellation or a host that
// does not exist is not.
func connError(actx context.Context, err error) error {
	if errors.Is(context.Cause(actx), errStalled) {
		return retryable{errStalled}
	}
	if actx.Err() != nil {
		return err
	}
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return err
	}
	return retryable{err}
}

// parseContentRange parses "bytes START-END/TOTAL" or "bytes */TOTAL";
// total is -1 for "*", start -1 for "*/TOTAL".
func parseContentRange(v string) (start, total int64, ok bool) {
	spec, ok := strings.CutPrefix(strings.TrimSpace(v), "bytes ")
	if !ok {
		return -1, -1, false
	}
	rng, tot, ok := strings.Cut(spec, "/")
	if !ok {
		return -1, -1, false
	}
	total = -1
	if tot != "*" {
		t, err := strconv.ParseInt(tot, 10, 64)
		if err != nil || t < 0 {
			return -1, -1, false
		}
		total = t
	}
	if rng == "*" {
		return -1, total, true
	}
	first, last, ok := strings.Cut(rng, "-")
	if !ok {
		return -1, -1, false
	}
	s, err1 := strconv.ParseInt(first, 10, 64)
	e, err2 := strconv.ParseInt(last, 10, 64)
	if err1 != nil || err2 != nil || s < 0 || e < s || total >= 0 && e >= total {
		return -1, -1, false
	}
	return s, total, true
}
