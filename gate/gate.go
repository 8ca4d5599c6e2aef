// Package gate is what every HTTP request passes before a handler, for
// corral serve and corral supervise alike: a request id, a log line, panic
// recovery, the Host check that keeps DNS rebinding out, CORS for the
// origins the operator names and the cross-origin check that keeps other
// web pages from changing state, API keys with roles, per-key limits on
// concurrency and tokens, and a bounded request body with a read deadline.
//
// Handlers learn who called from FromContext; they report the tokens a
// request used with Charge, and keep a request's place among its key's
// requests in flight for work that outlives it with Keep.
package gate

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Defaults for zero Config fields.
const (
	DefaultMaxBody     = 8 << 20
	DefaultBodyTimeout = time.Minute
)

// Config configures a gate. The zero value is usable: no keys, the local
// host names on loopback connections, no cross-origin browser requests
// that change state.
type Config struct {
	// Logger receives the request log lines and panics; nil means
	// slog.Default().
	Logger *slog.Logger
	// MaxBody limits request bodies in bytes; larger ones fail to read
	// with *http.MaxBytesError. 0 means DefaultMaxBody.
	MaxBody int64
	// BodyTimeout is how long a client may take to send a request body,
	// from the handler's first read of it. 0 means DefaultBodyTimeout.
	BodyTimeout time.Duration
	// LogBodies logs every request body (msg "request body").
	LogBodies bool

	// Policy is who may call: the API keys, the allowed hosts and web
	// origins (see NewPolicy). The zero Policy: no keys, local host
	// names on loopback connections, no cross-origin browser requests
	// that change state.
	Policy Policy
	// Public reports the requests that need no key even when there are
	// keys (the health check, the web page and its assets). nil: none.
	Public func(*http.Request) bool

	// Errors writes e, with its status, in the shape of the API that r
	// was sent to. nil writes {"error": message}.
	Errors func(w http.ResponseWriter, r *http.Request, e *Error)
	// Prepare, when set, runs last before the handler: it returns the
	// request with what the handlers need in its context, and a function
	// giving the attributes the request's log line adds once it ended.
	Prepare func(r *http.Request) (*http.Request, func() []slog.Attr)
	// Unmetered reports the requests that per-key limits (concurrency,
	// tokens per minute) neither count nor refuse: those that run no
	// model, such as a supervisor's job status and results, which a key
	// must be able to read while its jobs hold all of its concurrency
	// (Keep). They still need a key. nil: none.
	Unmetered func(*http.Request) bool
	// Quiet reports requests logged at debug level rather than info
	// (polled constantly: /health, /metrics). nil: none.
	Quiet func(*http.Request) bool
}

// Error is a refusal by the gate, written by Config.Errors.
type Error struct {
	Status  int
	Code    string // machine-readable: "invalid_api_key", "host_not_allowed", ...
	Message string
	// RetryAfter, when positive, is sent as the Retry-After header.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Message }

// Policy is who may call a server: its API keys, the Host names requests
// may carry, the web origins whose pages may call it.
type Policy struct {
	// Keys are the API keys the server accepts; with none (nil or
	// empty) no request needs one, and every caller may do everything.
	Keys  *Keys
	hosts hostPolicy
	cors  origins
	cop   *http.CrossOriginProtection
}

// NewPolicy returns the policy of keys (nil: none), allowedHosts
// ("example.com", "*.example.com", "*"; none: on a connection to a
// loopback address only local names — localhost, *.localhost, loopback
// addresses, this machine's host name —, on other connections any, which
// keeps DNS rebinding away from a server bound to loopback, as Ollama
// does) and corsOrigins (scheme://host[:port], or "*": their pages may
// call the API and get CORS headers; other cross-origin browser requests
// that change state are refused).
func NewPolicy(keys *Keys, allowedHosts, corsOrigins []string) (Policy, error) {
	p := Policy{Keys: keys}
	var err error
	if p.hosts, err = newHostPolicy(allowedHosts); err != nil {
		return p, err
	}
	if p.cors, err = parseOrigins(corsOrigins); err != nil {
		return p, err
	}
	p.cop = http.NewCrossOriginProtection()
	for _, o := range p.cors.list {
		if err := p.cop.AddTrustedOrigin(o); err != nil {
			return p, fmt.Errorf("--cors-origins %q: %w", o, err)
		}
	}
	return p, nil
}

// Gate wraps a handler. Create it with New.
type Gate struct {
	cfg    Config
	log    *slog.Logger
	limits *limits
	h      http.Handler
}

// New returns h behind a gate configured by cfg.
func New(cfg Config, h http.Handler) *Gate {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.Errors == nil {
		cfg.Errors = writePlainError
	}
	if cfg.Policy.cop == nil {
		cfg.Policy, _ = NewPolicy(cfg.Policy.Keys, nil, nil) // cannot fail
	}
	g := &Gate{cfg: cfg, log: cfg.Logger, limits: newLimits()}
	if g.log == nil {
		g.log = slog.Default()
	}
	g.h = g.chain(h)
	return g
}

// refusalDrain is the most of a refused request's body the gate reads.
const refusalDrain = 1 << 20

// writePlainError writes {"error": message}.
func writePlainError(w http.ResponseWriter, _ *http.Request, e *Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	json.NewEncoder(w).Encode(map[string]string{"error": e.Message})
}

// ServeHTTP serves r through the gate.
func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.h.ServeHTTP(w, r) }

