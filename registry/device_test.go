package registry

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/llama"
)

// The placement policy over fake devices: the registry knows devices only
// by name and budget, so two fake GPUs are two budgets the placements
// name. Package engine's gpu tests run the real path on lavapipe.

// onEach is a spec that may load on any of devs (the unpinned case): one
// placement per device, hostNeed on the host and devNeed on the device.
func onEach(id string, hostNeed, devNeed int64, devs ...string) Spec {
	s := Spec{ID: id, Engine: engine.Config{ModelPath: id + ".gguf"}}
	for _, d := range devs {
		s.Placements = append(s.Placements, Placement{Host: hostNeed, Devices: map[string]int64{d: devNeed},
			Offload: llama.Offload{GPULayers: llama.GPULayersAll, Devices: []string{d}}})
	}
	return s
}

// twoGPUs is a registry config with two fake devices of budget each.
func twoGPUs(budget int64) Config {
	return Config{Budget: 100, KeepAlive: -1, Devices: []Device{{Name: "GPU0", Budget: budget}, {Name: "GPU1", Budget: budget}}}
}

// onDevice is the device the loaded model id was offloaded to.
func onDevice(t *testing.T, fl *fakeLoader, id string) string {
	t.Helper()
	m := fl.model(id)
	if m == nil || len(m.offload) != 1 {
		t.Fatalf("model %s: loaded on %v, want one device", id, m)
	}
	return m.offload[0]
}

// Models go to the device with room; when none has room, the least
// recently used idle model is evicted from its device, and the new model
// takes its place there.
func TestPlacementOnDeviceWithRoom(t *testing.T) {
	r, fl := newRegistry(t, twoGPUs(10), []Spec{
		onEach("a", 1, 8, "GPU0", "GPU1"), onEach("b", 1, 8, "GPU0", "GPU1"), onEach("c", 1, 8, "GPU0", "GPU1"),
	})
	acquire(t, r, "a").Release()
	acquire(t, r, "b").Release()
	if a, b := onDevice(t, fl, "a"), onDevice(t, fl, "b"); a != "GPU0" || b != "GPU1" {
		t.Fatalf("a on %s, b on %s; want GPU0 and GPU1 (the first with room)", a, b)
	}
	acquire(t, r, "b").Release() // a is now the least recently used
	c := acquire(t, r, "c")
	defer c.Release()
	if d := onDevice(t, fl, "c"); d != "GPU0" {
		t.Errorf("c on %s, want GPU0, where the least recently used model (a) was", d)
	}
	if s := state(r, "a"); s != StateUnloaded {
		t.Errorf("a is %s, want evicted", s)
	}
	if s := state(r, "b"); s != StateLoaded {
		t.Errorf("b is %s, want loaded: GPU1 was not needed", s)
	}
	for d, want := range map[string]int64{"GPU0": 8, "GPU1": 8} {
		if u := r.DeviceBudgets()[d].Used(); u != want {
			t.Errorf("%s: %d bytes reserved, want %d", d, u, want)
		}
	}
	if u := r.Budget().Used(); u != 2 {
		t.Errorf("host: %d bytes reserved, want 2", u)
	}
	for _, st := range r.Status() {
		if st.ID == "c" && (st.Devices["GPU0"] != 8 || st.Need != 1) {
			t.Errorf("c's status: host %d devices %v, want 1 and GPU0=8", st.Need, st.Devices)
		}
	}
}

// An idle model is evicted before a busy one, on whichever device it is:
// the busy model least recently used keeps its device.
func TestPlacementEvictsIdleBeforeBusy(t *testing.T) {
	r, fl := newRegistry(t, twoGPUs(10), []Spec{
		onEach("a", 1, 8, "GPU0", "GPU1"), onEach("b", 1, 8, "GPU0", "GPU1"), onEach("c", 1, 8, "GPU0", "GPU1"),
	})
	a := acquire(t, r, "a") // GPU0, busy, least recently used
	defer a.Release()
	acquire(t, r, "b").Release() // GPU1, idle
	c := acquire(t, r, "c")
	defer c.Release()
	if d := onDevice(t, fl, "c"); d != "GPU1" {
		t.Errorf("c on %s, want GPU1, the idle model's", d)
	}
	if s := state(r, "a"); s != StateLoaded {
		t.Errorf("a is %s; a busy model was evicted while an idle one could be", s)
	}
}

// A model pinned to a device (one placement, as --device gives) waits for
// room there even when another device is free.
func TestPlacementPinned(t *testing.T) {
	r, fl := newRegistry(t, twoGPUs(10), []Spec{onEach("a", 1, 8, "GPU1"), onEach("b", 1, 8, "GPU1")})
	acquire(t, r, "a").Release()
	b := acquire(t, r, "b")
	defer b.Release()
	if d := onDevice(t, fl, "b"); d != "GPU1" {
		t.Errorf("b on %s, want GPU1", d)
	}
	if s := state(r, "a"); s != StateUnloaded {
		t.Errorf("a is %s, want evicted from GPU1", s)
	}
	if u := r.DeviceBudgets()["GPU0"].Used(); u != 0 {
		t.Errorf("GPU0: %d bytes reserved by models pinned to GPU1", u)
	}
}

