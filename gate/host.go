package gate

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
)

// hostPolicy decides which Host headers a request may carry.
type hostPolicy struct {
	configured bool            // AllowedHosts was given
	any        bool            // "*"
	exact      map[string]bool // lower-case names and addresses
	suffixes   []string        // ".example.com" for "*.example.com"
	hostname   string          // this machine's, lower-case
}

func newHostPolicy(list []string) (hostPolicy, error) {
	p := hostPolicy{exact: map[string]bool{}}
	if h, err := os.Hostname(); err == nil {
		p.hostname = strings.ToLower(h)
	}
	for _, h := range list {
		h = strings.ToLower(strings.TrimSpace(h))
		p.configured = true
		switch {
		case h == "*":
			p.any = true
		case strings.HasPrefix(h, "*."):
			if strings.ContainsAny(h[2:], "*:/ ") || h[2:] == "" {
				return p, fmt.Errorf("--allowed-hosts %q: want a host name, *.domain or *", h)
			}
			p.suffixes = append(p.suffixes, h[1:])
		case h == "" || strings.ContainsAny(h, "*/ "):
			return p, fmt.Errorf("--allowed-hosts %q: want a host name, *.domain or *", h)
		default:
			p.exact[strings.Trim(h, "[]")] = true
		}
	}
	return p, nil
}

// allows reports whether a request that names host (no port) may be
// served; loopback says whether it arrived on a loopback address.
func (p hostPolicy) allows(host string, loopback bool) bool {
	if p.configured {
		if p.any || p.exact[host] {
			return true
		}
		for _, s := range p.suffixes {
			if strings.HasSuffix(host, s) {
				return true
			}
		}
		return false
	}
	if !loopback {
		return true
	}
	return p.local(host)
}

// local reports whether host names this machine: what a page reached
// through DNS rebinding cannot be called.
func (p hostPolicy) local(host string) bool {
	switch {
	case host == "", host == "localhost", strings.HasSuffix(host, ".localhost"), host == p.hostname:
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// hostName is the host part of a Host header or an origin's host[:port]:
// lower case, without port, brackets or a trailing dot.
func hostName(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.Trim(strings.ToLower(h), "[]"), ".")
	return h
}

// onLoopback reports whether r arrived on a loopback address, and whether
// it arrived on a connection at all (a handler called directly, as in
// tests, has none).
func onLoopback(r *http.Request) (loopback, known bool) {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false, false
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return false, true
	}
	return ap.Addr().Unmap().IsLoopback(), true
}

// checkHost refuses requests whose Host the policy does not allow (403),
// which is what a page reached through DNS rebinding sends.
func (g *Gate) checkHost(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		loopback, known := onLoopback(r)
		if known && !g.cfg.Policy.hosts.allows(hostName(r.Host), loopback) {
			g.refuse(w, r, &Error{Status: http.StatusForbidden, Code: "host_not_allowed",
				Message: fmt.Sprintf("host %q is not allowed (the operator can allow it with --allowed-hosts)", hostName(r.Host))})
			return
		}
		h.ServeHTTP(w, r)
	})
}
