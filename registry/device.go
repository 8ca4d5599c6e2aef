package registry

import (
	"fmt"
	"maps"
	"slices"

	"github.com/corral-llm/corral/llama"
)

// Device is a GPU whose memory the registry accounts (Config.Devices).
type Device struct {
	// Name is ggml's name for it ("Vulkan0"), as --device takes it.
	Name string
	// Budget is the memory models may reserve on it together, in bytes;
	// 0 or less is unlimited.
	Budget int64
	// Free is its free memory as its driver reported it, 0 when unknown:
	// llama.cpp's default proportions when a model spreads over several
	// devices.
	Free int64
}

// Placement is one way to load a model: the memory it reserves on the
// host and on each device while loaded, and the offload that puts it
// there.
type Placement struct {
	// Host is the host memory, in bytes.
	Host int64
	// Devices is the memory on each device, in bytes, by device name;
	// nil for a model on the host only.
	Devices map[string]int64
	// Offload is the engine's offload for this placement: it replaces
	// Spec.Engine.Offload in the spec the Loader gets.
	Offload llama.Offload
}

// hostOnly reports whether p takes no device memory.
func (p Placement) hostOnly() bool { return len(p.Devices) == 0 }

// names are p's devices in name order, so that reservations take the
// budgets in one order.
func (p Placement) names() []string { return slices.Sorted(maps.Keys(p.Devices)) }

// tooLarge returns the error of p exceeding a whole budget, or nil when
// every part fits its budget's limit. r.mu need not be held.
func (r *Registry[M]) tooLarge(id string, p Placement) *TooLargeError {
	if p.Host > r.budget.Limit() {
		return &TooLargeError{ID: id, Need: p.Host, Budget: r.budget.Limit()}
	}
	for _, name := range p.names() {
		b, ok := r.devices[name]
		if !ok {
			return &TooLargeError{ID: id, Device: name, Need: p.Devices[name]}
		}
		if p.Devices[name] > b.Limit() {
			return &TooLargeError{ID: id, Device: name, Need: p.Devices[name], Budget: b.Limit()}
		}
	}
	return nil
}

// reserve takes every part of p from its budget, or none: a part that
// does not fit gives back those already taken. r.mu is held.
func (r *Registry[M]) reserve(p Placement) bool {
	if !r.budget.TryReserve(p.Host) {
		return false
	}
	names := p.names()
	for i, name := range names {
		if !r.devices[name].TryReserve(p.Devices[name]) {
			for _, taken := range names[:i] {
				r.devices[taken].Release(p.Devices[taken])
			}
			r.budget.Release(p.Host)
			return false
		}
	}
	return true
}

// unreserve gives back what reserve took for p. r.mu is held.
func (r *Registry[M]) unreserve(p Placement) {
	for _, name := range p.names() {
		r.devices[name].Release(p.Devices[name])
	}
	r.budget.Release(p.Host)
}

// reserveAny reserves the first of e's placements that fits now and
// records it in e.placed. r.mu is held.
func (r *Registry[M]) reserveAny(e *entry[M]) bool {
	for _, p := range e.places {
		if r.reserve(p) {
			e.placed = p
			return true
		}
	}
	return false
}

// budgetOf returns the budget named name: "" for the host's.
func (r *Registry[M]) budgetOf(name string) *Budget {
	if name == "" {
		return r.budget
	}
	return r.devices[name]
}

// parts lists p's amounts by budget name ("" for the host).
func (p Placement) parts() map[string]int64 {
	m := map[string]int64{"": p.Host}
	for name, n := range p.Devices {
		m[name] += n
	}
	return m
}

// plan chooses the models to evict so that p fits once their unloads
// (and those under way) finish: loaded models, not pinned and not already
// evicted, holding memory where p lacks some; idle ones first, least
// recently used first, then, unless idleOnly, busy ones the same way. It
// reports whether p would fit. r.mu is held.
func (r *Registry[M]) plan(p Placement, idleOnly bool) ([]*entry[M], bool) {
	need := p.parts()
	free := make(map[string]int64, len(need))
	for name := range need {
		b := r.budgetOf(name)
		if b == nil {
			return nil, false
		}
		free[name] = b.Limit() - b.Used()
	}
	freeing := func(e *entry[M]) {
		for name, n := range e.placed.parts() {
			if _, ok := free[name]; ok {
				free[name] += n
			}
		}
	}
	for _, e := range r.entries {
		if e.state == StateUnloading || e.state == StateLoaded && e.evicting {
			freeing(e)
		}
	}
	short := func() []string {
		var s []string
		for name, n := range need {
			if n > free[name] {
				s = append(s, name)
			}
		}
		return s
	}
	var victims []*entry[M]
	for {
		lacking := short()
		if len(lacking) == 0 {
			return victims, true
		}
		var idle, busy *entry[M]
		for _, e := range r.entries {
			if e.state != StateLoaded || e.evicting || e.spec.Pinned || slices.Contains(victims, e) {
				continue
			}
			held := e.placed.parts()
			if !slices.ContainsFunc(lacking, func(name string) bool { return held[name] > 0 }) {
				continue // evicting it frees nothing p lacks
			}
			if e.leases == 0 && (idle == nil || e.lastUsed.Before(idle.lastUsed)) {
				idle = e
			}
			if e.leases > 0 && (busy == nil || e.lastUsed.Before(busy.lastUsed)) {
				busy = e
			}
		}
		v := idle
		if v == nil && !idleOnly {
			v = busy
		}
		if v == nil {
			return victims, false
		}
		victims = append(victims, v)
		freeing(v)
	}
}

// DeviceBudgets are the devices' budgets, by device name.
func (r *Registry[M]) DeviceBudgets() map[string]*Budget { return maps.Clone(r.devices) }

// DeviceNames are the devices the registry accounts, in Config.Devices'
// order.
func (r *Registry[M]) DeviceNames() []string { return slices.Clone(r.deviceOrder) }

// placementText describes p's device parts for a log line.
func placementText(p Placement) string {
	if p.hostOnly() {
		return "host only"
	}
	s := ""
	for i, name := range p.names() {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf("%s=%s", name, FormatBytes(p.Devices[name]))
	}
	return s
}