// A model whose device part exceeds the device's whole budget is refused
// with an error naming the device, the need and the budget; a placement
// that exceeds it is skipped for one that fits.
func TestDeviceTooLarge(t *testing.T) {
	r, _ := newRegistry(t, twoGPUs(10), []Spec{onEach("big", 1, 11, "GPU0"), onEach("fits", 1, 9, "GPU0")})
	_, err := r.Acquire(context.Background(), "big")
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Device != "GPU0" || tl.Need != 11 || tl.Budget != 10 {
		t.Fatalf("got %v, want a TooLargeError for GPU0 (11 of 10 B)", err)
	}
	for _, want := range []string{"GPU0", "11 B", "10 B", "-ngl"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if u := r.DeviceBudgets()["GPU0"].Used() + r.Budget().Used(); u != 0 {
		t.Errorf("a refused model reserved %d bytes", u)
	}
	acquire(t, r, "fits").Release()

	// Its placements on GPU0 too large, big loads on GPU1.
	s := onEach("big", 1, 11, "GPU0")
	s.Placements = append(s.Placements, Placement{Host: 5, Devices: map[string]int64{"GPU1": 6}, Offload: llama.Offload{GPULayers: 3, Devices: []string{"GPU1"}}})
	r2, fl := newRegistry(t, twoGPUs(10), []Spec{s})
	acquire(t, r2, "big").Release()
	if m := fl.model("big"); m.offload[0] != "GPU1" || m.need != 5 {
		t.Errorf("big loaded on %v with %d B of host memory, want GPU1 and 5", m.offload, m.need)
	}
}

// A reservation takes host and device memory together or not at all: a
// device part that does not fit gives back the host part (and the device
// parts already taken).
func TestReserveAllOrNothing(t *testing.T) {
	cfg := Config{Budget: 100, Devices: []Device{{Name: "GPU0", Budget: 10}, {Name: "GPU1", Budget: 10}}}
	r, _ := newRegistry(t, cfg, specs(1, "a"))
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.reserve(Placement{Host: 1, Devices: map[string]int64{"GPU1": 9}}) {
		t.Fatal("the first reservation failed")
	}
	// GPU0 fits, GPU1 does not: neither the host nor GPU0 keeps a byte.
	if r.reserve(Placement{Host: 50, Devices: map[string]int64{"GPU0": 5, "GPU1": 5}}) {
		t.Fatal("a reservation over GPU1's budget succeeded")
	}
	if h, g0, g1 := r.budget.Used(), r.devices["GPU0"].Used(), r.devices["GPU1"].Used(); h != 1 || g0 != 0 || g1 != 9 {
		t.Errorf("after the failed reservation host %d GPU0 %d GPU1 %d, want 1, 0, 9", h, g0, g1)
	}
	r.unreserve(Placement{Host: 1, Devices: map[string]int64{"GPU1": 9}})
}

// Concurrent requests for models over two devices and the host never
// overcommit a budget (the fake loader checks each load) and leave no
// reservation behind (newRegistry's cleanup checks every budget).
func TestDeviceStress(t *testing.T) {
	cfg := twoGPUs(20)
	cfg.Budget, cfg.KeepAlive, cfg.MaxWaiting = 12, 0, 1000
	ss := []Spec{
		onEach("a", 3, 12, "GPU0", "GPU1"),
		onEach("b", 5, 9, "GPU0", "GPU1"),
		onEach("c", 4, 15, "GPU1"),
		{ID: "d", Engine: engine.Config{ModelPath: "d.gguf"}, Need: 6}, // host only
		{ID: "e", Engine: engine.Config{ModelPath: "e.gguf"}, Placements: []Placement{ // split over both
			{Host: 2, Devices: map[string]int64{"GPU0": 6, "GPU1": 6}, Offload: llama.Offload{GPULayers: 4, Devices: []string{"GPU0", "GPU1"}}}}},
	}
	r, _ := newRegistry(t, cfg, ss)
	ids := []string{"a", "b", "c", "d", "e"}
	var wg sync.WaitGroup
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
				return
			}
			if l.Model().id != id {
				t.Errorf("asked %s, got %s", id, l.Model().id)
			}
			l.Release()
		}()
	}
	wg.Wait()
	for _, st := range r.Status() {
		if st.InMemory && !slices.Contains(ids, st.ID) {
			t.Errorf("unknown model %s", st.ID)
		}
	}
}

// TestBusyErrorCountsTheDevice: a model refused for want of a device's
// memory is told what each holder takes of that device, not of the host.
func TestBusyErrorCountsTheDevice(t *testing.T) {
	err := &BusyError{
		ID: "b", Device: "Vulkan0", Need: 3 << 30, Budget: 4 << 30, Used: 2 << 30, Why: "every holder is in use",
		Holders: []Holder{{ID: "a", State: StateLoaded, Need: 100 << 20, Devices: map[string]int64{"Vulkan0": 2 << 30}, Requests: 1}},
	}
	msg := err.Error()
	for _, want := range []string{"3.0 GiB of memory on Vulkan0", "a (loaded, 2.0 GiB, 1 requests)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q: want %q in it", msg, want)
		}
	}
}
