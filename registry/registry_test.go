package registry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/corral-llm/corral/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The registry's logic (leases, budget, eviction, keep-alive, single
// loads) is tested here over fake models; the end-to-end tests (e2e/) run
// it over real engines.

// fakeModel is a loaded fake.
type fakeModel struct {
	id      string
	need    int64
	devs    map[string]int64 // its placement's device parts
	offload []string         // the devices its spec offloaded to
	fl      *fakeLoader
	drained atomic.Bool
	closed  chan struct{}
	once    sync.Once
}

func (m *fakeModel) Drain() { m.drained.Store(true) }

func (m *fakeModel) Close() error {
	closedTwice := true
	m.once.Do(func() {
		closedTwice = false
		m.fl.mu.Lock()
		m.fl.live[m.id]--
		m.fl.liveBytes -= m.need
		for d, n := range m.devs {
			m.fl.devLive[d] -= n
		}
		m.fl.mu.Unlock()
		close(m.closed)
	})
	if closedTwice {
		m.fl.t.Errorf("model %s closed twice", m.id)
	}
	return nil
}

// fakeLoader loads fake models and checks that no model is loaded twice
// at once and that the loaded models never exceed the budget.
type fakeLoader struct {
	t      *testing.T
	budget int64
	gate   chan struct{} // when not nil, each load waits for a value
	fail   map[string]error

	mu        sync.Mutex
	loads     map[string]int
	live      map[string]int
	liveBytes int64
	devBudget map[string]int64 // the devices' budgets (absent: unlimited)
	devLive   map[string]int64 // bytes the loaded models take on each device
	last      map[string]*fakeModel
}

func newFakeLoader(t *testing.T, budget int64) *fakeLoader {
	return &fakeLoader{t: t, budget: budget, fail: map[string]error{}, loads: map[string]int{}, live: map[string]int{}, last: map[string]*fakeModel{},
		devBudget: map[string]int64{}, devLive: map[string]int64{}}
}

func (fl *fakeLoader) load(ctx context.Context, spec Spec) (*fakeModel, error) {
	if fl.gate != nil {
		select {
		case <-fl.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if err := fl.fail[spec.ID]; err != nil {
		return nil, err
	}
	fl.loads[spec.ID]++
	fl.live[spec.ID]++
	fl.liveBytes += spec.Need
	if fl.live[spec.ID] > 1 {
		fl.t.Errorf("model %s loaded twice at once", spec.ID)
	}
	if fl.budget > 0 && fl.liveBytes > fl.budget {
		fl.t.Errorf("loaded models take %d bytes, over the budget of %d", fl.liveBytes, fl.budget)
	}
	m := &fakeModel{id: spec.ID, need: spec.Need, fl: fl, closed: make(chan struct{}), offload: spec.Engine.Offload.Devices}
	// The placement the registry reserved: the one whose offload the
	// spec carries.
	for _, p := range spec.Placements {
		if slices.Equal(p.Offload.Devices, spec.Engine.Offload.Devices) && p.Host == spec.Need {
			m.devs = p.Devices
			break
		}
	}
	for d, n := range m.devs {
		fl.devLive[d] += n
		if b, ok := fl.devBudget[d]; ok && fl.devLive[d] > b {
			fl.t.Errorf("loaded models take %d bytes of %s, over its budget of %d", fl.devLive[d], d, b)
		}
	}
	fl.last[spec.ID] = m
	return m, nil
}

func (fl *fakeLoader) count(id string) (loads, live int) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.loads[id], fl.live[id]
}

func (fl *fakeLoader) model(id string) *fakeModel {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.last[id]
}

func specs(need int64, ids ...string) []Spec {
	var out []Spec
	for _, id := range ids {
		out = append(out, Spec{ID: id, Engine: engine.Config{ModelPath: id + ".gguf"}, Need: need})
	}
	return out
}

func newRegistry(t *testing.T, cfg Config, ss []Spec) (*Registry[*fakeModel], *fakeLoader) {
	t.Helper()
	fl := newFakeLoader(t, cfg.Budget)
	for _, d := range cfg.Devices {
		if d.Budget > 0 {
			fl.devBudget[d.Name] = d.Budget
		}
	}
	r, err := New(cfg, ss, fl.load)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
		if u := r.Budget().Used(); u != 0 {
			t.Errorf("after Close %d bytes stay reserved", u)
		}
		for d, b := range r.DeviceBudgets() {
			if u := b.Used(); u != 0 {
				t.Errorf("after Close %d bytes of %s stay reserved", u, d)
			}
		}
		for id, n := range fl.live {
			if n != 0 {
				t.Errorf("after Close model %s is loaded %d times", id, n)
			}
		}
	})
	return r, fl
}