// chain wraps h, outermost first: request id, request log, panic
// recovery, body limit and deadline, Host check, CORS, cross-origin check,
// API key and per-key limits, body log, Prepare.
func (g *Gate) chain(h http.Handler) http.Handler {
	if g.cfg.Prepare != nil {
		h = g.prepare(h)
	}
	if g.cfg.LogBodies {
		h = g.logBodies(h)
	}
	h = g.authenticate(h)
	if !g.cfg.Policy.cors.any {
		h = g.crossOrigin(h)
	}
	h = g.withCORS(h)
	h = g.checkHost(h)
	h = g.limitBody(h)
	h = g.recoverPanics(h)
	h = g.logRequests(h)
	return withRequestID(h)
}

// crossOrigin refuses cross-origin browser requests that change state
// (http.CrossOriginProtection), unless their origin is trusted.
func (g *Gate) crossOrigin(h http.Handler) http.Handler {
	deny := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.refuse(w, r, &Error{Status: http.StatusForbidden, Code: "cross_origin_denied",
			Message: "cross-origin request refused: a web page from another origin may not call this API (the operator can allow its origin with --cors-origins)"})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := g.cfg.Policy.cop.Check(r); err != nil {
			deny.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// prepare runs Config.Prepare and hands its log attributes to the request
// log line.
func (g *Gate) prepare(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, attrs := g.cfg.Prepare(r)
		if st, ok := r.Context().Value(stateKey{}).(*requestState); ok {
			st.attrs = attrs
		}
		h.ServeHTTP(w, r)
	})
}

// requestState is what the outer layers learn from the inner ones, for
// the request's log line.
type requestState struct {
	caller string
	attrs  func() []slog.Attr
}

type stateKey struct{}

// refuse answers r with e: the gate's own headers (Retry-After,
// WWW-Authenticate), then the body in the API's shape (Config.Errors).
// A request body is read first, up to refusalDrain bytes (within the body
// deadline), so that a client that sends before it reads gets the answer
// rather than a reset; the connection closes after it.
func (g *Gate) refuse(w http.ResponseWriter, r *http.Request, e *Error) {
	if r.Body != nil && r.Body != http.NoBody {
		w.Header().Set("Connection", "close")
		io.CopyN(io.Discard, r.Body, refusalDrain)
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="corral"`)
	}
	g.cfg.Errors(w, r, e)
}

// withCaller returns r with c in its context and the request state told.
func withCaller(r *http.Request, c Caller) *http.Request {
	if st, ok := r.Context().Value(stateKey{}).(*requestState); ok {
		st.caller = c.ID()
	}
	return r.WithContext(WithCaller(r.Context(), c))
}
