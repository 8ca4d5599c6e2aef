// Package server runs corral's HTTP server: routes, the gate every request
// passes (package gate: request ids and logs, panic recovery, API keys,
// host and origin checks, body limit and deadline) and lifecycle (serving
// /health while the model loads, draining and graceful shutdown, TLS).
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/corral-llm/corral/anthropic"
	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/llamacpp"
	"github.com/corral-llm/corral/ollama"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/responses"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/voice"
	"github.com/corral-llm/corral/web"
)

// Defaults for zero Config fields.
const (
	DefaultMaxBody           = 8 << 20
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultShutdownTimeout   = 10 * time.Second
	DefaultBodyTimeout       = time.Minute
)

// Config configures a Server. The zero value is usable.
type Config struct {
	// MaxBody limits request bodies in bytes; larger ones get 413.
	MaxBody int64
	// LogRequests logs every request body (msg "request body").
	LogRequests bool
	// Logger receives request logs and errors; nil means slog.Default().
	Logger *slog.Logger
	// ReadHeaderTimeout and IdleTimeout are http.Server's.
	ReadHeaderTimeout, IdleTimeout time.Duration
	// BodyTimeout is how long a client may take to send a request body,
	// from the handler's first read of it; a slower one gets 408. It is
	// not http.Server's ReadTimeout, which would also cut responses that
	// stream for longer.
	BodyTimeout time.Duration
	// KeepAlive and WriteTimeout tune responses; see serving.StreamConfig
	// (0: its defaults, 15s and 30s).
	KeepAlive, WriteTimeout time.Duration
	// ShutdownTimeout is how long Serve lets in-flight requests finish
	// after its context ends before closing their connections.
	ShutdownTimeout time.Duration
	// Policy is who may call: API keys, allowed hosts, CORS origins (see
	// gate.NewPolicy). The zero value: no keys, local host names on
	// loopback, no cross-origin requests that change state.
	Policy gate.Policy
	// TLS, when set, makes Serve speak HTTPS (and HTTP/2) with it.
	TLS *tls.Config
	// PublicMetrics lets /metrics through without a key (a scraper that
	// sends none; see serving.Options.MetricsPublic).
	PublicMetrics bool
	// ResponsesStore bounds the responses the Responses API keeps
	// (store: true) for previous_response_id and GET /v1/responses/{id}:
	// bytes in all, bytes per API key, how long each is kept (zero
	// fields: responses.OpenStore's defaults, 256 MiB and an hour), and
	// the directory that keeps them across restarts, if any.
	ResponsesStore responses.StoreOptions
}

// RequestIDHeader carries the request id (see gate.RequestIDHeader).
const RequestIDHeader = gate.RequestIDHeader

// Server serves the API. Until SetCore is called it is "loading": /health
// answers 503 {"status":"loading"} and API routes a 503 error. After Drain
// it is "draining": /health answers 503 {"status":"draining"} and the
// engine admits no more requests.
type Server struct {
	cfg      Config
	log      *slog.Logger
	core     atomic.Pointer[serving.Core]
	draining atomic.Bool
	drained  chan struct{} // closed by Drain: live streams end
	handler  http.Handler

	running atomic.Int64  // requests in API handlers
	idle    chan struct{} // capacity 1: "running fell to 0"

	// responses keeps the Responses API's stored responses (store:
	// true), per API key, bounded in bytes and time; Serve closes it.
	responses *responses.Store
	storeErr  error // why responses could not open its directory: Serve fails
}

// New returns a loading server.
func New(cfg Config) *Server {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	st, err := responses.OpenStore(cfg.ResponsesStore)
	s := &Server{cfg: cfg, log: cfg.Logger, idle: make(chan struct{}, 1), drained: make(chan struct{}),
		responses: st, storeErr: err}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.handler = s.middleware(s.routes())
	return s
}

// middleware puts h behind the gate (package gate), configured from the
// server's Config.
func (s *Server) middleware(h http.Handler) http.Handler {
	return gate.New(gate.Config{
		Logger: s.log, MaxBody: s.cfg.MaxBody, BodyTimeout: s.cfg.BodyTimeout, LogBodies: s.cfg.LogRequests,
		Policy: s.cfg.Policy, Public: s.public, Quiet: quiet, Errors: writeGateError, Prepare: s.prepare,
	}, h)
}

