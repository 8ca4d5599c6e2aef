package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	servedmodel "github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/server"
	"github.com/corral-llm/corral/serving"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/registry"
)

// Several real models behind one server: routing by name, swaps under a
// memory budget, load failures, keep-alive, many clients.

// spec describes a test model (a name in ../shared/models or a path) for
// the registry, with one compute thread and few slots.
func spec(t *testing.T, id, model string, slots int) registry.Spec {
	t.Helper()
	path := model
	if !filepath.IsAbs(model) {
		path = testmodel.Path(t, model)
	}
	return registry.Spec{ID: id, Engine: engine.Config{ModelPath: path, Name: id, Threads: 1, Parallel: slots, HostCacheBytes: 0}}
}

// modelServer is a server over a registry of real models.
type modelServer struct {
	*e2etest.Server
	reg *serving.Registry
}

// startModels serves specs with rcfg (needs estimated from the files) on
// 127.0.0.1.
func startModels(t *testing.T, rcfg registry.Config, specs ...registry.Spec) *modelServer {
	t.Helper()
	log, _ := e2etest.NewLogger()
	rcfg.Logger, rcfg.Estimate = log, registry.EstimateFromFile
	cpu := engine.NewCPU(2) // as corral serve shares the cores among models
	for i := range specs {
		specs[i].Engine.CPU = cpu
	}
	reg, err := registry.New(rcfg, specs, servedmodel.Loader(log))
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(server.Config{Logger: log})
	s.SetCore(serving.New(reg, serving.Options{Logger: log}))
	ts := e2etest.StartServer(t, s, nil, func() error {
		err := reg.Close()
		if u := reg.Budget().Used(); u != 0 {
			t.Errorf("%d bytes stay reserved after Close", u)
		}
		return err
	})
	return &modelServer{Server: ts, reg: reg}
}

// modelList is GET /v1/models.
type modelList struct {
	Data []struct {
		ID          string `json:"id"`
		State       string `json:"state"`
		MemoryBytes int64  `json:"memory_bytes"`
		Error       string `json:"error"`
	} `json:"data"`
}

func (ms *modelServer) states(t *testing.T) map[string]string {
	t.Helper()
	var l modelList
	ms.Get(t, "/v1/models", &l)
	out := map[string]string{}
	for _, m := range l.Data {
		out[m.ID] = m.State
	}
	return out
}

// complete asks model id for a greedy completion of g and checks the
// response: the model it names, the number of tokens, and the text —
// whole when exact, else its first characters. (Goldens hold exactly only
// on a cache whose cells were never freed, as a fresh engine's with a slot
// per request; a prompt found in the cache, or cells reused after other
// requests, give the same computation in another order, and these tiny
// models' near-ties can then flip a later token. The first characters
// differ between the two models.)
func (ms *modelServer) complete(t *testing.T, ctx context.Context, id string, g testmodel.Golden, exact bool) error {
	body := map[string]any{"model": id, "prompt": g.Prompt, "max_tokens": g.N, "temperature": 0, "ignore_eos": true}
	resp, b := ms.Do(t, ctx, http.MethodPost, "/v1/completions", body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %d %s", id, resp.StatusCode, b)
	}
	var c textCompletion
	unmarshal(t, string(b), &c)
	if c.Model != id || len(c.Choices) != 1 || c.Usage == nil || c.Usage.CompletionTokens != g.N {
		return fmt.Errorf("asked %s for %d tokens, got %s", id, g.N, b)
	}
	got, want := c.Choices[0].Text, g.Want
	if !exact {
		got, want = got[:min(len(got), 16)], want[:16]
	}
	if got != want {
		return fmt.Errorf("%s %q: text %q\nwant %q", id, g.Prompt, got, want)
	}
	return nil
}