func acquire(t *testing.T, r *Registry[*fakeModel], name string) *Lease[*fakeModel] {
	t.Helper()
	l, err := r.Acquire(context.Background(), name)
	if err != nil {
		t.Fatalf("acquire %q: %v", name, err)
	}
	return l
}

// acquired is the outcome of acquireLater.
type acquired struct {
	l   *Lease[*fakeModel]
	err error
}

// acquireLater asks for id in a goroutine; the outcome arrives on the
// channel.
func acquireLater(r *Registry[*fakeModel], ctx context.Context, id string) <-chan acquired {
	c := make(chan acquired, 1)
	go func() {
		l, err := r.Acquire(ctx, id)
		c <- acquired{l, err}
	}()
	return c
}

// mustGet is a's lease, failing t on an error.
func mustGet(t *testing.T, a acquired) *Lease[*fakeModel] {
	t.Helper()
	if a.err != nil {
		t.Fatal(a.err)
	}
	return a.l
}

// waitUntil polls cond (registry state that has no event to wait on),
// failing t after a generous deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func state(r *Registry[*fakeModel], id string) State {
	for _, s := range r.Status() {
		if s.ID == id {
			return s.State
		}
	}
	return ""
}

func TestConcurrentRequestsLoadOnce(t *testing.T) {
	r, fl := newRegistry(t, Config{KeepAlive: -1}, specs(10, "a"))
	fl.gate = make(chan struct{})
	const n = 20
	leases := make(chan *Lease[*fakeModel], n)
	errs := make(chan error, n)
	for range n {
		go func() {
			l, err := r.Acquire(context.Background(), "a")
			if err != nil {
				errs <- err
				return
			}
			leases <- l
		}()
	}
	waitUntil(t, "every request to wait for the load", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		e := r.byID["a"]
		return e.loading != nil && e.loading.waiters == n
	})
	fl.gate <- struct{}{}
	var first *fakeModel
	for range n {
		select {
		case l := <-leases:
			if first == nil {
				first = l.Model()
			} else if l.Model() != first {
				t.Error("two requests got different models")
			}
			defer l.Release()
		case err := <-errs:
			t.Fatal(err)
		}
	}
	if loads, _ := fl.count("a"); loads != 1 {
		t.Errorf("%d loads, want 1", loads)
	}
	if st := r.Status()[0]; st.Requests != n || st.State != StateLoaded {
		t.Errorf("status %+v, want loaded with %d requests", st, n)
	}
}

func TestEvictsLeastRecentlyUsedIdleModel(t *testing.T) {
	r, fl := newRegistry(t, Config{Budget: 25, KeepAlive: -1}, specs(10, "a", "b", "c"))
	acquire(t, r, "a").Release()
	acquire(t, r, "b").Release()
	acquire(t, r, "a").Release() // b is now the least recently used
	c := acquire(t, r, "c")
	defer c.Release()
	if s := state(r, "b"); s != StateUnloaded {
		t.Errorf("b is %s, want unloaded (evicted)", s)
	}
	if s := state(r, "a"); s != StateLoaded {
		t.Errorf("a is %s, want loaded", s)
	}
	if _, live := fl.count("b"); live != 0 {
		t.Errorf("b still loaded %d times", live)
	}
	if u := r.Budget().Used(); u != 20 {
		t.Errorf("%d bytes reserved, want 20", u)
	}
}

func TestBusyModelsMakeRequestWaitThenFail(t *testing.T) {
	r, _ := newRegistry(t, Config{Budget: 15, KeepAlive: -1, MaxWait: 20 * time.Millisecond}, specs(10, "a", "b"))
	a := acquire(t, r, "a")
	_, err := r.Acquire(context.Background(), "b")
	var busy *BusyError
	if !errors.As(err, &busy) || len(busy.Holders) != 1 || busy.Holders[0].ID != "a" || busy.Holders[0].Requests != 1 {
		t.Fatalf("got %v, want a BusyError naming a with 1 request", err)
	}
	t.Log(err)

	// A request waiting for memory gets it when the holder goes idle.
	r.cfg.MaxWait = time.Minute
	got := make(chan error, 1)
	go func() {
		l, err := r.Acquire(context.Background(), "b")
		if err == nil {
			l.Release()
		}
		got <- err
	}()
	waitUntil(t, "the request to wait for memory", func() bool { return r.Waiting() == 1 })
	a.Release()
	if err := <-got; err != nil {
		t.Fatalf("waiting request: %v", err)
	}
	if s := state(r, "a"); s != StateUnloaded {
		t.Errorf("a is %s, want evicted", s)
	}
}

