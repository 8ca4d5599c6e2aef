package registry

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// startLoad loads e in a goroutine of the registry's, its memory already
// reserved. r.mu is held.
func (r *Registry[M]) startLoad(e *entry[M]) {
	att := &attempt[M]{done: make(chan struct{})}
	e.state, e.loading = StateLoading, att
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		start := time.Now()
		spec := e.spec
		spec.Need, spec.Engine.Offload = e.placed.Host, e.placed.Offload
		m, err := r.load(r.ctx, spec)
		took := time.Since(start)
		r.mu.Lock()
		defer r.mu.Unlock()
		e.loading = nil
		if err != nil {
			e.state, e.lastErr = StateUnloaded, err
			att.err = &LoadError{ID: e.spec.ID, Err: err}
			if r.draining { // stopped by Close, most likely
				att.err = ErrDraining
			}
			r.unreserve(e.placed)
			r.broadcast()
			close(att.done)
			r.log.Error("model load failed", "model", e.spec.ID, "err", err)
			return
		}
		e.state, e.model, e.lastErr = StateLoaded, m, nil
		e.gen++
		e.loads++
		e.loadedAt, e.lastLoad, e.lastUsed = time.Now(), took, time.Now()
		e.leases += att.waiters
		att.model = m
		close(att.done)
		r.broadcast() // a waiter for memory may now evict it
		r.log.Info("model loaded", "model", e.spec.ID, "took", took.Round(time.Millisecond),
			"need", FormatBytes(e.placed.Host), "devices", placementText(e.placed), "budget_used", FormatBytes(r.budget.Used()))
		if r.draining {
			m.Drain()
		}
		if e.leases == 0 {
			r.idle(e)
		}
	}()
}

// awaitLoad waits for e's load in progress and returns a lease on it, taken
// when the load succeeds. r.mu is held on entry and released.
func (r *Registry[M]) awaitLoad(ctx context.Context, e *entry[M]) (*Lease[M], error) {
	att := e.loading
	att.waiters++
	r.mu.Unlock()
	select {
	case <-att.done:
	case <-ctx.Done():
		r.mu.Lock()
		select {
		case <-att.done: // the lease was taken after all: give it back
			if att.err == nil {
				r.release(e, nil)
			}
			r.mu.Unlock()
		default:
			att.waiters--
			r.mu.Unlock()
		}
		return nil, ctx.Err()
	}
	if att.err != nil {
		return nil, att.err
	}
	return &Lease[M]{r: r, e: e, model: att.model}, nil
}

// idle schedules the unload of e, which just lost its last lease, after
// its keep-alive. r.mu is held.
func (r *Registry[M]) idle(e *entry[M]) {
	r.broadcast() // an idle model can be evicted
	switch {
	case r.draining || r.closed || e.spec.Pinned:
	case e.evicting:
		r.startUnload(e, "evicted")
	case e.keepAlive == 0:
		r.startUnload(e, "keep_alive 0")
	case e.keepAlive > 0:
		gen := e.gen
		e.expires = time.Now().Add(e.keepAlive)
		e.timer = time.AfterFunc(e.keepAlive, func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if e.gen == gen && e.state == StateLoaded && e.leases == 0 && !r.draining && !time.Now().Before(e.expires) {
				r.startUnload(e, "idle")
			}
		})
	}
}

// startUnload unloads idle e in a goroutine of the registry's and gives
// its memory back. r.mu is held.
func (r *Registry[M]) startUnload(e *entry[M], why string) {
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	e.state, e.expires = StateUnloading, time.Time{}
	m := e.model
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		start := time.Now()
		m.Drain()
		err := m.Close()
		took := time.Since(start)
		r.mu.Lock()
		defer r.mu.Unlock()
		var zero M
		e.state, e.model, e.lastUnload, e.evicting = StateUnloaded, zero, took, false
		r.unreserve(e.placed)
		r.broadcast()
		log := r.log.Info
		if err != nil {
			log = r.log.Warn
		}
		log("model unloaded", "model", e.spec.ID, "why", why, "took", took.Round(time.Millisecond), "err", err)
	}()
}

// broadcast wakes the requests waiting for memory. r.mu is held.
func (r *Registry[M]) broadcast() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Drain starts the shutdown: requests waiting for memory and new ones fail
// with ErrDraining, and every loaded model drains (its queued requests
// fail, running ones go on). Safe to call more than once.
func (r *Registry[M]) Drain() {
	r.mu.Lock()
	if r.draining {
		r.mu.Unlock()
		return
	}
	r.draining = true
	r.broadcast()
	var loaded []M
	for _, e := range r.entries {
		if e.state == StateLoaded {
			loaded = append(loaded, e.model)
		}
	}
	r.mu.Unlock()
	for _, m := range loaded {
		m.Drain()
	}
}

// Close drains, stops loads in progress, waits for unloads in progress and
// frees every loaded model once. Leases still held keep working only as
// far as a closed model allows (requests on it end with an error). Safe
// to call more than once: every call returns when the first is done.
func (r *Registry[M]) Close() error {
	r.closeOnce.Do(func() { r.closeErr = r.close() })
	return r.closeErr
}

func (r *Registry[M]) close() error {
	r.Drain()
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	r.closed = true
	var loaded []*entry[M]
	for _, e := range r.entries {
		if e.timer != nil {
			e.timer.Stop()
			e.timer = nil
		}
		if e.state == StateLoaded {
			e.state = StateUnloading
			loaded = append(loaded, e)
		}
	}
	r.mu.Unlock()
	var errs []error
	for _, e := range loaded {
		if err := e.model.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", e.spec.ID, err))
		}
		r.mu.Lock()
		var zero M
		e.state, e.model = StateUnloaded, zero
		r.unreserve(e.placed)
		r.mu.Unlock()
	}
	return errors.Join(errs...)
}