// RequestID returns the id of the request ctx belongs to (see
// gate.RequestID).
func RequestID(ctx context.Context) string { return gate.RequestID(ctx) }

// public are the requests that need no API key: the health check, the
// web page and its assets, and /metrics with Config.PublicMetrics.
// Everything else, the page's live view included, needs one when the
// server has keys.
func (s *Server) public(r *http.Request) bool {
	switch p := r.URL.Path; {
	case p == "/health", p == "/v1/health", p == "/":
		return true
	case p == "/metrics":
		return s.cfg.PublicMetrics
	case strings.HasPrefix(p, web.AssetPrefix):
		return true
	}
	return false
}

// quiet are the requests logged at debug level: polled constantly.
func quiet(r *http.Request) bool { return r.URL.Path == "/health" || r.URL.Path == "/metrics" }

// writeGateError writes a refusal of the gate in the shape of the API r
// was sent to.
func writeGateError(w http.ResponseWriter, r *http.Request, e *gate.Error) {
	se := &serving.Error{Status: e.Status, Code: e.Code, Message: e.Message}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		ollama.WriteError(w, se) // Ollama's shape
		return
	}
	writeError(w, r, se)
}

// writeError writes an error of the server's own in the shape of the API
// r was sent to: Anthropic's envelope under /v1/messages, else OpenAI's.
func writeError(w http.ResponseWriter, r *http.Request, e *serving.Error) {
	if isMessages(r.URL.Path) {
		anthropic.WriteError(w, e)
		return
	}
	openai.WriteError(w, e)
}

// isMessages reports whether path is one of Anthropic's Messages API.
func isMessages(path string) bool {
	return path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/")
}

// prepare gives the API's handlers their request log record and stream
// settings, and the request's log line what the record holds.
func (s *Server) prepare(r *http.Request) (*http.Request, func() []slog.Attr) {
	rec := new(serving.RequestLog)
	ctx := serving.WithRequestLog(r.Context(), rec)
	ctx = serving.WithStreamConfig(ctx, serving.StreamConfig{KeepAlive: s.cfg.KeepAlive, WriteTimeout: s.cfg.WriteTimeout})
	return r.WithContext(ctx), rec.Attrs
}

// SetCore makes the server ready: API routes go to c from now on. A Core
// set after Drain is drained at once.
func (s *Server) SetCore(c *serving.Core) {
	s.core.Store(c)
	if s.draining.Load() {
		c.Drain()
	}
}

// Drain starts the shutdown: /health answers 503 {"status":"draining"},
// so that load balancers stop sending requests, and the API's engine stops
// admitting them: new and queued requests fail at once with 503, while
// running ones go on. Serve drains when its context ends; Drain is for
// callers that want it earlier. Safe to call more than once.
func (s *Server) Drain() {
	if s.draining.Swap(true) {
		return
	}
	close(s.drained)
	s.log.Info("draining: new and queued requests get 503, running ones go on")
	// SetCore checks draining after storing its Core, so whichever of the
	// two runs last drains it.
	if c := s.core.Load(); c != nil {
		c.Drain()
	}
}

