package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultHubURL is the Hugging Face hub.
const DefaultHubURL = "https://huggingface.co"

// DefaultMaxSize is the size limit of a download when PullOptions.MaxSize
// is 0: 256 GiB, five times the largest file the hub stores (50 GB), with
// room for a merged model downloaded from elsewhere.
const DefaultMaxSize = 256 << 30

// ErrChecksum means a downloaded file's SHA-256 is not the one the hub
// published; the download is deleted.
var ErrChecksum = errors.New("checksum mismatch")

// PullOptions configures Pull. The zero value pulls from Hugging Face with
// $HF_TOKEN and reports no progress.
type PullOptions struct {
	// Client makes the requests. The default times out connecting and
	// waiting for response headers, but not a whole download (a download
	// that receives nothing for a minute is retried).
	Client *http.Client
	// HubURL is the Hugging Face hub (or a mirror of it); when empty,
	// $HF_ENDPOINT as the huggingface_hub library reads it, else
	// DefaultHubURL.
	HubURL string
	// Token is a Hugging Face access token, for gated and private
	// repositories; $HF_TOKEN when empty. It is sent, as a bearer token,
	// to the hub's host only: not to a URL elsewhere, nor to the CDN the
	// hub redirects downloads to.
	Token string
	// Progress receives progress reports, nil none.
	Progress io.Writer
	// Terminal says Progress is a terminal: the progress is one line,
	// rewritten in place, with speed and time left. Otherwise it is a line
	// per 10%.
	Terminal bool
	// Name is the model's id (its file name in the directory, without
	// .gguf); by default the name of the downloaded file.
	Name string
	// Backoff is how long to wait before retry n (1, 2, …) of a download
	// that failed (its connection, a stall, a server error); by default 1s,
	// 2s, 4s, 8s.
	Backoff func(n int) time.Duration
	// MaxSize is the largest file Pull downloads, in bytes: a file
	// announced larger is refused before it is downloaded, and a download
	// whose size is not announced is cut there. 0 means DefaultMaxSize,
	// a negative value no limit. Whatever the limit, a server that sends
	// more than the size it announced (Content-Length, Content-Range, or
	// the hub's file listing) is cut at that size.
	MaxSize int64
	// Insecure allows plain http: the reference, the hub URL and every
	// redirect must otherwise be https.
	Insecure bool
}

// Pull downloads the model ref names into dir and returns its path. ref is
// one of
//
//	org/repo:QUANT                the repository's GGUF file of that quantization (hf.co/ may precede it)
//	org/repo                      its Q4_K_M file, else its only GGUF file
//	hf://org/repo/path/file.gguf  a file of a Hugging Face repository
//	https://host/path/file.gguf   any URL
//
// The file is downloaded to dir/ID.gguf.part (beside it,
// ID.gguf.part.meta keeps the ETag or Last-Modified of the response that
// started it), checked against the SHA-256 the hub publishes (when there is
// one), synced and renamed to dir/ID.gguf. The part, its meta file and
// the model it replaces must be regular files, not symlinks: Pull writes
// through no link. The hash comes from the hub's file listing or from the
// headers of a response of the hub's own host, never from another server
// (a URL elsewhere, or the CDN the hub redirects to). A download stops at
// the size announced for it, and at PullOptions.MaxSize; every URL must be
// https, unless PullOptions.Insecure. A part left by an interrupted
// pull is resumed when the server confirms it is of the same file
// (If-Range) or the hash is published, and the download starts over once if
// the resumed file then fails the hash. A connection that fails
// mid-download is resumed a few times before Pull gives up. A model already
// in dir with the published size and hash is not downloaded again.
func Pull(ctx context.Context, ref, dir string, opt PullOptions) (string, error) {
	p, err := newPuller(opt)
	if err != nil {
		return "", fmt.Errorf("pull %s: %w", ref, err)
	}
	defer p.close()
	path, err := p.pull(ctx, ref, dir, opt.Name)
	if err != nil {
		p.prog.stop() // the error goes on a line of its own
		return "", fmt.Errorf("pull %s: %w", ref, err)
	}
	return path, nil
}

// puller is the state of one Pull.
type puller struct {
	client    *http.Client
	ownClient bool   // client is ours: close its idle connections at the end
	hub       string // hub URL without a trailing slash
	hubHost   string
	token     string
	backoff   func(int) time.Duration
	maxSize   int64 // -1: no limit
	insecure  bool
	prog      *progress
}

