package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
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

// errTooLong ends a copy that reached its limit with more to read.
var errTooLong = errors.New("more than the limit")

// errNotRegular means a file Pull writes (a part, its meta file, or the
// model a download replaces) is a symlink, not a regular file, or (a part
// or its meta file) a hard link: Pull does not write through one, for a
// link planted in the model directory could make it overwrite a file
// elsewhere.
var errNotRegular = errors.New("pull writes no file through a link or into a special file; remove it")

// notRegular wraps errNotRegular for the file at path; what says what the
// file is.
func notRegular(path, what string) error {
	return fmt.Errorf("%s %s: %w", path, what, errNotRegular)
}

// checkRegular returns errNotRegular when the file at path is a symlink
// or not a regular file; nil when it is one, or does not exist.
func checkRegular(path string) error {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case st.Mode()&fs.ModeSymlink != 0:
		return notRegular(path, "is a symlink")
	case !st.Mode().IsRegular():
		return notRegular(path, "is not a regular file")
	}
	return nil
}

// download fetches src into part, resuming what part holds, and returns
// its SHA-256. A failed connection is retried (with resume). A part whose
// hash is wrong is removed; when it held bytes from before the attempt that
// finished it (an earlier pull's, or a stale one), the download starts over
// once before giving up. A failure that leaves the part empty removes it.
func (p *puller) download(ctx context.Context, src *source, part string) (string, error) {
	got, err := p.downloadTries(ctx, src, part)
	if err != nil {
		if st, serr := os.Lstat(part); serr == nil && st.Mode().IsRegular() && st.Size() == 0 {
			removePart(part)
		}
	}
	return got, err
}

