package gate

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// origins are the web origins allowed to call the API from a page.
type origins struct {
	any  bool
	list []string
	set  map[string]bool
}

func parseOrigins(list []string) (origins, error) {
	o := origins{set: map[string]bool{}}
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "*" {
			o.any = true
			continue
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return o, fmt.Errorf("--cors-origins %q: want scheme://host[:port], e.g. https://app.example.com, or *", s)
		}
		norm := strings.ToLower(u.Scheme + "://" + u.Host)
		o.list = append(o.list, norm)
		o.set[norm] = true
	}
	return o, nil
}

func (o origins) allows(origin string) bool {
	return origin != "" && (o.any || o.set[strings.ToLower(origin)])
}

// maxRequestHeaders bounds the Access-Control-Request-Headers a preflight
// gets echoed.
const maxRequestHeaders = 1024

// withCORS answers the preflight requests of allowed origins and adds the
// CORS headers to their requests' responses; a preflight from any other
// origin is refused (403), so its page cannot send the request.
func (g *Gate) withCORS(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(context.WithValue(r.Context(), originKey{}, g))
		origin := r.Header.Get("Origin")
		preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
		if !g.cfg.Policy.cors.allows(origin) {
			if preflight {
				g.refuse(w, r, &Error{Status: http.StatusForbidden, Code: "cross_origin_denied",
					Message: fmt.Sprintf("origin %q may not call this API (the operator can allow it with --cors-origins)", origin)})
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		hdr := w.Header()
		hdr.Set("Access-Control-Allow-Origin", origin)
		hdr.Add("Vary", "Origin")
		hdr.Set("Access-Control-Expose-Headers", "X-Request-Id, Retry-After")
		if !preflight {
			h.ServeHTTP(w, r)
			return
		}
		hdr.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
		if req := r.Header.Get("Access-Control-Request-Headers"); req != "" && len(req) <= maxRequestHeaders && headerList(req) {
			hdr.Set("Access-Control-Allow-Headers", req)
		}
		hdr.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
	})
}

// headerList reports whether s is a comma-separated list of header names.
func headerList(s string) bool {
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-_, ", c) >= 0:
		default:
			return false
		}
	}
	return true
}

type originKey struct{}

// OriginAllowed reports whether a browser request's Origin may use what r
// asks for, for the handlers that must check it themselves (a WebSocket
// upgrade is a GET, which the cross-origin check lets through): no Origin
// (not a browser), an origin of Config.CORSOrigins, or the request's own
// origin when its host is one the Host policy allows, so a page reached
// through DNS rebinding is refused. Outside a gate, the same origin only.
func OriginAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	same := strings.EqualFold(u.Host, r.Host)
	g, ok := r.Context().Value(originKey{}).(*Gate)
	if !ok {
		return same
	}
	if g.cfg.Policy.cors.allows(origin) {
		return true
	}
	loopback, known := onLoopback(r)
	return same && (!known || g.cfg.Policy.hosts.allows(hostName(u.Host), loopback))
}