func TestWaitQueueIsBounded(t *testing.T) {
	r, _ := newRegistry(t, Config{Budget: 15, KeepAlive: -1, MaxWaiting: 1}, specs(10, "a", "b"))
	a := acquire(t, r, "a")
	ctx, cancel := context.WithCancel(context.Background())
	waited := acquireLater(r, ctx, "b")
	waitUntil(t, "one request to wait", func() bool { return r.Waiting() == 1 })
	_, err := r.Acquire(context.Background(), "b")
	var busy *BusyError
	if !errors.As(err, &busy) {
		t.Fatalf("second waiter: got %v, want BusyError at once", err)
	}
	cancel()
	if err := (<-waited).err; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled waiter: %v", err)
	}
	a.Release()
}

func TestModelLargerThanBudget(t *testing.T) {
	r, fl := newRegistry(t, Config{Budget: 5}, specs(10, "big"))
	_, err := r.Acquire(context.Background(), "big")
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Need != 10 || tl.Budget != 5 {
		t.Fatalf("got %v, want TooLargeError", err)
	}
	if loads, _ := fl.count("big"); loads != 0 {
		t.Error("a model larger than the budget was loaded")
	}
}

func TestFailedLoadFailsItsWaitersOnly(t *testing.T) {
	r, fl := newRegistry(t, Config{Budget: 100, KeepAlive: -1}, specs(10, "good", "bad"))
	good := acquire(t, r, "good")
	defer good.Release()
	fl.fail["bad"] = errors.New("corrupt file")
	fl.gate = make(chan struct{})
	const n = 5
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := r.Acquire(context.Background(), "bad")
			errs <- err
		}()
	}
	waitUntil(t, "the requests to wait for the load", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		e := r.byID["bad"]
		return e.loading != nil && e.loading.waiters == n
	})
	fl.gate <- struct{}{}
	for range n {
		err := <-errs
		var le *LoadError
		if !errors.As(err, &le) || le.ID != "bad" || err.Error() != `load model "bad": corrupt file` {
			t.Errorf("got %v, want the loader's error", err)
		}
	}
	if u := r.Budget().Used(); u != 10 {
		t.Errorf("%d bytes reserved after the failed load, want 10 (good's)", u)
	}
	if s := state(r, "good"); s != StateLoaded || fl.model("good").drained.Load() {
		t.Error("the failed load touched the other model")
	}
	// The next request tries again.
	fl.gate = nil
	delete(fl.fail, "bad")
	acquire(t, r, "bad").Release()
}

func TestKeepAlive(t *testing.T) {
	t.Run("zero unloads after the last request", func(t *testing.T) {
		r, fl := newRegistry(t, Config{KeepAlive: 0}, specs(10, "a"))
		l1, l2 := acquire(t, r, "a"), acquire(t, r, "a")
		l1.Release()
		if s := state(r, "a"); s != StateLoaded {
			t.Fatalf("a is %s with a request running", s)
		}
		l2.Release()
		<-fl.model("a").closed
	})
	t.Run("a timer unloads an idle model", func(t *testing.T) {
		r, fl := newRegistry(t, Config{KeepAlive: time.Millisecond}, specs(10, "a"))
		acquire(t, r, "a").Release()
		<-fl.model("a").closed
		waitUntil(t, "the unload to finish", func() bool { return state(r, "a") == StateUnloaded })
	})
	t.Run("a request's keep_alive overrides", func(t *testing.T) {
		r, fl := newRegistry(t, Config{KeepAlive: 0}, specs(10, "a"))
		l := acquire(t, r, "a")
		l.SetKeepAlive(-1)
		l.Release()
		if s := state(r, "a"); s != StateLoaded {
			t.Fatalf("a is %s, want kept loaded", s)
		}
		st := r.Status()[0]
		if !st.ExpiresAt.IsZero() {
			t.Errorf("expires at %v, want never", st.ExpiresAt)
		}
		// The next request sets none: the default (0) applies again.
		acquire(t, r, "a").Release()
		<-fl.model("a").closed
	})
	t.Run("a per-model keep_alive", func(t *testing.T) {
		ss := specs(10, "a")
		forever := time.Duration(-1)
		ss[0].KeepAlive = &forever
		r, _ := newRegistry(t, Config{KeepAlive: 0}, ss)
		acquire(t, r, "a").Release()
		if s := state(r, "a"); s != StateLoaded {
			t.Fatalf("a is %s, want kept loaded", s)
		}
	})
}

