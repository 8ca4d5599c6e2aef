package media

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Fetching media given by http(s) URL, only from the hosts an operator
// lists (--allowed-media-domains): a server that fetches any URL a client
// names lets the client reach what only the server can (an SSRF hole).

// DefaultFetchTimeout bounds a whole fetch, body included, when
// NewFetcher is given none (--media-fetch-timeout; vLLM's
// VLLM_IMAGE_FETCH_TIMEOUT is 5 s too).
const DefaultFetchTimeout = 5 * time.Second

// maxRedirects is the most redirects a fetch follows, each to a listed
// host.
const maxRedirects = 3

// Fetcher fetches media by http(s) URL from listed hosts. A host is
// matched whole, without its port, case-insensitively; there are no
// wildcards. A listed name is fetched from only when it resolves to public
// addresses: the address of every connection is checked as it is dialed
// (so a name that resolves again to another address, DNS rebinding, gains
// nothing), and loopback, private, link-local, unspecified, multicast,
// shared (CGNAT) and other reserved addresses are refused. A listed IP
// address is fetched from as named, whatever it is: that is how an
// operator names a server on its own network on purpose. No proxy is
// used, and each fetch has its own connection. Its methods may be called
// concurrently.
type Fetcher struct {
	hosts     map[string]bool
	timeout   time.Duration
	transport *http.Transport
}

// NewFetcher returns a Fetcher of hosts (names or IP addresses, IPv6 in
// brackets or not; no scheme, port or path), each fetch bounded by
// timeout (DefaultFetchTimeout when it is not positive).
func NewFetcher(hosts []string, timeout time.Duration) (*Fetcher, error) {
	if len(hosts) == 0 {
		return nil, errors.New("no host listed")
	}
	if timeout <= 0 {
		timeout = DefaultFetchTimeout
	}
	f := &Fetcher{hosts: map[string]bool{}, timeout: timeout}
	for _, h := range hosts {
		n := canonicalHost(h)
		switch {
		case strings.Contains(n, "*"):
			return nil, fmt.Errorf("%q: wildcards are not taken; list each host", h)
		case n == "", strings.ContainsAny(n, "/:@?#[] \t") && !isIP(n):
			return nil, fmt.Errorf("%q: want a host name or IP address, without scheme, port or path", h)
		}
		f.hosts[n] = true
	}
	f.transport = &http.Transport{
		DialContext:            f.dial,
		DisableKeepAlives:      true,
		DisableCompression:     true, // the bytes bound counts the bytes sent
		MaxResponseHeaderBytes: 64 << 10,
	}
	return f, nil
}

// canonicalHost is host as it is matched: lower case, without brackets or
// a final dot, an IP address in its canonical form.
func canonicalHost(host string) string {
	h := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(host)), ".")
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if a, err := netip.ParseAddr(h); err == nil {
		return a.String()
	}
	return h
}

func isIP(host string) bool {
	_, err := netip.ParseAddr(host)
	return err == nil
}

