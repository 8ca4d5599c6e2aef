// Package serving is the dialect-neutral core of corral's HTTP APIs: the
// limits a request is checked against, the lease of the model it names,
// its admission (priority, pause, cache salt), the typed Request every
// dialect translates its body into and the engine request Core.Build
// makes of it (messages, tools, tool choice, grammar, reasoning, sampling),
// the generation loop and the repair of broken tool calls, the Prometheus
// metrics and the request log. Dialect packages (openai, anthropic,
// responses, ollama, llamacpp) translate their wire shapes to and from
// it: each handler is one call of Handle, and each dialect frames its
// answers through an Encoder and its errors through an ErrorWriter.
//
// A dialect plugs in with: a body type that is a Body (Check refuses
// what no model serves and translates the body into a Request, before
// the model loads; Lease names the model); handlers of the form
// func(*Core, http.ResponseWriter, *http.Request) that call Handle with
// the dialect's ErrorWriter and a serve function, which calls Core.Build
// for the leased model, sets the stream's Framing, and answers with
// Core.Generate and the dialect's Encoder; and a Routes function the
// server adds to its own.
//
// A cross-dialect field is added once, to Request (and Build, where the
// engine takes it), and then by one line in each dialect's translation
// that exposes it.
package serving

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

// Registry holds the models a Core serves (see package registry).
type Registry = registry.Registry[*model.Model]

// Lease is a request's hold on a loaded model.
type Lease = registry.Lease[*model.Model]

// Options configure a Core.
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
	// ToolRepair is how many times an answer's tool call (whole or
	// streamed) that does not parse or breaks its schema is written
	// again (corral serve's --tool-repair; see repair.go and
	// streamrepair.go): 0 means DefaultToolRepair, a negative value none.
	ToolRepair int
	// KVEvents, when set, is the publisher of the engines' KV events,
	// whose counters /metrics shows.
	KVEvents KVEventCounter
}

// KVEventCounter counts the batches of KV events published, those a
// subscriber missed, and the subscribers connected
// (*kvevents.Publisher is one).
type KVEventCounter interface {
	Published() uint64
	Dropped() uint64
	Subscribers() int
}

// Core serves the models of a registry to the dialects. Its methods are
// safe for concurrent use.
type Core struct {
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
	media          mediaBudget
}

// New returns a Core serving models.
func New(models *Registry, opt Options) *Core {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	x := newMetrics(models)
	if opt.KVEvents != nil {
		x.kvEvents(opt.KVEvents)
	}
	a := &Core{models: models, limits: opt.Limits.WithDefaults(), log: log, metrics: x, metricsHandler: x.handler(log),
		maxPause: opt.MaxPause, isolation: opt.CacheIsolation, metricsPublic: opt.MetricsPublic}
	if a.maxPause <= 0 {
		a.maxPause = DefaultMaxPause
	}
	a.media = newMediaBudget(a.limits.MaxMediaMemory)
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
func (c *Core) MetricsPublic() bool { return c.metricsPublic }

// ForEngine returns a Core serving one engine, already loaded, under any
// model name: a registry of one pinned model (a request's keep_alive does
// not unload it). Closing the Core's
// registry (Registry().Close()) closes eng.
func ForEngine(eng model.Engine, opt model.Options) (*Core, error) {
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

// Registry is the registry of models the Core serves.
func (c *Core) Registry() *Registry { return c.models }

// Logger is the Core's logger (Options.Logger).
func (c *Core) Logger() *slog.Logger { return c.log }

// Acquire leases the model a request names, loading it if need be. keep
// is the request's keep_alive, nil when absent.
//
// keep_alive loads and unloads models for everyone: only an admin caller
// may set it (403 otherwise).
func (c *Core) Acquire(ctx context.Context, name string, keep *KeepAlive) (*Lease, *Error) {
	if keep != nil && !gate.FromContext(ctx).Admin() {
		return nil, &Error{Status: http.StatusForbidden, Param: "keep_alive", Code: "admin_required",
			Message: "keep_alive loads and unloads models for every client: it needs an admin API key"}
	}
	l, err := c.models.Acquire(ctx, name)
	if err != nil {
		e := ModelError(err)
		var load *registry.LoadError
		if errors.As(err, &load) && !gate.FromContext(ctx).Admin() {
			e.Message = LoadFailed(load.ID)
		}
		return nil, e
	}
	if keep != nil {
		l.SetKeepAlive(keep.Duration)
	}
	return l, nil
}

// ModelError maps an error from Registry.Acquire to an API error.
func ModelError(err error) *Error {
	var (
		unknown  *registry.UnknownModelError
		tooLarge *registry.TooLargeError
		busy     *registry.BusyError
		load     *registry.LoadError
	)
	switch {
	case errors.As(err, &unknown):
		return &Error{Status: http.StatusNotFound, Param: "model", Code: "model_not_found", Message: err.Error()}
	case errors.As(err, &tooLarge):
		// Not a 5xx: retrying cannot help, and SDKs retry 5xx.
		return &Error{Status: http.StatusBadRequest, Param: "model", Code: "model_too_large", Message: err.Error()}
	case errors.As(err, &busy):
		return &Error{Status: http.StatusServiceUnavailable, Code: "model_busy", Message: err.Error()}
	case errors.As(err, &load):
		return &Error{Status: http.StatusInternalServerError, Code: "model_load_failed", Message: err.Error()}
	case errors.Is(err, registry.ErrDraining):
		return &Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "the server is shutting down"}
	}
	return SubmitError(err, "")
}

// NewID returns a fresh response id such as "chatcmpl-…".
func NewID(prefix string) string {
	return prefix + strings.ToLower(rand.Text())
}

// Status finds the model a monitoring request names (see
// Registry.Acquire for names) without loading it.
func (c *Core) Status(name string) (registry.Status[*model.Model], *Error) {
	spec, err := c.models.Spec(name)
	if err != nil {
		return registry.Status[*model.Model]{}, ModelError(err)
	}
	for _, st := range c.models.Status() {
		if st.ID == spec.ID {
			return st, nil
		}
	}
	panic("serving: a spec without a status")
}