// Two real models served at once keep their goldens while requests for
// both interleave (exactly in the first round, on fresh caches; see
// complete).
func TestTwoModelsInterleaved(t *testing.T) {
	ms := startModels(t, registry.Config{KeepAlive: -1},
		spec(t, "stories", testmodel.Stories260K, 3), spec(t, "tiny", testmodel.TinyStories656K, 3))
	if s := ms.states(t); s["stories"] != "unloaded" || s["tiny"] != "unloaded" {
		t.Fatalf("states before any request: %v", s)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for round := range 2 {
		if round == 1 {
			wg.Wait() // the second round finds the first's prompts cached
		}
		for _, id := range []string{"stories", "tiny"} {
			model := map[string]string{"stories": testmodel.Stories260K, "tiny": testmodel.TinyStories656K}[id]
			for _, g := range testmodel.GoldensFor(model) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := ms.complete(t, context.Background(), id, g, round == 0); err != nil {
						errs <- fmt.Errorf("round %d: %w", round, err)
					}
				}()
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := ms.states(t); s["stories"] != "loaded" || s["tiny"] != "loaded" {
		t.Errorf("states after: %v", s)
	}
	for _, st := range ms.reg.Status() {
		if st.Loads != 1 {
			t.Errorf("%s loaded %d times, want once", st.ID, st.Loads)
		}
	}
}

// A budget that holds one model at a time swaps them under concurrent
// load: every request is answered, by the model it named.
func TestSwapsUnderBudget(t *testing.T) {
	a, b := spec(t, "stories", testmodel.Stories260K, 2), spec(t, "tiny", testmodel.TinyStories656K, 2)
	need := func(s registry.Spec) int64 {
		n, err := registry.EstimateFromFile(s)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	budget := max(need(a), need(b)) + need(a)/2 // never both
	ms := startModels(t, registry.Config{Budget: budget, KeepAlive: -1, MaxWait: 5 * time.Minute, MaxWaiting: 100}, a, b)
	goldens := map[string][]testmodel.Golden{"stories": testmodel.GoldensFor(testmodel.Stories260K), "tiny": testmodel.GoldensFor(testmodel.TinyStories656K)}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 {
				id := []string{"stories", "tiny"}[(c+i)%2]
				g := goldens[id][i%len(goldens[id])]
				if err := ms.complete(t, context.Background(), id, g, false); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	loads := 0
	for _, st := range ms.reg.Status() {
		if st.Loads == 0 {
			t.Errorf("%s never loaded", st.ID)
		}
		loads += st.Loads
		t.Logf("%s: %d loads, last load %v, last unload %v", st.ID, st.Loads, st.LastLoad, st.LastUnload)
	}
	if loads < 3 {
		t.Errorf("%d loads in all; with one model fitting at a time and both asked for, want swaps", loads)
	}
	if u := ms.reg.Budget().Used(); u > budget {
		t.Errorf("%d bytes reserved, over the budget %d", u, budget)
	}
}

func TestModelErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "broken.gguf")
	if err := os.WriteFile(bad, []byte("GGUF but not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := spec(t, "tiny", testmodel.TinyStories656K, 2)
	broken := registry.Spec{ID: "broken", Engine: engine.Config{ModelPath: bad, Threads: 1}, Need: 1 << 20}
	ms := startModels(t, registry.Config{KeepAlive: -1}, good, broken)

	resp, b := ms.Post(t, "/v1/completions", map[string]any{"model": "gpt-4o", "prompt": "Hi", "max_tokens": 2})
	if resp.StatusCode != 404 || !strings.Contains(string(b), "known models: tiny, broken") || !strings.Contains(string(b), `"code":"model_not_found"`) {
		t.Errorf("unknown model: %d %s", resp.StatusCode, b)
	}
	if err := ms.complete(t, context.Background(), "tiny", golden[0], true); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a failed load is tried again by the next request
		resp, b = ms.Post(t, "/v1/chat/completions", map[string]any{"model": "broken", "messages": []map[string]string{{"role": "user", "content": "Hi"}}})
		if resp.StatusCode != 500 || !strings.Contains(string(b), `"code":"model_load_failed"`) || !strings.Contains(string(b), `load model \"broken\"`) {
			t.Errorf("broken model: %d %s", resp.StatusCode, b)
		}
	}
	var l modelList
	ms.Get(t, "/v1/models", &l)
	for _, m := range l.Data {
		if m.ID == "broken" && (m.State != "unloaded" || m.Error == "") {
			t.Errorf("broken model listed as %+v", m)
		}
	}
	if err := ms.complete(t, context.Background(), "tiny", golden[1], false); err != nil {
		t.Errorf("the other model after a failed load: %v", err)
	}

	small := startModels(t, registry.Config{Budget: 1 << 10}, spec(t, "tiny", testmodel.TinyStories656K, 2))
	resp, b = small.Post(t, "/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": 2})
	if resp.StatusCode != 400 || !strings.Contains(string(b), `"code":"model_too_large"`) || !strings.Contains(string(b), "budget of 1.0 KiB") {
		t.Errorf("model larger than the budget: %d %s", resp.StatusCode, b)
	}
}

func TestKeepAliveField(t *testing.T) {
	ms := startModels(t, registry.Config{KeepAlive: -1}, spec(t, "tiny", testmodel.TinyStories656K, 2))
	resp, b := ms.Post(t, "/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": 2, "keep_alive": 0})
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	e2etest.WaitFor(t, "the model to unload", func() bool { return ms.states(t)["tiny"] == "unloaded" })
	resp, b = ms.Post(t, "/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": 2, "keep_alive": "1h"})
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	st := ms.reg.Status()[0]
	if st.State != registry.StateLoaded || st.ExpiresAt.IsZero() {
		t.Errorf("after keep_alive 1h: %+v", st)
	}
	resp, b = ms.Post(t, "/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": 2, "keep_alive": "soon"})
	if resp.StatusCode != 400 || !strings.Contains(string(b), "keep_alive") {
		t.Errorf("bad keep_alive: %d %s", resp.StatusCode, b)
	}
}