// newPuller applies opt's defaults.
func newPuller(opt PullOptions) (*puller, error) {
	hub := strings.TrimSuffix(cmp.Or(opt.HubURL, os.Getenv("HF_ENDPOINT"), DefaultHubURL), "/")
	u, err := url.Parse(hub)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("hub URL %q: not an absolute URL", hub)
	}
	p := &puller{
		hub:      hub,
		hubHost:  u.Host,
		token:    cmp.Or(opt.Token, os.Getenv("HF_TOKEN")),
		backoff:  opt.Backoff,
		maxSize:  opt.MaxSize,
		insecure: opt.Insecure,
		prog:     &progress{w: opt.Progress, terminal: opt.Terminal},
	}
	if err := p.checkScheme(u); err != nil {
		return nil, fmt.Errorf("hub URL %s: %w", hub, err)
	}
	switch {
	case p.maxSize == 0:
		p.maxSize = DefaultMaxSize
	case p.maxSize < 0:
		p.maxSize = -1
	}
	if p.backoff == nil {
		p.backoff = func(n int) time.Duration { return time.Second << min(n-1, 3) }
	}
	if p.prog.w == nil {
		p.prog.w = io.Discard
	}
	var c http.Client
	if opt.Client != nil {
		c = *opt.Client
	} else {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = time.Minute
		c.Transport = t
		p.ownClient = true
	}
	// The token is for the hub: redirects elsewhere (its CDN) go without.
	// Go keeps Authorization on a redirect to another port of the same
	// host, or to a subdomain; Range it keeps on every redirect. A
	// redirect to plain http is refused, unless insecure.
	next := c.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if err := p.checkScheme(req.URL); err != nil {
			return fmt.Errorf("redirect refused: %w", err)
		}
		if req.URL.Host != p.hubHost {
			req.Header.Del("Authorization")
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	p.client = &c
	return p, nil
}

// close releases the connections of a client newPuller made.
func (p *puller) close() {
	if p.ownClient {
		p.client.CloseIdleConnections()
	}
}

// pull resolves ref and downloads it into dir, unless it is there already.
func (p *puller) pull(ctx context.Context, ref, dir, id string) (string, error) {
	src, err := p.resolve(ctx, ref)
	if err != nil {
		return "", err
	}
	if n := splitCount(src.file); n > 1 {
		return "", fmt.Errorf("%s is one of %d parts of a split model, which corral does not support: merge them with llama-gguf-split --merge", src.file, n)
	}
	if id == "" {
		if !hasExt(src.file) {
			return "", fmt.Errorf("%s does not name a .gguf file (give the model a name)", src.file)
		}
		id = src.file // modelPath drops the extension
	}
	final, err := modelPath(dir, id)
	if err != nil {
		return "", err
	}
	p.prog.name = strings.TrimSuffix(filepath.Base(final), ext)
	if p.maxSize >= 0 && src.size > p.maxSize {
		return "", p.tooLarge(src.size)
	}
	if ok, err := p.upToDate(ctx, src, final); err != nil || ok {
		return final, err
	}
	// What the download writes and replaces: no links. The part and its
	// meta file are also opened without following one (a link made after
	// this check); the rename replaces a link, never what it points to.
	for _, f := range []string{final + partExt, final + partExt + metaExt, final} {
		if err := checkRegular(f); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("model directory: %w", err)
	}
	got, err := p.download(ctx, src, final+partExt)
	if err != nil {
		return "", err
	}
	if err := checkRegular(final); err != nil {
		return "", err
	}
	if err := os.Rename(final+partExt, final); err != nil {
		return "", fmt.Errorf("install download: %w", err)
	}
	writeValidator(final+partExt, "") // best effort: a validator without a part is ignored
	syncDir(dir)
	if src.sha256 != "" {
		p.prog.event("pulled %s: %s, sha256 %s verified", p.prog.name, humanBytes(float64(src.size)), got)
	} else {
		p.prog.event("pulled %s: %s, sha256 %s (not verified: no checksum published)", p.prog.name, humanBytes(float64(src.size)), got)
	}
	return final, nil
}

// upToDate reports whether final exists with the size and SHA-256 the
// source has. For a URL it asks the server (HEAD) what they are.
func (p *puller) upToDate(ctx context.Context, src *source, final string) (bool, error) {
	st, err := os.Stat(final)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("local copy: %w", err)
	}
	if !src.listed {
		if err := p.probe(ctx, src); err != nil {
			return false, err
		}
	}
	if src.size < 0 {
		p.prog.event("%s: the server does not say the file's size; pulling it again", p.prog.name)
		return false, nil
	}
	if st.Size() != src.size {
		p.prog.event("%s: the local copy has %d bytes, the published file %d; pulling it again", p.prog.name, st.Size(), src.size)
		return false, nil
	}
	if src.sha256 == "" {
		p.prog.event("%s is up to date (same size; no checksum published)", p.prog.name)
		return true, nil
	}
	p.prog.event("verifying %s (%s)", p.prog.name, humanBytes(float64(st.Size())))
	got, err := fileSHA256(final)
	if err != nil {
		return false, err
	}
	if got != src.sha256 {
		p.prog.event("%s: the local copy has sha256 %s, not %s; pulling it again", p.prog.name, got, src.sha256)
		return false, nil
	}
	p.prog.event("%s is up to date", p.prog.name)
	return true, nil
}

// probe learns the size and SHA-256 of src with a HEAD request. A server
// that does not answer it with 200 leaves them unknown.
func (p *puller) probe(ctx context.Context, src *source) error {
	req, err := p.newRequest(ctx, http.MethodHead, src.url)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return cleanURLError(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		src.size = resp.ContentLength
		p.learn(src, resp)
	}
	return nil
}

// fileSHA256 returns the SHA-256 of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("checksum: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("checksum: %w", err) // err names path
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// syncDir makes a rename in dir durable. Best effort: the file is in place
// either way, and some file systems cannot sync a directory.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
