// Package registry keeps the models a server knows and loads them on
// demand under a memory budget: one engine (one scheduler goroutine owning
// its context, KV cache and slots) per loaded model.
//
// A request leases the model it names (Acquire); a model with no lease is
// idle, unloads after its keep-alive, and is the first evicted, least
// recently used first, when another model needs its memory. Each model's
// need is estimated before loading and reserved in a Budget with one
// atomic compare-and-swap. The registry's mutex guards only the models'
// state fields for a few instructions at a time: it is never held while a
// model loads, runs or unloads, and requests waiting for a load park on a
// channel, not an OS thread.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/corral-llm/corral/engine"
)

// Defaults for zero Config fields.
const (
	DefaultKeepAlive  = 5 * time.Minute
	DefaultMaxWaiting = 64
	DefaultMaxWait    = time.Minute
)

// Model is a loaded model as the registry holds it.
type Model interface {
	// Drain fails queued work and refuses new work; running work goes on.
	Drain()
	// Close frees the model. The registry calls it once per load.
	Close() error
}

// Loader loads the model spec describes. It should stop and return ctx's
// error when ctx ends (at Close).
type Loader[M Model] func(ctx context.Context, spec Spec) (M, error)

// Spec describes one model the registry may load.
type Spec struct {
	// ID is the model's name in requests.
	ID string
	// Engine configures its engine; Engine.ModelPath is the GGUF file.
	Engine engine.Config
	// ChatTemplate names a built-in chat template to use instead of the
	// model's own ("" for the model's).
	ChatTemplate string
	// ChatTemplateFile is a Jinja chat template file to use instead of the
	// model's own ("" for none); at most one of ChatTemplate and
	// ChatTemplateFile is set.
	ChatTemplateFile string
	// ChatTemplateKwargs is a JSON object of chat template variables
	// every request to the model gets (nil for none).
	ChatTemplateKwargs json.RawMessage
	// ChatTemplateMutable lets the chat template change lists and dicts
	// in place (see model.Options).
	ChatTemplateMutable bool
	// ToolFormat names the tool-call format (see toolcall.Names) to read
	// instead of the one the chat template implies ("" for that one).
	ToolFormat string
	// ReasoningFormat and ReasoningBudget say how the model's reasoning
	// is read and bounded (see model.Options).
	ReasoningFormat string
	ReasoningBudget *int
	// KeepAlive is how long the model stays loaded while idle; nil means
	// Config.KeepAlive. 0 unloads it as soon as it is idle, negative never.
	KeepAlive *time.Duration
	// Need is the memory reserved while the model is loaded, in bytes.
	// New fills it with Config.Estimate when it is 0 (and with the first
	// placement's host part when there are Placements).
	Need int64
	// Placements are the ways the model may load when it may use
	// devices, best first: Acquire reserves the first that fits. New
	// fills them with Config.Place when they are nil and there are
	// Config.Devices; none means Need on the host, with Engine.Offload.
	Placements []Placement
	// Pinned keeps the model loaded once it is: it is never evicted, and
	// its keep-alive (a request's too) does not apply.
	Pinned bool
}

// Config configures a Registry.
type Config struct {
	// Budget is the memory models may reserve together, in bytes; 0 or
	// less is unlimited.
	Budget int64
	// KeepAlive is how long an idle model stays loaded: 0 unloads it as
	// soon as its last request ends, negative never. A request may change
	// it for the time after it ends (Lease.SetKeepAlive).
	KeepAlive time.Duration
	// MaxWaiting bounds the requests waiting for memory, when no idle
	// model can be evicted; more fail at once. Default DefaultMaxWaiting.
	MaxWaiting int
	// MaxWait bounds how long such a request waits. Default DefaultMaxWait.
	MaxWait time.Duration
	// StrictNames refuses a model name that is not a known id even when
	// only one model is served (by default, with one model, any name is
	// served by it, as llama-server does).
	StrictNames bool
	// Estimate returns a spec's memory need when its Need is 0; nil leaves
	// it 0.
	Estimate func(Spec) (int64, error)
	// Devices are the GPUs whose memory is accounted, each under its own
	// budget beside Budget (the host's).
	Devices []Device
	// Place returns a spec's placements over Devices (see
	// Spec.Placements) when it has none; nil, or no placement, leaves the
	// model on the host.
	Place func(Spec, []Device) ([]Placement, error)
	// Logger receives load, unload and eviction events; nil means
	// slog.Default().
	Logger *slog.Logger
}

