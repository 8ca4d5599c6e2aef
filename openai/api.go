// Package openai serves an engine over HTTP with OpenAI's API
// (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models) and llama-server's
// (/completion, /tokenize, /detokenize, /apply-template, /slots, /metrics).
//
// It decodes and validates requests, renders chat templates, submits to the
// engine and encodes responses, streamed as server-sent events or whole.
// Handlers wait for tokens with Stream.Recv on the request's context: the
// goroutine parks without holding an OS thread, and a client that goes away
// cancels its request wherever it is (queued, prefilling or decoding).
// Routing, middleware and process lifecycle belong to package server.
package openai

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/registry"
)

// Registry holds the models an API serves (see package registry).
type Registry = registry.Registry[*model.Model]

// Lease is a request's hold on a loaded model.
type Lease = registry.Lease[*model.Model]

// Options configure an API.
type Options struct {
	// Logger receives warnings; nil means slog.Default().
	Logger *slog.Logger
	// MaxPause caps the chunking.pause_timeout a caller that is not admin
	// may ask for (corral serve's --max-pause), and the default pause
	// when it is shorter than engine.DefaultPauseTimeout. An admin may
	// ask for up to MaxPauseTimeout. 0 means DefaultMaxPause.
	MaxPause time.Duration
	// CacheIsolation says which requests share cached prompt prefixes;
	// "" means CacheIsolationNone.
	CacheIsolation CacheIsolation
	// MetricsPublic lets callers that are not admin read /metrics (by
	// default only an admin may, once the server has keys).
	MetricsPublic bool
	// Limits bound what a request may ask; zero fields mean
	// DefaultLimits.
	Limits Limits
	// ToolRepair is how many times a whole answer's tool call that does
	// not parse or breaks its schema is written again (corral serve's
	// --tool-repair; see repair.go): 0 means DefaultToolRepair, a
	// negative value none.
	ToolRepair int
}

// API serves the models of a registry. Its handler methods are safe for
// concurrent use.
type API struct {
	models         *Registry
	limits         Limits
	paced          pacedStreams // paced chat streams being served, by response id
	log            *slog.Logger
	metrics        *metrics
	metricsHandler http.Handler
	maxPause       time.Duration
	isolation      CacheIsolation
	metricsPublic  bool
	toolRepair     int // repairs of a failed tool call at most; 0: none
}

// New returns an API serving models.
func New(models *Registry, opt Options) *API {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	x := newMetrics(models)
	a := &API{models: models, limits: opt.Limits.WithDefaults(), log: log, metrics: x, metricsHandler: x.handler(log),
		maxPause: opt.MaxPause, isolation: opt.CacheIsolation, metricsPublic: opt.MetricsPublic}
	if a.maxPause <= 0 {
		a.maxPause = DefaultMaxPause
	}
	if a.isolation == "" {
		a.isolation = CacheIsolationNone
	}
	switch a.toolRepair = opt.ToolRepair; {
	case a.toolRepair == 0:
		a.toolRepair = DefaultToolRepair
	case a.toolRepair < 0:
		a.toolRepair = 0
	}
	return a
}

// MetricsPublic reports whether /metrics answers callers that are not
// admin (Options.MetricsPublic): the server's gate then lets a request
// for it through without a key.
func (a *API) MetricsPublic() bool { return a.metricsPublic }

// ForEngine returns an API serving one engine, already loaded, under any
// model name: a registry of one pinned model (a request's keep_alive does
// not unload it). Closing the API's
// registry (Registry().Close()) closes eng.
func ForEngine(eng model.Engine, opt model.Options) (*API, error) {
	m, err := model.New(eng, opt)
	if err != nil {
		return nil, err
	}
	// Pinned: the loader cannot load eng again once it is closed.
	spec := registry.Spec{ID: m.Info().Name, Engine: engine.Config{ModelPath: m.Info().Path}, Pinned: true}
	reg, err := registry.New(registry.Config{Logger: opt.Logger}, []registry.Spec{spec},
		func(context.Context, registry.Spec) (*model.Model, error) { return m, nil })
	if err != nil {
		return nil, err
	}
	l, err := reg.Acquire(context.Background(), "")
	if err != nil {
		return nil, err
	}
	l.Release()
	return New(reg, Options{Logger: opt.Logger}), nil
}

// Registry is the registry of models the API serves.
func (a *API) Registry() *Registry { return a.models }

// Logger is the API's logger (Options.Logger).
func (a *API) Logger() *slog.Logger { return a.log }

// acquire leases the model a request names, loading it if need be. keep
// is the request's keep_alive, nil when absent.
//
// keep_alive loads and unloads models for everyone: only an admin caller
// may set it (403 otherwise).
func (a *API) acquire(ctx context.Context, name string, keep *KeepAlive) (*Lease, *Error) {
	if keep != nil && !gate.FromContext(ctx).Admin() {
		return nil, &Error{Status: http.StatusForbidden, Type: TypeInvalidRequest, Param: "keep_alive", Code: "admin_required",
			Message: "keep_alive loads and unloads models for every client: it needs an admin API key"}
	}
	l, err := a.models.Acquire(ctx, name)
	if err != nil {
		e := modelError(err)
		var load *registry.LoadError
		if errors.As(err, &load) && !gate.FromContext(ctx).Admin() {
			e.Message = loadFailed(load.ID)
		}
		return nil, e
	}
	if keep != nil {
		l.SetKeepAlive(keep.Duration)
	}
	return l, nil
}

// modelError maps an error from Registry.Acquire to an API error.
func modelError(err error) *Error {
	var (
		unknown  *registry.UnknownModelError
		tooLarge *registry.TooLargeError
		busy     *registry.BusyError
		load     *registry.LoadError
	)
	switch {
	case errors.As(err, &unknown):
		return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Param: "model", Code: "model_not_found", Message: err.Error()}
	case errors.As(err, &tooLarge):
		// Not a 5xx: retrying cannot help, and SDKs retry 5xx.
		return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: "model", Code: "model_too_large", Message: err.Error()}
	case errors.As(err, &busy):
		return &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Code: "model_busy", Message: err.Error()}
	case errors.As(err, &load):
		return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Code: "model_load_failed", Message: err.Error()}
	case errors.Is(err, registry.ErrDraining):
		return &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Code: "unavailable", Message: "the server is shutting down"}
	}
	return submitError(err, "")
}

// newID returns a fresh response id such as "chatcmpl-…".
func newID(prefix string) string {
	return prefix + strings.ToLower(rand.Text())
}