func TestNames(t *testing.T) {
	one, _ := newRegistry(t, Config{KeepAlive: -1}, specs(1, "tiny"))
	for _, name := range []string{"", "tiny", "tiny:latest", "gpt-4o"} {
		l := acquire(t, one, name)
		if l.ID() != "tiny" {
			t.Errorf("%q → %s", name, l.ID())
		}
		l.Release()
	}
	strict, _ := newRegistry(t, Config{KeepAlive: -1, StrictNames: true}, specs(1, "tiny"))
	var unknown *UnknownModelError
	if _, err := strict.Acquire(context.Background(), "gpt-4o"); !errors.As(err, &unknown) {
		t.Errorf("strict: got %v, want UnknownModelError", err)
	}
	two, _ := newRegistry(t, Config{KeepAlive: -1}, specs(1, "a", "b"))
	if l := acquire(t, two, ""); l.ID() != "a" {
		t.Errorf("no name → %s, want the first model", l.ID())
	} else {
		l.Release()
	}
	_, err := two.Acquire(context.Background(), "c")
	if !errors.As(err, &unknown) || err.Error() != `the model "c" does not exist; known models: a, b` {
		t.Errorf("got %v", err)
	}
	if _, err := New(Config{}, specs(1, "a", "a"), newFakeLoader(t, 0).load); err == nil {
		t.Error("two models with one id were accepted")
	}
}

func TestCancelledWaiterLeavesNoLease(t *testing.T) {
	r, fl := newRegistry(t, Config{KeepAlive: 0}, specs(10, "a"))
	fl.gate = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := acquireLater(r, ctx, "a")
	waitUntil(t, "the request to wait", func() bool { return state(r, "a") == StateLoading })
	cancel()
	if err := (<-errc).err; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	fl.gate <- struct{}{}
	// Nobody holds the model, and its keep-alive is 0: it unloads.
	waitUntil(t, "the model to load", func() bool { return fl.model("a") != nil })
	<-fl.model("a").closed
}

func TestDrainAndClose(t *testing.T) {
	r, fl := newRegistry(t, Config{Budget: 15, KeepAlive: -1}, specs(10, "a", "b"))
	a := acquire(t, r, "a")
	waiter := acquireLater(r, context.Background(), "b")
	waitUntil(t, "a request to wait for memory", func() bool { return r.Waiting() == 1 })
	r.Drain()
	if err := (<-waiter).err; !errors.Is(err, ErrDraining) {
		t.Errorf("waiting request: %v, want ErrDraining", err)
	}
	if !fl.model("a").drained.Load() {
		t.Error("the loaded model was not drained")
	}
	if _, err := r.Acquire(context.Background(), "a"); !errors.Is(err, ErrDraining) {
		t.Errorf("new request: %v, want ErrDraining", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	a.Release() // after Close: harmless
	<-fl.model("a").closed
}

// Many clients over three models in a budget that holds two, with random
// cancels: every request gets its own model or a clear error, the budget
// is never exceeded (the fake loader checks), no model loads twice at once.
func TestStress(t *testing.T) {
	r, fl := newRegistry(t, Config{Budget: 25, KeepAlive: 0, MaxWaiting: 1000}, specs(10, "a", "b", "c"))
	ids := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	var served, cancelled atomic.Int64
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%7 == 0 {
				cancel()
			}
			id := ids[rand.IntN(len(ids))]
			l, err := r.Acquire(ctx, id)
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("%s: %v", id, err)
				}
				cancelled.Add(1)
				return
			}
			if l.ID() != id || l.Model().id != id {
				t.Errorf("asked %s, got %s", id, l.Model().id)
			}
			select {
			case <-l.Model().closed:
				t.Errorf("%s: leased a closed model", id)
			default:
			}
			served.Add(1)
			l.Release()
		}()
	}
	wg.Wait()
	fl.mu.Lock()
	t.Logf("%d served, %d cancelled; loads: %v", served.Load(), cancelled.Load(), fmt.Sprint(fl.loads))
	fl.mu.Unlock()
	if served.Load()+cancelled.Load() != 200 {
		t.Errorf("%d requests accounted for, want 200", served.Load()+cancelled.Load())
	}
}