// State is a model's place in its life cycle.
type State string

// The states of a model.
const (
	StateUnloaded  State = "unloaded"
	StateLoading   State = "loading"
	StateLoaded    State = "loaded"
	StateUnloading State = "unloading"
)

// Registry holds the models. Its methods are safe for concurrent use.
type Registry[M Model] struct {
	cfg     Config
	log     *slog.Logger
	load    Loader[M]
	budget  *Budget
	devices map[string]*Budget // by device name
	// deviceOrder are the devices' names in Config.Devices' order.
	deviceOrder []string
	entries     []*entry[M] // in the order given; the first is the default
	byID        map[string]*entry[M]

	ctx    context.Context // loads run under it; Close cancels it
	cancel context.CancelFunc
	wg     sync.WaitGroup // loads and unloads in flight

	closeOnce sync.Once
	closeErr  error

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced when memory may have become available
	queue    []*waiter[M]  // requests waiting for memory, in arrival order
	draining bool
	closed   bool
}

// entry is one model. Fields below mu are guarded by Registry.mu.
type entry[M Model] struct {
	spec             Spec
	defaultKeepAlive time.Duration // the spec's, else Config's
	keepAlive        time.Duration // the last request's, else the default

	state    State
	model    M           // valid while loaded or unloading
	leases   int         // requests holding it
	lastUsed time.Time   // when a lease was last taken or given back
	expires  time.Time   // when it unloads if still idle; zero: not scheduled
	timer    *time.Timer // the keep-alive timer
	gen      uint64      // load count: a timer of an earlier load does nothing
	loading  *attempt[M] // while loading
	evicting bool        // loaded, taking no new requests, to unload when idle

	estimateErr error          // why Config.Estimate failed: requests fail with it
	tooLarge    *TooLargeError // no placement fits the whole budgets: requests fail with it

	places []Placement // the ways it may load, best first; never empty
	placed Placement   // the one reserved, while not unloaded

	loadedAt   time.Time
	lastLoad   time.Duration
	lastUnload time.Duration
	loads      int
	lastErr    error
}

// attempt is one load; the requests that wait for it are counted so that
// their leases are taken the moment it succeeds, before an eviction can
// see the model idle.
type attempt[M Model] struct {
	done    chan struct{}
	err     error // set before done closes
	model   M     // set before done closes: the leases' model, even if Close follows
	waiters int
}