// 128 clients over three models, a budget that holds two, random
// cancels: each request ends with its model's answer, a cancellation, or
// a clear error; afterwards no slot is busy (goroutine leaks are
// checked by TestMain).
func TestManyClientsThreeModels(t *testing.T) {
	synth, _ := testsynth.ChatML(t)
	specs := []registry.Spec{spec(t, "stories", testmodel.Stories260K, 4), spec(t, "tiny", testmodel.TinyStories656K, 4), spec(t, "synth", synth, 4)}
	var needs []int64
	for _, s := range specs {
		n, err := registry.EstimateFromFile(s)
		if err != nil {
			t.Fatal(err)
		}
		needs = append(needs, n)
	}
	budget := needs[0] + needs[1] + needs[2] - min(needs[0], needs[1], needs[2])/2 // two fit, not three
	ms := startModels(t, registry.Config{Budget: budget, KeepAlive: -1, MaxWait: 5 * time.Minute, MaxWaiting: 256}, specs...)
	ids := []string{"stories", "tiny", "synth"}
	type outcome struct {
		id     string
		status int
		err    error
	}
	out := make(chan outcome, 128)
	for i := range 128 {
		go func() {
			id := ids[i%3]
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if rand.IntN(4) == 0 {
				time.AfterFunc(time.Duration(rand.IntN(20))*time.Millisecond, cancel)
			}
			body := fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time","max_tokens":%d,"stream":%v}`, id, 4+rand.IntN(12), i%2 == 0)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ms.URL+"/v1/completions", strings.NewReader(body))
			resp, err := ms.Client.Do(req)
			if err != nil {
				out <- outcome{id: id, err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode == 200 && !strings.Contains(string(b), fmt.Sprintf(`"model":%q`, id)) {
				err = fmt.Errorf("asked %s, got %.200s", id, b)
			}
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("%d %s", resp.StatusCode, b)
			}
			out <- outcome{id: id, status: resp.StatusCode, err: err}
		}()
	}
	ok, cancelled := 0, 0
	for range 128 {
		o := <-out
		switch {
		case o.err == nil:
			ok++
		case errors.Is(o.err, context.Canceled):
			cancelled++
		default:
			t.Errorf("%s: %v", o.id, o.err)
		}
	}
	t.Logf("%d answered, %d cancelled by their clients", ok, cancelled)
	if ok == 0 {
		t.Fatal("no request was answered")
	}
	for _, id := range ids {
		e2etest.WaitFor(t, id+"'s slots to go idle", func() bool {
			var slots []struct {
				IsProcessing bool `json:"is_processing"`
			}
			ms.Get(t, "/slots?model="+id, &slots)
			for _, s := range slots {
				if s.IsProcessing {
					return false
				}
			}
			return true
		})
	}
	for _, st := range ms.reg.Status() {
		if st.Requests != 0 {
			t.Errorf("%s is held by %d requests after all ended", st.ID, st.Requests)
		}
	}
}

// Draining a server of several models: every engine's queued requests and
// the requests waiting for memory fail at once with 503, running answers
// (paced ones, paused at their first chunk so that they run until the test
// lets them go on) finish, and closing frees each model once.
func TestDrainAcrossModels(t *testing.T) {
	specs := []registry.Spec{spec(t, "stories", testmodel.Stories260K, 1), spec(t, "tiny", testmodel.TinyStories656K, 1), spec(t, "third", testmodel.Stories260K, 1)}
	var needs int64
	for _, s := range specs[:2] {
		n, err := registry.EstimateFromFile(s)
		if err != nil {
			t.Fatal(err)
		}
		needs += n
	}
	ms := startModels(t, registry.Config{Budget: needs, KeepAlive: -1, MaxWait: 5 * time.Minute}, specs...)
	goOn := make(chan struct{})
	paused := make(chan struct{}, 2)
	finishes := make(chan string, 2)
	for _, id := range []string{"stories", "tiny"} {
		go func() {
			// A better class than the queued requests: its paused slot
			// is not lent to them.
			body := map[string]any{"model": id, "messages": []map[string]string{{"role": "user", "content": "Tell me a story."}},
				"max_tokens": 60, "ignore_eos": true, "stream": true, "chunking": map[string]any{}, "priority": -1}
			first := true
			_, finish, _ := pacedChat(t, ms.Server, body, func(rid string, index int, _ string, held bool) {
				if first {
					first = false
					paused <- struct{}{}
					<-goOn
				}
				if held {
					ms.Post(t, "/v1/chat/completions/"+rid+"/continue", map[string]any{"index": index})
				}
			})
			finishes <- finish
		}()
	}
	<-paused
	<-paused
	type reply struct {
		id     string
		status int
		body   string
	}
	replies := make(chan reply, 3)
	for _, id := range []string{"stories", "tiny", "third"} {
		if id == "third" {
			// After the others queue in their engines: waiting for
			// memory, the request for third evicts a busy model, whose
			// new requests would wait with it.
			e2etest.WaitFor(t, "a request queued in each engine", func() bool { return ms.Metrics(t)["corral_queue_depth"] == 2 })
		}
		go func() {
			resp, err := ms.Client.Post(ms.URL+"/v1/completions", "application/json", strings.NewReader(fmt.Sprintf(`{"model":%q,"prompt":"Hello","max_tokens":4}`, id)))
			if err != nil {
				replies <- reply{id: id, body: err.Error()}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			replies <- reply{id, resp.StatusCode, string(b)}
		}()
	}
	e2etest.WaitFor(t, "a request waiting for memory", func() bool {
		return ms.Metrics(t)["corral_requests_waiting_for_memory"] == 1
	})
	ms.Drain()
	for range 3 {
		r := <-replies
		if code, _ := errorCode(t, []byte(r.body)); r.status != 503 || code != "unavailable" {
			t.Errorf("%s: %d %s; want 503 unavailable", r.id, r.status, r.body)
		}
	}
	close(goOn)
	for range 2 {
		if f := <-finishes; f != "length" {
			t.Errorf("a running answer finished with %q, want length", f)
		}
	}
	if err := ms.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := ms.reg.Close(); err != nil {
		t.Fatal(err)
	}
	for _, st := range ms.reg.Status() {
		if st.State != registry.StateUnloaded {
			t.Errorf("%s is %s after Close", st.ID, st.State)
		}
	}
}
