package registry

import (
	"context"
	"runtime"
	"testing"
)

// A request waiting for a load that succeeds just as Close runs gets the
// loaded model (closed by then), never a lease on no model. (The race
// window is narrow: 200 tries, on one P, found it every time before the
// fix.)
func TestLoadRacingClose(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	nilModels := 0
	for range 200 {
		fl := newFakeLoader(t, 0)
		fl.gate = make(chan struct{}, 1)
		r, _ := New(Config{KeepAlive: -1}, specs(10, "a"), fl.load)
		got := make(chan *Lease[*fakeModel], 1)
		go func() {
			l, err := r.Acquire(context.Background(), "a")
			if err != nil {
				got <- nil
				return
			}
			got <- l
		}()
		waitUntil(t, "the request to wait for the load", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			e := r.byID["a"]
			return e.loading != nil && e.loading.waiters == 1
		})
		fl.gate <- struct{}{} // the load succeeds...
		r.Close()             // ...while the server shuts down
		if l := <-got; l != nil {
			if l.Model() == nil {
				nilModels++
			}
			l.Release()
		}
	}
	if nilModels > 0 {
		t.Errorf("%d/200 Acquire calls returned a nil error and a lease whose Model() is nil", nilModels)
	}
}

// A waiter that gives up spares only the models evicted for it: when it
// was not the one that may take memory, the eviction made for the first
// stays.
func TestLeavingWaiterKeepsOthersEvictions(t *testing.T) {
	r, _ := newRegistry(t, Config{Budget: 15, KeepAlive: -1}, specs(10, "a", "b", "c"))
	a := acquire(t, r, "a")
	bl := acquireLater(r, context.Background(), "b")
	waitUntil(t, "b's request to evict a", func() bool { return state(r, "a") == StateUnloading })
	ctx, cancel := context.WithCancel(context.Background())
	cerr := acquireLater(r, ctx, "c")
	waitUntil(t, "c's request to wait", func() bool { return r.Waiting() == 2 })
	cancel()
	<-cerr
	if s := state(r, "a"); s != StateUnloading {
		t.Fatalf("a is %s after c's request left; want still evicted for b's", s)
	}
	a.Release()
	mustGet(t, <-bl).Release()
}