// New returns a registry of specs, none loaded. It estimates each spec's
// need with cfg.Estimate and warns about a model larger than the whole
// budget (requests for it fail with ErrTooLarge).
func New[M Model](cfg Config, specs []Spec, load Loader[M]) (*Registry[M], error) {
	if len(specs) == 0 {
		return nil, errors.New("registry: no models")
	}
	if cfg.MaxWaiting <= 0 {
		cfg.MaxWaiting = DefaultMaxWaiting
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	r := &Registry[M]{cfg: cfg, log: cfg.Logger, load: load, budget: NewBudget(cfg.Budget),
		devices: make(map[string]*Budget), byID: make(map[string]*entry[M]), changed: make(chan struct{})}
	if r.log == nil {
		r.log = slog.Default()
	}
	for _, d := range cfg.Devices {
		if _, dup := r.devices[d.Name]; dup || d.Name == "" {
			return nil, fmt.Errorf("registry: device %q given twice or unnamed", d.Name)
		}
		r.devices[d.Name] = NewBudget(d.Budget)
		r.deviceOrder = append(r.deviceOrder, d.Name)
	}
	for _, s := range specs {
		if s.ID == "" {
			return nil, fmt.Errorf("registry: model %s has no id", s.Engine.ModelPath)
		}
		if _, dup := r.byID[s.ID]; dup {
			return nil, fmt.Errorf("registry: two models are named %q", s.ID)
		}
		var estimateErr error
		if s.Placements == nil && cfg.Place != nil && len(cfg.Devices) > 0 {
			ps, err := cfg.Place(s, cfg.Devices)
			if err != nil {
				r.log.Warn("cannot place the model on the devices; requests for it will fail", "model", s.ID, "err", err)
				estimateErr = fmt.Errorf("place it on the devices: %w", err)
			}
			s.Placements = ps
		}
		if len(s.Placements) > 0 {
			s.Need = s.Placements[0].Host
		} else if s.Need == 0 && cfg.Estimate != nil {
			need, err := cfg.Estimate(s)
			switch {
			case err == nil:
				s.Need = need
			case r.budget.Unlimited():
				r.log.Warn("cannot estimate the model's memory; with no budget it loads anyway", "model", s.ID, "err", err)
			default:
				r.log.Warn("cannot estimate the model's memory; requests for it will fail", "model", s.ID, "err", err)
				estimateErr = fmt.Errorf("estimate its memory: %w", err)
			}
		}
		e := &entry[M]{spec: s, defaultKeepAlive: cfg.KeepAlive, state: StateUnloaded, estimateErr: estimateErr, lastErr: estimateErr}
		if s.KeepAlive != nil {
			e.defaultKeepAlive = *s.KeepAlive
		}
		e.keepAlive = e.defaultKeepAlive
		places := s.Placements
		if len(places) == 0 {
			places = []Placement{{Host: s.Need, Offload: s.Engine.Offload}}
		}
		for _, p := range places {
			if r.tooLarge(s.ID, p) == nil {
				e.places = append(e.places, p)
			}
		}
		if len(e.places) == 0 {
			e.places, e.tooLarge = places[:1], r.tooLarge(s.ID, places[0])
			r.log.Warn("model is larger than the memory budget; requests for it will fail",
				"model", s.ID, "err", e.tooLarge)
		}
		e.spec.Need = e.places[0].Host
		e.placed = e.places[0]
		r.entries = append(r.entries, e)
		r.byID[s.ID] = e
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// Budget is the registry's memory budget.
func (r *Registry[M]) Budget() *Budget { return r.budget }

// IDs are the known model ids, the default first.
func (r *Registry[M]) IDs() []string {
	ids := make([]string, len(r.entries))
	for i, e := range r.entries {
		ids[i] = e.spec.ID
	}
	return ids
}

// lookup finds the model a request names. "" names the default (the first
// model); so does any name when only one model is served, unless
// Config.StrictNames. Ollama's ":latest" tag is ignored.
func (r *Registry[M]) lookup(name string) (*entry[M], error) {
	if name == "" {
		return r.entries[0], nil
	}
	if e, ok := r.byID[name]; ok {
		return e, nil
	}
	if e, ok := r.byID[strings.TrimSuffix(name, ":latest")]; ok {
		return e, nil
	}
	if len(r.entries) == 1 && !r.cfg.StrictNames {
		return r.entries[0], nil
	}
	return nil, &UnknownModelError{Name: name, Known: r.IDs()}
}

// Acquire leases the model name names, loading it first if it is not
// loaded: concurrent requests for an unloaded model start one load and
// wait for it. A model that does not fit in the budget makes room (see
// makeRoom) and waits for it. Requests waiting for memory queue in
// arrival order, and of those whose model is unloaded only the first may
// take memory, so that the requests of a model just evicted cannot take
// back what it freed; at most Config.MaxWaiting wait at once, each for at
// most Config.MaxWait, then fail with a *BusyError. The caller must
// Release the lease.
func (r *Registry[M]) Acquire(ctx context.Context, name string) (*Lease[M], error) {
	e, err := r.lookup(name)
	if err != nil {
		return nil, err
	}
	if e.estimateErr != nil {
		return nil, &LoadError{ID: e.spec.ID, Err: e.estimateErr}
	}
	if e.tooLarge != nil {
		return nil, e.tooLarge
	}
	var (
		w        *waiter[M]       // this request's place in the queue, once it waits
		deadline <-chan time.Time // set with w
	)
	for {
		r.mu.Lock()
		if r.draining {
			r.leave(w)
			r.mu.Unlock()
			return nil, ErrDraining
		}
		switch e.state {
		case StateLoaded:
			if !e.evicting {
				r.leave(w)
				r.lease(e)
				r.mu.Unlock()
				return &Lease[M]{r: r, e: e, model: e.model}, nil
			}
			// Evicted for another model: wait for it to unload, then
			// load it again.
		case StateLoading:
			r.leave(w)
			return r.awaitLoad(ctx, e)
		case StateUnloaded:
			if first := r.first(); first == nil || first == w {
				if r.reserveAny(e) {
					r.leave(w)
					r.startLoad(e)
					return r.awaitLoad(ctx, e)
				}
				r.makeRoom(e)
			}
		}
		if w == nil {
			if len(r.queue) >= r.cfg.MaxWaiting {
				err := r.busy(e, "too many requests already wait for memory")
				r.mu.Unlock()
				return nil, err
			}
			w = &waiter[M]{e: e}
			r.queue = append(r.queue, w)
			t := time.NewTimer(r.cfg.MaxWait)
			defer t.Stop()
			deadline = t.C
		}
		changed := r.changed
		r.mu.Unlock()
		var err error
		select {
		case <-changed:
			continue
		case <-deadline:
			err = fmt.Errorf("no memory came free within %v", r.cfg.MaxWait)
		case <-ctx.Done():
			err = ctx.Err()
		}
		r.mu.Lock()
		r.leave(w)
		if err != ctx.Err() {
			err = r.busy(e, err.Error())
		}
		r.mu.Unlock()
		return nil, err
	}
}

// waiter is a request's place in the queue for memory.
type waiter[M Model] struct{ e *entry[M] }

// first is the first waiter whose model is unloaded: the one that may take
// memory. Waiters whose model is still unloading (or evicted, waiting for
// its requests to end) come back to it when it is unloaded. r.mu is held.
func (r *Registry[M]) first() *waiter[M] {
	for _, w := range r.queue {
		if w.e.state == StateUnloaded {
			return w
		}
	}
	return nil
}

// leave takes w, when not nil, out of the queue for memory. When w was
// the waiter that may take memory, the models evicted for it are spared
// again (it gave up and needs them no more, or it took memory and got what
// it needed), and the waiters left make room anew. r.mu is held.
func (r *Registry[M]) leave(w *waiter[M]) {
	if w == nil {
		return
	}
	i := slices.Index(r.queue, w)
	if i < 0 {
		return
	}
	wasFirst := r.first() == w
	r.queue = slices.Delete(r.queue, i, i+1)
	if !wasFirst {
		return // the evictions under way were not made for w
	}
	for _, e := range r.entries {
		if e.state == StateLoaded {
			e.evicting = false // (an evicted model unloads at its last lease)
		}
	}
	r.broadcast()
}

// lease takes a lease on loaded e. r.mu is held.
func (r *Registry[M]) lease(e *entry[M]) {
	e.leases++
	e.lastUsed = time.Now()
	e.expires = time.Time{}
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
}

// makeRoom starts freeing the memory want needs, on the host and on the
// devices of one of its placements. When evicting idle models can make
// room for one, it does so for the best such placement, least recently
// used models first. Otherwise it frees room for the best placement as
// far as it can: it unloads idle models, least recently used first, and
// evicts busy ones, least recently used first: an evicted model takes no
// new requests (they wait for it to unload and load again) and unloads
// when its running requests end, so that a model in steady use cannot
// starve the others. A model is evicted only where it holds memory the
// placement lacks, and the eviction stops once that memory will be free
// when the unloads and evictions under way finish, or when nothing more
// can be freed (pinned models stay). r.mu is held.
func (r *Registry[M]) makeRoom(want *entry[M]) {
	var victims []*entry[M]
	for _, p := range want.places {
		if v, ok := r.plan(p, true); ok {
			victims = v
			break
		}
	}
	if victims == nil {
		victims, _ = r.plan(want.places[0], false)
	}
	for _, v := range victims {
		if v.leases == 0 {
			r.startUnload(v, "evicted")
			continue
		}
		v.evicting = true
		r.log.Debug("model evicted; it unloads when its running requests end", "model", v.spec.ID, "requests", v.leases)
	}
}

// busy is the error of a request that found no memory for e. r.mu is held.
func (r *Registry[M]) busy(e *entry[M], why string) error {
	err := &BusyError{ID: e.spec.ID, Need: e.spec.Need, Budget: r.budget.Limit(), Used: r.budget.Used(), Why: why}
	// The first part of the best placement that does not fit now.
	p := e.places[0]
	for _, name := range p.names() {
		if b := r.devices[name]; p.Devices[name] > b.Limit()-b.Used() {
			err.Device, err.Need, err.Budget, err.Used = name, p.Devices[name], b.Limit(), b.Used()
			break
		}
	}
	for _, o := range r.entries {
		if o.state != StateUnloaded {
			h := Holder{ID: o.spec.ID, State: o.state, Need: o.placed.Host, Devices: o.placed.Devices, Requests: o.leases}
			if o.evicting {
				h.State = StateUnloading
			}
			err.Holders = append(err.Holders, h)
		}
	}
	return err
}
