package registry

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// Lease is a request's hold on a loaded model: the model is not unloaded
// while a lease on it is held.
type Lease[M Model] struct {
	r         *Registry[M]
	e         *entry[M]
	model     M
	keepAlive *time.Duration // set by SetKeepAlive
	once      sync.Once
}

// Model is the leased model.
func (l *Lease[M]) Model() M { return l.model }

// ID is the leased model's id.
func (l *Lease[M]) ID() string { return l.e.spec.ID }

// SetKeepAlive sets how long the model stays loaded once idle after this
// request (Ollama's keep_alive): 0 unloads it when this request ends if no
// other holds it, negative keeps it loaded. The request that ends last
// decides; one that set nothing restores the model's default.
func (l *Lease[M]) SetKeepAlive(d time.Duration) { l.keepAlive = &d }

// Release gives the lease back. Safe to call more than once.
func (l *Lease[M]) Release() {
	l.once.Do(func() {
		l.r.mu.Lock()
		l.r.release(l.e, l.keepAlive)
		l.r.mu.Unlock()
	})
}

// release gives back a lease on e, setting its keep-alive to keepAlive,
// or to its default when keepAlive is nil. r.mu is held.
func (r *Registry[M]) release(e *entry[M], keepAlive *time.Duration) {
	e.leases--
	e.lastUsed = time.Now()
	e.keepAlive = e.defaultKeepAlive
	if keepAlive != nil {
		e.keepAlive = *keepAlive
	}
	if e.leases == 0 && e.state == StateLoaded {
		r.idle(e)
	}
}

// Status describes one model.
type Status[M Model] struct {
	ID    string
	Path  string
	State State
	// Need is the host memory reserved while loaded, in bytes: the
	// reservation of a model not unloaded, else its best placement's.
	Need int64
	// Devices is the memory reserved on each device the same way, by
	// device name; nil for a model on the host only.
	Devices map[string]int64
	// GPULayers is the -ngl of that placement (llama.GPULayersAll,
	// GPULayersAuto, or a count).
	GPULayers int
	// Requests is the number of leases held.
	Requests int
	// InMemory reports whether the model is loaded and runs requests (an
	// evicted one among them, whose State is already "unloading").
	InMemory bool
	// Model is the loaded model, the zero M when not in memory. It may be
	// unloaded at any moment: use only what stays safe after Close.
	Model M
	// LoadedAt is when the current load finished; ExpiresAt when an idle
	// model unloads (zero: in use, or kept forever).
	LoadedAt, ExpiresAt time.Time
	// LastLoad and LastUnload are how long the last load and unload took.
	LastLoad, LastUnload time.Duration
	// Loads counts the loads that succeeded.
	Loads int
	// Err is the last load's error, nil after a success.
	Err error
}

// Status describes every model, the default first.
func (r *Registry[M]) Status() []Status[M] {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Status[M], len(r.entries))
	for i, e := range r.entries {
		state := e.state
		if e.evicting {
			state = StateUnloading // it takes no new requests
		}
		p := e.placed
		if e.state == StateUnloaded {
			p = e.places[0]
		}
		out[i] = Status[M]{ID: e.spec.ID, Path: e.spec.Engine.ModelPath, State: state, Need: p.Host,
			Devices: maps.Clone(p.Devices), GPULayers: p.Offload.GPULayers,
			Requests: e.leases, LoadedAt: e.loadedAt, ExpiresAt: e.expires, LastLoad: e.lastLoad,
			LastUnload: e.lastUnload, Loads: e.loads, Err: e.lastErr}
		if e.state == StateLoaded {
			out[i].InMemory, out[i].Model = true, e.model
		}
	}
	return out
}

// Waiting is the number of requests waiting for memory.
func (r *Registry[M]) Waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue)
}

// Spec returns the spec of the model name names (see Acquire for names).
func (r *Registry[M]) Spec(name string) (Spec, error) {
	e, err := r.lookup(name)
	if err != nil {
		return Spec{}, err
	}
	return e.spec, nil
}

// Loaded returns the models in memory with their status; see Status.Model.
func (r *Registry[M]) Loaded() []Status[M] {
	return slices.DeleteFunc(r.Status(), func(s Status[M]) bool { return !s.InMemory })
}
