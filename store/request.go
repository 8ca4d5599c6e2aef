package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// errInsecure means a URL is plain http, and the pull is not insecure.
var errInsecure = errors.New("not https (--insecure allows plain http)")

// checkScheme returns an error unless u is https, or http with insecure
// set; the caller names u.
func (p *puller) checkScheme(u *url.URL) error {
	switch {
	case u.Scheme == "https" || u.Scheme == "http" && p.insecure:
		return nil
	case u.Scheme == "http":
		return errInsecure
	}
	return fmt.Errorf("unsupported scheme %q (want https)", u.Scheme)
}

// newRequest makes a request carrying the token when it goes to the hub.
// The URL must be https (see checkScheme).
func (p *puller) newRequest(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	if err := p.checkScheme(req.URL); err != nil {
		return nil, fmt.Errorf("%s: %w", shortURL(req.URL), err)
	}
	req.Header.Set("User-Agent", "corral")
	if p.token != "" && req.URL.Host == p.hubHost {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	return req, nil
}

// learn sets src's SHA-256, when unknown, from the headers of the
// responses of the hub's own host among resp and the redirects that led to
// it: X-Linked-ETag, which the hub sends for a file stored with LFS, else
// an ETag that is a SHA-256. Another server's (a URL elsewhere, or the
// CDN the hub redirects to) is no checksum the hub vouches for: a server
// that sends the file could name the hash of whatever it sends.
func (p *puller) learn(src *source, resp *http.Response) {
	if src.sha256 != "" {
		return
	}
	var hub []*http.Response
	for r := resp; r != nil && r.Request != nil; r = r.Request.Response {
		if r.Request.URL.Host == p.hubHost {
			hub = append(hub, r)
		}
	}
	for _, header := range []string{"X-Linked-Etag", "Etag"} {
		for _, r := range hub {
			if sum := parseSHA256(r.Header.Get(header)); sum != "" {
				src.sha256 = sum
				return
			}
		}
	}
}

// parseSHA256 returns the SHA-256 in an (entity tag) value, quoted or weak
// or bare, in lowercase hex; "" when it holds none.
func parseSHA256(v string) string {
	v = strings.Trim(strings.TrimPrefix(strings.TrimSpace(v), "W/"), `"`)
	if len(v) != sha256.Size*2 {
		return ""
	}
	if _, err := hex.DecodeString(v); err != nil {
		return ""
	}
	return strings.ToLower(v)
}

// statusError describes a response other than the one asked for; server
// errors and rate limits are retryable.
func statusError(resp *http.Response) error {
	err := fmt.Errorf("%s %s: %s", resp.Request.Method, shortURL(resp.Request.URL), resp.Status)
	if msg := resp.Header.Get("X-Error-Message"); msg != "" {
		err = fmt.Errorf("%w: %s", err, msg)
	}
	switch code := resp.StatusCode; {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return fmt.Errorf("%w (a gated or private repository needs HF_TOKEN set to a token with access)", err)
	case code == http.StatusTooManyRequests || code == http.StatusRequestTimeout || code >= 500:
		return retryable{err}
	}
	return err
}

// shortURL is u without its query: signed CDN URLs are long.
func shortURL(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.EscapedPath()
}

// cleanURLError drops the query from the URL a *url.Error quotes.
func cleanURLError(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	if u, perr := url.Parse(ue.URL); perr == nil {
		return fmt.Errorf("%s %s: %w", ue.Op, shortURL(u), ue.Err)
	}
	return err
}