func (p *puller) downloadTries(ctx context.Context, src *source, part string) (string, error) {
	startedOver := false
	for idle := 0; ; { // attempts in a row that received nothing
		a, err := p.attempt(ctx, src, part)
		if err == nil {
			return a.sha256, nil
		}
		if errors.Is(err, ErrChecksum) {
			if rerr := removePart(part); rerr != nil {
				return "", errors.Join(err, fmt.Errorf("remove bad download: %w", rerr))
			}
			if a.resumed && !startedOver {
				// The bytes an earlier attempt left may be what is wrong.
				startedOver = true
				p.prog.event("%s: the resumed download does not have the published sha256; starting over", p.prog.name)
				continue
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
		if a.progressed {
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

// attemptResult is what an attempt did.
type attemptResult struct {
	progressed bool   // it received bytes
	resumed    bool   // it went on from bytes an earlier attempt left in the part
	sha256     string // the part's SHA-256, once complete
}

// attempt makes one request for the rest of src, appends what it receives
// to part and, once part is complete, checks and syncs it. A part is
// resumed when the server can tell it is of the same file (it answers a
// Range request with If-Range, the validator of the response that started
// the part, kept in part's meta file), or when the hash is known; else it
// starts over. The part is created only once the server answers with the
// file.
func (p *puller) attempt(ctx context.Context, src *source, part string) (res attemptResult, err error) {
	var f *os.File // the part, once open
	defer func() {
		if f == nil {
			return
		}
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("partial download: %w", cerr)
		}
	}()
	h := sha256.New()
	have, validator, err := p.resumable(src, part)
	if err != nil {
		return res, fmt.Errorf("partial download: %w", err)
	}
	if have > 0 {
		// The bytes already there count towards the hash: read them back.
		if f, err = openRegular(part, os.O_RDWR); err == nil {
			_, err = io.CopyN(h, f, have)
		}
		if err != nil {
			return res, fmt.Errorf("partial download: %w", err)
		}
		res.resumed = true
	}

	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchdog := time.AfterFunc(stallTimeout, func() { cancel(errStalled) })
	defer watchdog.Stop()
	req, err := p.newRequest(actx, http.MethodGet, src.url)
	if err != nil {
		return res, err
	}
	if have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
		if validator != "" {
			req.Header.Set("If-Range", validator)
		}
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return res, connError(actx, cleanURLError(err))
	}
	defer resp.Body.Close()
	p.learn(src, resp)

	// discard removes the part, for the next attempt to start over.
	discard := func(why error) error {
		if f != nil {
			cerr := f.Close()
			f = nil
			if cerr != nil {
				return fmt.Errorf("partial download: %w", cerr)
			}
		}
		if err := removePart(part); err != nil {
			return fmt.Errorf("partial download: %w", err)
		}
		return retryable{why}
	}
	var total int64
	switch resp.StatusCode {
	case http.StatusOK:
		if have > 0 {
			if validator != "" {
				p.prog.event("%s: the file changed on the server, or the server does not resume downloads; starting over", p.prog.name)
			} else {
				p.prog.event("%s: the server does not resume downloads; starting over", p.prog.name)
			}
			if err := restart(f, h); err != nil {
				return res, fmt.Errorf("partial download: %w", err)
			}
			have, res.resumed = 0, false
		}
		total = resp.ContentLength
	case http.StatusPartialContent:
		start, t, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != have {
			return res, discard(fmt.Errorf("asked for bytes from %d, got Content-Range %q; starting over", have, resp.Header.Get("Content-Range")))
		}
		if v := responseValidator(resp); validator != "" && v != "" && v != validator {
			// A server that ignored If-Range.
			return res, discard(fmt.Errorf("the file changed on the server (%s, was %s); starting over", v, validator))
		}
		total = t
	case http.StatusRequestedRangeNotSatisfiable:
		// Nothing after byte have: the part is the whole file, or too long.
		// With the size unknown it could be either: start over.
		_, size, _ := parseContentRange(resp.Header.Get("Content-Range"))
		if size < 0 {
			size = src.size
		}
		switch {
		case size < 0:
			return res, discard(fmt.Errorf("the server cannot send bytes from %d, and does not say the file's size; starting over", have))
		case size != have || (src.size >= 0 && src.size != have):
			return res, discard(fmt.Errorf("the partial download (%d bytes) is not the size of the file (%d bytes); starting over", have, size))
		}
		total = have
	default:
		return res, statusError(resp)
	}
	if total >= 0 && src.size >= 0 && total != src.size {
		return res, fmt.Errorf("the server sends %d bytes; the hub lists %d", total, src.size)
	}
	if total >= 0 && p.maxSize >= 0 && total > p.maxSize {
		return res, p.tooLarge(total)
	}
	if src.size < 0 {
		src.size = total
	}
	if have == 0 {
		// This response starts the part. Keep its validator, to resume the
		// part only with the same file.
		if f == nil {
			if f, err = openRegular(part, os.O_RDWR|os.O_CREATE); err == nil {
				err = f.Truncate(0)
			}
			if err != nil {
				return res, fmt.Errorf("partial download: %w", err)
			}
		}
		if err := writeValidator(part, responseValidator(resp)); err != nil {
			return res, fmt.Errorf("partial download: %w", err)
		}
	}

	done := have
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		// The part holds at most the size announced (by the hub's listing,
		// Content-Length or Content-Range), or the size limit when none
		// is: a server that goes on sending is cut there.
		limit := src.size
		if limit < 0 {
			limit = p.maxSize
		}
		p.prog.begin(have, src.size)
		n, rerr, werr := p.copy(f, h, resp.Body, have, src.size, limit, watchdog)
		done += n
		res.progressed = n > 0
		switch {
		case werr != nil:
			return res, fmt.Errorf("partial download: %w", werr)
		case errors.Is(rerr, errTooLong):
			err := fmt.Errorf("the server sent more than the announced %d bytes", src.size)
			if src.size < 0 {
				err = fmt.Errorf("the server sent more than the size limit of %d bytes (%s; --max-size) without announcing the file's size", limit, humanBytes(float64(limit)))
			}
			if rerr := removePart(part); rerr != nil {
				return res, errors.Join(err, fmt.Errorf("remove bad download: %w", rerr))
			}
			return res, err
		case rerr != nil:
			return res, connError(actx, fmt.Errorf("connection lost at %s: %w", fraction(done, src.size), rerr))
		case src.size >= 0 && done < src.size:
			return res, retryable{fmt.Errorf("connection closed at %s: %w", fraction(done, src.size), io.ErrUnexpectedEOF)}
		}
		p.prog.end(done, src.size)
	}
	if src.size < 0 {
		src.size = done
	}
	if err := f.Sync(); err != nil {
		return res, fmt.Errorf("partial download: %w", err)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if src.sha256 != "" && got != src.sha256 {
		return res, fmt.Errorf("%w: the download has sha256 %s, the hub publishes %s; deleted it", ErrChecksum, got, src.sha256)
	}
	res.sha256 = got
	return res, nil
}

// tooLarge is the error for a file of size bytes, over the size limit.
func (p *puller) tooLarge(size int64) error {
	return fmt.Errorf("the file is %d bytes (%s), more than the size limit of %s (--max-size)", size, humanBytes(float64(size)), humanBytes(float64(p.maxSize)))
}

// resumable returns how many bytes of part to resume from, and the
// validator to send with If-Range. A part is resumed when the validator of
// the response that started it was kept, or when the file's hash is known
// (the hash catches a part of another file). A part that cannot be resumed
// is removed: the download starts over.
func (p *puller) resumable(src *source, part string) (have int64, validator string, err error) {
	st, err := os.Lstat(part)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", err
	}
	if err := checkRegular(part); err != nil {
		return 0, "", err
	}
	validator, err = readValidator(part)
	if err != nil {
		return 0, "", err
	}
	switch {
	case st.Size() == 0:
		return 0, "", nil
	case src.size >= 0 && st.Size() > src.size:
		p.prog.event("%s: the partial download is longer than the file; starting over", p.prog.name)
	case src.size < 0 && p.maxSize >= 0 && st.Size() > p.maxSize:
		p.prog.event("%s: the partial download is over the size limit; starting over", p.prog.name)
	case src.sha256 != "":
		// Resumed as before validators were kept: the hash is enough, and
		// a hub's CDN need not keep them across its signed URLs.
		return st.Size(), "", nil
	case validator == "":
		p.prog.event("%s: cannot tell whether the partial download is of the same file; starting over", p.prog.name)
	default:
		return st.Size(), validator, nil
	}
	return 0, "", removePart(part)
}

// metaExt is the suffix of the file beside a part that keeps the validator
// (ETag or Last-Modified) of the response that started the part.
const metaExt = ".meta"

// responseValidator is what identifies the version of the file resp
// serves, for If-Range: its ETag when strong (If-Range takes no weak one),
// else its Last-Modified; "" when it has neither.
func responseValidator(resp *http.Response) string {
	if etag := strings.TrimSpace(resp.Header.Get("Etag")); etag != "" && !strings.HasPrefix(etag, "W/") {
		return etag
	}
	return strings.TrimSpace(resp.Header.Get("Last-Modified"))
}

// maxValidator bounds the meta file read back: an ETag or a date is short.
const maxValidator = 4 << 10

// readValidator returns the validator kept beside part, "" when none is
// (or what is kept is not one).
func readValidator(part string) (string, error) {
	f, err := openRegular(part+metaExt, os.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxValidator+1))
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if len(b) > maxValidator || strings.ContainsAny(v, "\r\n") {
		return "", nil
	}
	return v, nil
}

// writeValidator keeps v beside part; with v empty, removes what is kept.
func writeValidator(part, v string) error {
	if v == "" {
		if err := os.Remove(part + metaExt); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	f, err := openRegular(part+metaExt, os.O_WRONLY|os.O_CREATE)
	if err != nil {
		return err
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteString(v + "\n")
	}
	return errors.Join(err, f.Close())
}

// removePart removes part and the validator kept beside it.
func removePart(part string) error {
	err := os.Remove(part)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	return errors.Join(err, writeValidator(part, ""))
}

// copy appends body to f and h, reporting progress, until body ends. done
// is what f held before; total the expected size, or -1. f grows to at
// most limit bytes (-1: no limit): a body with more ends the copy with
// errTooLong. Each read pushes the watchdog back.
func (p *puller) copy(f *os.File, h hash.Hash, body io.Reader, done, total, limit int64, watchdog *time.Timer) (n int64, readErr, writeErr error) {
	buf := make([]byte, copyBuffer)
	for {
		m, err := body.Read(buf)
		over := limit >= 0 && int64(m) > limit-done-n
		if over {
			m = int(max(limit-done-n, 0))
		}
		if m > 0 {
			watchdog.Reset(stallTimeout)
			if _, werr := f.Write(buf[:m]); werr != nil {
				return n, nil, werr
			}
			h.Write(buf[:m])
			n += int64(m)
			p.prog.update(done+n, total, int64(m))
		}
		if over {
			return n, errTooLong, nil
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
// stall or a connection failure is retryable; a cancellation, a host that
// does not exist or a redirect to plain http is not.
func connError(actx context.Context, err error) error {
	if errors.Is(context.Cause(actx), errStalled) {
		return retryable{errStalled}
	}
	if actx.Err() != nil || errors.Is(err, errInsecure) {
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
