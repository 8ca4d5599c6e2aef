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
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/reasoning"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/toolcall"
)

// Engine is what the API needs from an engine; *engine.Engine satisfies it
// and documents the methods.
type Engine interface {
	Info() engine.ModelInfo
	Submit(ctx context.Context, req engine.Request) (*engine.Stream, error)
	Embed(ctx context.Context, inputs []engine.EmbedInput) (*engine.Embeddings, error)
	Tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error)
	Detokenize(tokens []int32) string
	TokenPiece(tok int32) string
	Slots(ctx context.Context) ([]engine.SlotInfo, error)
	Stats() engine.Stats
	Drain()
	Close() error
}

// Registry holds the models an API serves (see package registry).
type Registry = registry.Registry[*Model]

// Lease is a request's hold on a loaded model.
type Lease = registry.Lease[*Model]

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
func ForEngine(eng Engine, opt ModelOptions) (*API, error) {
	m, err := NewModel(eng, opt)
	if err != nil {
		return nil, err
	}
	// Pinned: the loader cannot load eng again once it is closed.
	spec := registry.Spec{ID: m.info.Name, Engine: engine.Config{ModelPath: m.info.Path}, Pinned: true}
	reg, err := registry.New(registry.Config{Logger: opt.Logger}, []registry.Spec{spec},
		func(context.Context, registry.Spec) (*Model, error) { return m, nil })
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

// ModelOptions configure a Model.
type ModelOptions struct {
	// ChatTemplate names a built-in chat template (see chat.Lookup) used
	// instead of the model's own.
	ChatTemplate string
	// Template, when set, is the chat template, before ChatTemplate and
	// the model's own.
	Template *chat.Template
	// ToolFormat names the tool-call format (see toolcall.Names) to read
	// instead of the one the chat template implies (see
	// toolcall.Detect); "" keeps that one.
	ToolFormat string
	// ReasoningFormat says how the model's reasoning is read: "" (or
	// "auto", or "deepseek" as llama-server names it) splits it off the
	// content in the format the chat template implies (see
	// reasoning.Detect); "none" leaves it inline in the content; a
	// reasoning format's name (see reasoning.Names) splits it in that
	// format.
	ReasoningFormat string
	// ReasoningBudget is the default reasoning budget in tokens (see
	// engine.Reasoning) of requests that set none; nil or negative: no
	// budget.
	ReasoningBudget *int
	// ChatTemplateFile is a Jinja chat template file used instead of the
	// model's own; at most one of ChatTemplate and ChatTemplateFile is set.
	ChatTemplateFile string
	// ChatTemplateKwargs are chat template variables every request gets
	// (see ParseKwargs); a request's own chat_template_kwargs override
	// them one by one.
	ChatTemplateKwargs map[string]json.RawMessage
	// Logger receives warnings; nil means slog.Default().
	Logger *slog.Logger
}

// ReasoningFormats are the values ModelOptions.ReasoningFormat takes
// beside the formats' names.
var ReasoningFormats = []string{"auto", "deepseek", "none"}

// Model is one loaded model as the API serves it: its engine, its chat
// template and the text of its special tokens.
type Model struct {
	eng   Engine
	info  engine.ModelInfo
	tmpl  *chat.Template
	tools toolcall.Format // how the model writes tool calls
	// think is how the model writes its reasoning (nil: it writes none
	// corral knows); split says the reasoning is split off the content.
	think     reasoning.Format
	split     bool
	budget    int                        // the default reasoning budget; negative: none
	closeToks []int32                    // think's Close, tokenized
	show      []int32                    // the special tokens of both formats' markup, output as text
	stops     []string                   // end-of-turn strings
	kwargs    map[string]json.RawMessage // template variables for every request
	bos       string                     // text of the BOS token
	eos       string                     // text of the EOS token
}

// NewModel prepares eng for serving, resolving its chat template: the one
// opt names (a built-in or a file), else the model's, else ChatML. A
// template that does not parse, or cannot render a plain conversation, is
// an error naming the model and the template line: corral never serves a
// model with a template it did not ask for.
func NewModel(eng Engine, opt ModelOptions) (*Model, error) {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	info := eng.Info()
	m := &Model{eng: eng, info: info, kwargs: opt.ChatTemplateKwargs, bos: eng.TokenPiece(info.BOS), eos: eng.TokenPiece(info.EOS)}
	var err error
	switch {
	case opt.Template != nil:
		m.tmpl = opt.Template
	case opt.ChatTemplate != "" && opt.ChatTemplateFile != "":
		return nil, fmt.Errorf("model %s: give a built-in chat template or a chat template file, not both", info.Name)
	case opt.ChatTemplate != "":
		if m.tmpl, err = chat.Lookup(opt.ChatTemplate); err != nil {
			return nil, err // it names the template and the known ones
		}
	case opt.ChatTemplateFile != "":
		src, err := os.ReadFile(opt.ChatTemplateFile)
		if err != nil {
			return nil, fmt.Errorf("model %s: chat template file: %w", info.Name, err)
		}
		if m.tmpl, err = checkedTemplate(string(src), opt.ChatTemplateKwargs); err != nil {
			return nil, fmt.Errorf("model %s: chat template file %s: %w", info.Name, opt.ChatTemplateFile, err)
		}
	case info.ChatTemplate != "":
		if m.tmpl, err = checkedTemplate(info.ChatTemplate, opt.ChatTemplateKwargs); err != nil {
			return nil, fmt.Errorf("model %s: its chat template does not work (replace it with --chat-template NAME or --chat-template-file FILE): %w", info.Name, err)
		}
	default:
		log.Info("model has no chat template; using chatml", "model", info.Name)
		if m.tmpl, err = chat.Lookup("chatml"); err != nil {
			return nil, fmt.Errorf("chat template chatml: %w", err)
		}
	}
	if err := m.formats(opt, log); err != nil {
		return nil, err
	}
	return m, nil
}

// formats resolves the model's tool-call and reasoning formats and what
// the engine needs of them: the special tokens of their markup, and the
// tokens that close a reasoning.
func (m *Model) formats(opt ModelOptions, log *slog.Logger) error {
	src := m.tmpl.Source()
	m.tools = toolcall.Detect(src)
	if opt.ToolFormat != "" {
		f, err := toolcall.Lookup(opt.ToolFormat)
		if err != nil {
			return err
		}
		m.tools = f
	}
	m.think, m.split = reasoning.Detect(src), true
	switch name := opt.ReasoningFormat; name {
	case "", "auto", "deepseek":
	case "none":
		m.split = false
	default:
		f, err := reasoning.Lookup(name)
		if err != nil {
			return fmt.Errorf("%w; or one of %s", err, strings.Join(ReasoningFormats, ", "))
		}
		m.think = f
	}
	m.budget = -1
	if opt.ReasoningBudget != nil {
		m.budget = *opt.ReasoningBudget
	}
	markers := m.tools.Markers()
	if m.think != nil {
		markers = append(markers, m.think.Markers()...)
		toks, err := m.eng.Tokenize(m.think.Close(), false, true)
		if err != nil || len(toks) == 0 || len(toks) > engine.MaxMarker {
			// The budget cannot close this model's reasoning.
			log.Warn("the reasoning's closing marker does not tokenize; no reasoning budget", "model", m.info.Name, "marker", m.think.Close(), "err", err)
		} else {
			m.closeToks = toks
		}
	}
	// The template's end-of-turn stops, but the formats' own markup:
	// gpt-oss ends its analysis with <|end|>, and its answer goes on.
	for _, stop := range m.tmpl.Stops() {
		if !slices.Contains(markers, stop) {
			m.stops = append(m.stops, stop)
		}
	}
	// A marker that is one special token is output as its text.
	for _, mk := range markers {
		toks, err := m.eng.Tokenize(mk, false, true)
		if err == nil && len(toks) == 1 && !slices.Contains(m.show, toks[0]) && m.eng.TokenPiece(toks[0]) == mk {
			m.show = append(m.show, toks[0])
		}
	}
	return nil
}

// checkedTemplate parses a chat template and renders a plain
// conversation with it and the model's template variables, so that a
// broken one fails when its model loads rather than at every request.
func checkedTemplate(src string, kwargs map[string]json.RawMessage) (*chat.Template, error) {
	tmpl, err := chat.Parse(src)
	if err != nil {
		return nil, err
	}
	kw := make(map[string]any, len(kwargs))
	for k, v := range kwargs {
		kw[k] = v
	}
	if err := tmpl.Check(chat.Options{Kwargs: kw}); err != nil {
		return nil, err
	}
	return tmpl, nil
}

// Loader returns the registry loader of Models: an engine for the spec,
// with its chat template; log receives template warnings.
func Loader(log *slog.Logger) registry.Loader[*Model] {
	return func(ctx context.Context, spec registry.Spec) (*Model, error) {
		kwargs, err := ParseKwargs(spec.ChatTemplateKwargs)
		if err != nil {
			return nil, fmt.Errorf("model %s: chat template kwargs: %w", spec.ID, err)
		}
		cfg := spec.Engine
		if cfg.Name == "" {
			cfg.Name = spec.ID
		}
		eng, err := engine.New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		m, err := NewModel(eng, ModelOptions{ChatTemplate: spec.ChatTemplate, ChatTemplateFile: spec.ChatTemplateFile,
			ChatTemplateKwargs: kwargs, ToolFormat: spec.ToolFormat,
			ReasoningFormat: spec.ReasoningFormat, ReasoningBudget: spec.ReasoningBudget, Logger: log})
		if err != nil {
			eng.Close()
			return nil, err
		}
		return m, nil
	}
}

// Engine is the model's engine.
func (m *Model) Engine() Engine { return m.eng }

// Info describes the model.
func (m *Model) Info() engine.ModelInfo { return m.info }

// Drain stops the engine admitting requests (see engine.Engine.Drain).
func (m *Model) Drain() { m.eng.Drain() }

// Close frees the engine.
func (m *Model) Close() error { return m.eng.Close() }

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