// Handler is the server's root handler, middleware included.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves HTTP on ln until ctx ends, then shuts down gracefully. It
// drains (see Drain) and lets running requests finish for up to
// Config.ShutdownTimeout; meanwhile it still accepts connections, so that
// /health reports draining and new requests get a 503 rather than a
// refused connection. Then it stops accepting and closes the connections
// left, which cancels their requests. It returns nil after a shutdown
// caused by ctx. A Config.ResponsesStore directory that New could not
// open fails it at once; it closes the store when it returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	defer s.responses.Close()
	if s.storeErr != nil {
		ln.Close()
		return s.storeErr
	}
	// Requests' contexts end with base at the end of the grace period:
	// http.Server.Close does not reach hijacked connections (voice
	// WebSockets), whose handlers end with their context.
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	errc := make(chan error, 1)
	if s.cfg.TLS != nil {
		hs.TLSConfig = s.cfg.TLS
		go func() { errc <- hs.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- hs.Serve(ln) }()
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.Drain()
	s.log.Info("shutting down", "grace", s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	s.waitIdle(sctx)
	if err := hs.Shutdown(sctx); err != nil {
		s.log.Warn("in-flight requests outlived the shutdown grace; closing them", "err", err)
		hs.Close()
	}
	cancelBase()
	wctx, cancelWait := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancelWait()
	s.waitIdle(wctx) // handlers whose context just ended, WebSockets too
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// waitIdle returns when no request is in an API handler, or when ctx ends.
func (s *Server) waitIdle(ctx context.Context) {
	for s.running.Load() > 0 {
		select {
		case <-s.idle:
		case <-ctx.Done():
			return
		}
	}
}

// routes are the endpoints of every dialect, the metrics and the voice
// WebSocket.
func routes(st *responses.Store) []serving.Route {
	return append(slices.Concat(openai.Routes(), responses.Routes(st), ollama.Routes(), llamacpp.Routes(), anthropic.Routes()),
		serving.Route{Method: http.MethodGet, Paths: []string{"/metrics"}, Handler: func(c *serving.Core, w http.ResponseWriter, r *http.Request) {
			c.Metrics(w, r, openai.WriteError)
		}},
		serving.Route{Method: http.MethodGet, Paths: []string{"/v1/voice"}, Handler: serveVoice})
}

// serveVoice serves the voice WebSocket (package voice) on the Core, its
// conversations within the Core's limits.
func serveVoice(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	lim := c.Limits()
	voice.Serve(w, r, openai.Pacer{Core: c}, voice.Options{Logger: c.Logger(), MaxHistoryBytes: lim.MaxVoiceHistory, MaxMessages: lim.MaxMessages})
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routes(s.responses) {
		h := allow(rt.Method, s.ready(rt.Handler))
		for _, p := range rt.Paths {
			mux.Handle(p, h)
		}
	}
	health := allow(http.MethodGet, http.HandlerFunc(s.health))
	mux.Handle("/health", health)
	mux.Handle("/v1/health", health)
	// GET or HEAD / is the web page for a browser (a request whose
	// Accept lists text/html, see web.WantsHTML), and for anything else
	// the liveness check some clients send (Ollama's heartbeat), answered
	// like Ollama's.
	page := web.Page()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if web.WantsHTML(r) {
			page.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Add("Vary", "Accept")
		w.Write([]byte("corral is running\n"))
	})
	mux.Handle(web.AssetPrefix, allow(http.MethodGet, web.Assets()))
	// The live view's event stream is no API request: it does not hold
	// up the drain (waitIdle), and ends when the drain begins.
	live := allow(http.MethodGet, web.Live(web.LiveConfig{Models: s.models, Done: s.drained, WriteTimeout: s.cfg.WriteTimeout}))
	mux.Handle("/v1/live", live)
	mux.Handle("/live", live)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, &serving.Error{Status: http.StatusNotFound, Code: "not_found",
			Message: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)})
	})
	return mux
}

// health answers 200 {"status":"ok"} when ready, 503 {"status":"loading"}
// while the model loads and 503 {"status":"draining"} once draining.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if s.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"status":"draining"}` + "\n"))
		return
	}
	if s.core.Load() == nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"status":"loading"}` + "\n"))
		return
	}
	w.Write([]byte(`{"status":"ok"}` + "\n"))
}

// models are the Core's models for the live view, nil while loading.
func (s *Server) models() web.Models {
	if c := s.core.Load(); c != nil {
		return c.Registry()
	}
	return nil
}

// ready sends requests to the Core once it is set, a 503 error before. It
// counts the requests running, for waitIdle.
func (s *Server) ready(h func(*serving.Core, http.ResponseWriter, *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.running.Add(1)
		defer func() {
			if s.running.Add(-1) == 0 {
				select {
				case s.idle <- struct{}{}:
				default:
				}
			}
		}()
		c := s.core.Load()
		if c == nil {
			writeError(w, r, &serving.Error{Status: http.StatusServiceUnavailable, Code: "model_loading",
				Message: "the model is still loading, retry later"})
			return
		}
		h(c, w, r)
	})
}

// allow answers 405 with an Allow header to methods other than method.
func allow(method string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			writeError(w, r, &serving.Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
				Message: fmt.Sprintf("%s %s is not allowed; use %s", r.Method, r.URL.Path, method)})
			return
		}
		h.ServeHTTP(w, r)
	})
}