// A model in steady use does not starve another: the request for the
// other evicts it, its new requests wait, and it unloads as soon as its
// running requests end; then its own waiting request evicts in turn.
func TestBusyModelIsEvictedWhenItsRequestsEnd(t *testing.T) {
	r, fl := newRegistry(t, Config{Budget: 15, KeepAlive: -1}, specs(10, "a", "b"))
	a1 := acquire(t, r, "a")
	got := make(chan string, 2)
	leases := make(chan *Lease[*fakeModel], 2)
	get := func(id string) {
		l, err := r.Acquire(context.Background(), id)
		if err != nil {
			t.Error(err)
			got <- "error"
			return
		}
		got <- id
		leases <- l
	}
	go get("b")
	waitUntil(t, "b's request to wait", func() bool { return r.Waiting() == 1 })
	go get("a") // a is evicted: this waits too, though a is loaded
	waitUntil(t, "a's new request to wait", func() bool { return r.Waiting() == 2 })
	if s := state(r, "a"); s != StateUnloading {
		t.Fatalf("a is %s; want unloading (evicted) while its request runs", s)
	}
	select {
	case <-fl.model("a").closed:
		t.Fatal("a was closed while its request ran")
	default:
	}
	a1.Release()
	if first := <-got; first != "b" {
		t.Fatalf("%s got the memory first, want b (it waited first)", first)
	}
	<-fl.model("a").closed
	b := <-leases
	// a's request, waiting, evicts b while b's request still runs.
	waitUntil(t, "b to be evicted", func() bool { return state(r, "b") == StateUnloading })
	b.Release()
	if second := <-got; second != "a" {
		t.Fatalf("second: %s", second)
	}
	(<-leases).Release()
	if loads, _ := fl.count("a"); loads != 2 {
		t.Errorf("a loaded %d times, want 2", loads)
	}
}

// A model loaded while another request waits for memory is evicted for
// it (the load wakes the waiter), and a request that gives up spares the
// model it had evicted.
func TestEvictionFollowsLoadsAndIsUndone(t *testing.T) {
	r, fl := newRegistry(t, Config{Budget: 15, KeepAlive: -1}, specs(10, "a", "b"))
	fl.gate = make(chan struct{})
	bl := acquireLater(r, context.Background(), "b")
	waitUntil(t, "b to load", func() bool { return state(r, "b") == StateLoading })
	ctx, cancel := context.WithCancel(context.Background())
	ae := acquireLater(r, ctx, "a")
	waitUntil(t, "a's request to wait", func() bool { return r.Waiting() == 1 })
	fl.gate <- struct{}{}
	b := mustGet(t, <-bl)
	waitUntil(t, "b to be evicted for a", func() bool { return state(r, "b") == StateUnloading })
	cancel()
	if err := (<-ae).err; !errors.Is(err, context.Canceled) {
		t.Fatalf("a: %v", err)
	}
	waitUntil(t, "b to be spared", func() bool { return state(r, "b") == StateLoaded })
	acquire(t, r, "b").Release() // b takes requests again
	b.Release()
	if _, live := fl.count("b"); live != 1 {
		t.Errorf("b loaded %d times, want once, still loaded", live)
	}
}

// A pinned model is never evicted nor unloaded by a keep-alive.
func TestPinned(t *testing.T) {
	ss := specs(10, "a", "b")
	ss[0].Pinned = true
	r, fl := newRegistry(t, Config{Budget: 15, KeepAlive: 0, MaxWait: time.Millisecond}, ss)
	l := acquire(t, r, "a")
	l.SetKeepAlive(0)
	l.Release()
	if s := state(r, "a"); s != StateLoaded {
		t.Fatalf("pinned a is %s after keep_alive 0", s)
	}
	var busy *BusyError
	if _, err := r.Acquire(context.Background(), "b"); !errors.As(err, &busy) {
		t.Fatalf("b: %v, want BusyError (a is pinned)", err)
	}
	if _, live := fl.count("a"); live != 1 {
		t.Error("pinned a was unloaded")
	}
}

// A model whose memory cannot be estimated fails its requests under a
// budget, and loads without one; the other models are served.
func TestEstimateFailure(t *testing.T) {
	estimate := func(s Spec) (int64, error) {
		if s.ID == "odd" {
			return 0, errors.New("no head count")
		}
		return 10, nil
	}
	r, _ := newRegistry(t, Config{Budget: 100, KeepAlive: -1, Estimate: estimate}, specs(0, "odd", "ok"))
	var le *LoadError
	if _, err := r.Acquire(context.Background(), "odd"); !errors.As(err, &le) || !strings.Contains(err.Error(), "no head count") {
		t.Errorf("odd under a budget: %v", err)
	}
	acquire(t, r, "ok").Release()
	free, _ := newRegistry(t, Config{KeepAlive: -1, Estimate: estimate}, specs(0, "odd"))
	acquire(t, free, "odd").Release()
}