// Fetch fetches the medium of kind k at rawURL, within ctx and the
// Fetcher's timeout, and returns the media type the response gives ("" when
// it gives none, or application/octet-stream) and its bytes. A redirect is
// followed (at most 3) only to a listed host. It refuses, with an *Error,
// a URL that is not http(s), has user information or names a host not
// listed, a listed name that resolves to an address that is not public, a
// response that is not 200, one of more bytes than lim's for k (read no
// further than the bound), and a fetch that takes longer than the timeout.
// When ctx ends it returns ctx's error.
func (f *Fetcher) Fetch(ctx context.Context, rawURL string, k Kind, lim Limits) (mediaType string, data []byte, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", nil, invalid(k, err, "%s URL does not parse: %v", k, errors.Unwrap(err))
	}
	if err := f.allowed(u, k); err != nil {
		return "", nil, err
	}
	max, flag := lim.maxBytes(k)
	fctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(fctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", nil, invalid(k, err, "%s URL: %v", k, err)
	}
	req.Header.Set("Accept", k.String()+"/*")
	client := &http.Client{Transport: f.transport, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) > maxRedirects {
			return invalid(k, nil, "%s URL redirects more than %d times", k, maxRedirects)
		}
		return f.allowed(req.URL, k)
	}}
	resp, err := client.Do(req)
	if err != nil {
		return "", nil, f.fetchError(ctx, fctx, err, k)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", nil, invalid(k, nil, "fetching the %s URL: HTTP %d (%s), not 200", k, resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	if resp.ContentLength > max {
		return "", nil, overLimit(k, flag, "%s at the URL is %d bytes, over --%s %d", k, resp.ContentLength, flag, max)
	}
	data, err = io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return "", nil, f.fetchError(ctx, fctx, err, k)
	}
	if int64(len(data)) > max {
		return "", nil, overLimit(k, flag, "%s at the URL is over --%s %d bytes", k, flag, max)
	}
	return contentType(resp.Header.Get("Content-Type")), data, nil
}

// allowed refuses a URL Fetch does not fetch from: not http(s), with
// user information, or of a host not listed.
func (f *Fetcher) allowed(u *url.URL, k Kind) error {
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return invalid(k, nil, "%s URL is %s:, not http(s)", k, u.Scheme)
	case u.User != nil:
		return invalid(k, nil, "%s URL has user information (user@host), which this server does not send", k)
	case !f.hosts[canonicalHost(u.Hostname())]:
		return invalid(k, nil, "%s URL's host %q is not one this server fetches from (corral serve --allowed-media-domains)", k, u.Hostname())
	}
	return nil
}

// fetchError is the error of a fetch that failed: ctx's when it ended,
// an *Error otherwise.
func (f *Fetcher) fetchError(ctx, fctx context.Context, err error, k Kind) error {
	var me *Error
	var np *notPublic
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("fetching the %s URL: %w", k, ctx.Err())
	case errors.As(err, &me):
		return me
	case errors.As(err, &np):
		return invalid(k, err, "%s URL's host %q resolves to a %s address, and only public addresses are fetched from a listed name (list the address itself to fetch from it)", k, np.host, np.class)
	case fctx.Err() != nil:
		return overLimit(k, "media-fetch-timeout", "fetching the %s URL took over --media-fetch-timeout %s", k, f.timeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return invalid(k, err, "fetching the %s URL: %v", k, err)
}

// contentType is the media type of a Content-Type header, lower case,
// without parameters; "" for none or application/octet-stream, which say
// nothing of what the bytes are.
func contentType(header string) string {
	t, _, err := mime.ParseMediaType(header)
	if err != nil || t == "application/octet-stream" {
		return ""
	}
	return t
}

// dial connects to addr, a listed host's: to a listed IP address as it
// is, to a name's addresses only when they are public.
func (f *Fetcher) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	if !isIP(host) {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return err
			}
			if class := addrClass(ap.Addr()); class != "" {
				return &notPublic{host: host, class: class}
			}
			return nil
		}
	}
	return d.DialContext(ctx, network, addr)
}

// notPublic is the dial error of a listed name that resolved to an
// address that is not public.
type notPublic struct {
	host, class string
}

func (e *notPublic) Error() string {
	return fmt.Sprintf("%s resolves to a %s address", e.host, e.class)
}

// reserved are the ranges, besides those netip.Addr's methods tell,
// whose addresses are not public, or embed an IPv4 address that may not
// be.
var reserved = []struct {
	prefix netip.Prefix
	class  string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // and the broadcast address
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64"},
	{netip.MustParsePrefix("100::/64"), "discard"},
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
}

// addrClass is "" for a public address, else what a is ("loopback",
// "private"...). An IPv4-mapped IPv6 address is its IPv4 address's.
func addrClass(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsMulticast():
		return "multicast"
	}
	for _, r := range reserved {
		if r.prefix.Contains(a) {
			return r.class
		}
	}
	return ""
}
