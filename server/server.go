// Package server runs corral's HTTP server: routes, middleware (request
// ids, request logs, body limit, panic recovery) and lifecycle (serving
// /health while the model loads, graceful shutdown).
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/corral-llm/corral/openai"
)

// Defaults for zero Config fields.
const (
	DefaultMaxBody           = 8 << 20
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultShutdownTimeout   = 10 * time.Second
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
	// ShutdownTimeout is how long Serve lets in-flight requests finish
	// after its context ends before closing their connections.
	ShutdownTimeout time.Duration
}

// Server serves the API. Until SetAPI is called it is "loading": /health
// answers 503 {"status":"loading"} and API routes a 503 error.
type Server struct {
	cfg     Config
	log     *slog.Logger
	api     atomic.Pointer[openai.API]
	handler http.Handler
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
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.handler = s.middleware(s.routes())
	return s
}

// SetAPI makes the server ready: API routes go to api from now on.
func (s *Server) SetAPI(api *openai.API) { s.api.Store(api) }

// Handler is the server's root handler, middleware included.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves HTTP on ln until ctx ends, then shuts down gracefully:
// it stops accepting, lets in-flight requests finish for up to
// Config.ShutdownTimeout, then closes the remaining connections, which
// cancels their requests. It returns nil after a shutdown caused by ctx.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.log.Info("shutting down", "grace", s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		s.log.Warn("in-flight requests outlived the shutdown grace; closing them", "err", err)
		hs.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// apiMethod is one handler method of openai.API.
type apiMethod func(*openai.API, http.ResponseWriter, *http.Request)

// route describes one endpoint.
type route struct {
	method string
	paths  []string
	h      apiMethod
}

// apiRoutes are the OpenAI and llama-server endpoints, with llama-server's
// aliases.
var apiRoutes = []route{
	{http.MethodPost, []string{"/v1/chat/completions", "/chat/completions"}, (*openai.API).ChatCompletions},
	{http.MethodPost, []string{"/v1/completions", "/completions"}, (*openai.API).Completions},
	{http.MethodPost, []string{"/completion"}, (*openai.API).Completion},
	{http.MethodPost, []string{"/tokenize"}, (*openai.API).Tokenize},
	{http.MethodPost, []string{"/detokenize"}, (*openai.API).Detokenize},
	{http.MethodGet, []string{"/v1/models", "/models"}, (*openai.API).Models},
	{http.MethodGet, []string{"/slots"}, (*openai.API).Slots},
	{http.MethodGet, []string{"/props"}, (*openai.API).Props},
	{http.MethodGet, []string{"/metrics"}, (*openai.API).Metrics},
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range apiRoutes {
		h := allow(rt.method, s.ready(rt.h))
		for _, p := range rt.paths {
			mux.Handle(p, h)
		}
	}
	health := allow(http.MethodGet, http.HandlerFunc(s.health))
	mux.Handle("/health", health)
	mux.Handle("/v1/health", health)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Code: "not_found",
			Message: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)})
	})
	return mux
}

// health answers 200 {"status":"ok"} when ready, 503 {"status":"loading"}
// while the model loads.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if s.api.Load() == nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"status":"loading"}` + "\n"))
		return
	}
	w.Write([]byte(`{"status":"ok"}` + "\n"))
}

// ready sends requests to the API once it is set, a 503 error before.
func (s *Server) ready(m apiMethod) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api := s.api.Load()
		if api == nil {
			openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeServer, Code: "model_loading",
				Message: "the model is still loading, retry later"})
			return
		}
		m(api, w, r)
	})
}

// allow answers 405 with an Allow header to methods other than method.
func allow(method string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			openai.WriteError(w, &openai.Error{Status: http.StatusMethodNotAllowed, Type: openai.TypeInvalidRequest, Code: "method_not_allowed",
				Message: fmt.Sprintf("%s %s is not allowed; use %s", r.Method, r.URL.Path, method)})
			return
		}
		h.ServeHTTP(w, r)
	})
}
