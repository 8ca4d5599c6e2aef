package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/wire"
)

// TestQueueFull fills one slot and a queue of one: the requests beyond get
// 503 with Retry-After, and the server serves again once they drain.
func TestQueueFull(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1, MaxQueue: 1})
	body := map[string]any{"prompt": "Once upon a time", "n_predict": 200, "temperature": 0, "ignore_eos": true}
	type reply struct {
		status     int
		retryAfter string
		body       []byte
		err        error
	}
	// Send bursts until one overflows: a burst arrives far faster than a
	// 200-token generation ends, so the first burst normally does.
	rejected := false
	for round := 0; !rejected; round++ {
		if round == 20 {
			t.Fatal("20 bursts of 6 requests never filled a queue of 1")
		}
		replies := make(chan reply, 6)
		for range 6 {
			go func() {
				b, _ := json.Marshal(body)
				resp, err := ts.Client.Post(ts.URL+"/completion", "application/json", bytes.NewReader(b))
				if err != nil {
					replies <- reply{err: err}
					return
				}
				defer resp.Body.Close()
				rb, err := io.ReadAll(resp.Body)
				replies <- reply{resp.StatusCode, resp.Header.Get("Retry-After"), rb, err}
			}()
		}
		for range 6 {
			r := <-replies
			switch {
			case r.err != nil:
				t.Errorf("request: %v", r.err)
			case r.status == 503:
				rejected = true
				_, code := e2etest.ErrorOf(t, "application/json", r.body)
				if code != "queue_full" || r.retryAfter != "1" {
					t.Errorf("503 with code %q, Retry-After %q", code, r.retryAfter)
				}
			case r.status == 200:
				var c llamaCompletion
				unmarshal(t, string(r.body), &c)
				if c.TokensPredicted != 200 {
					t.Errorf("accepted request: %s", r.body)
				}
			default:
				t.Errorf("status %d: %s", r.status, r.body)
			}
		}
	}
	resp, b := ts.Post(t, "/completion", map[string]any{"prompt": "Hello", "n_predict": 16, "temperature": 0, "ignore_eos": true})
	if resp.StatusCode != 200 || !strings.Contains(string(b), golden[1].Want) {
		t.Errorf("after the burst: %d %s", resp.StatusCode, b)
	}
}

// TestDisconnect checks that a client going away frees the engine,
// whether its request is streaming, waiting for a whole response, or still
// queued. The slot context is far larger than what a cancelled request
// generates, so a request that was not cancelled would keep its slot busy
// for a long time and push tokens_generated_total far up.
func TestDisconnect(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1, CtxSize: 16384})
	unlimited := map[string]any{"prompt": "Once upon a time", "n_predict": -1, "temperature": 0, "ignore_eos": true}
	generated := func() float64 { return ts.Metrics(t)["corral_tokens_generated_total"] }

	t.Run("streaming", func(t *testing.T) {
		before := generated()
		ctx, cancel := context.WithCancel(context.Background())
		body := map[string]any{"stream": true}
		for k, v := range unlimited {
			body[k] = v
		}
		resp := ts.OpenStream(t, ctx, "/completion", body)
		if ev, err := wire.NewReader(resp.Body).Next(); err != nil || ev.Data == nil {
			t.Fatalf("first event %+v, %v", ev, err)
		}
		cancel()
		resp.Body.Close()
		e2etest.WaitFor(t, "the slot to be released", func() bool { return busySlots(t, ts) == 0 })
		if n := generated() - before; n >= float64(ts.Info.CtxPerRequest)/2 {
			t.Errorf("%v tokens generated: the request was not cancelled", n)
		}
	})

	t.Run("whole response", func(t *testing.T) {
		before := generated()
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			b, _ := json.Marshal(unlimited)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions", bytes.NewReader(b))
			resp, err := ts.Client.Do(req)
			if err == nil {
				resp.Body.Close()
				err = fmt.Errorf("request completed with status %d", resp.StatusCode)
			}
			errc <- err
		}()
		e2etest.WaitFor(t, "the request to run", func() bool { return busySlots(t, ts) == 1 })
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("client: %v", err)
		}
		e2etest.WaitFor(t, "the slot to be released", func() bool { return busySlots(t, ts) == 0 })
		if n := generated() - before; n >= float64(ts.Info.CtxPerRequest)/2 {
			t.Errorf("%v tokens generated: the request was not cancelled", n)
		}
	})

	t.Run("queued", func(t *testing.T) {
		runCtx, stopRunning := context.WithCancel(context.Background())
		defer stopRunning()
		body := map[string]any{"stream": true}
		for k, v := range unlimited {
			body[k] = v
		}
		running := ts.OpenStream(t, runCtx, "/completion", body)
		defer running.Body.Close()

		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			b, _ := json.Marshal(unlimited)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/completion", bytes.NewReader(b))
			resp, err := ts.Client.Do(req)
			if err == nil {
				resp.Body.Close()
				err = fmt.Errorf("request completed with status %d", resp.StatusCode)
			}
			errc <- err
		}()
		e2etest.WaitFor(t, "a queued request", func() bool { return ts.Metrics(t)["corral_queue_depth"] == 1 })
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("client: %v", err)
		}
		e2etest.WaitFor(t, "the queue to empty", func() bool { return ts.Metrics(t)["corral_queue_depth"] == 0 })
		if busySlots(t, ts) != 1 {
			t.Error("the running request stopped with the queued one")
		}
		stopRunning()
		e2etest.WaitFor(t, "the slot to be released", func() bool { return busySlots(t, ts) == 0 })
	})
}

// TestGracefulShutdown stops the server while a stream is in flight: the
// stream completes, then Serve returns.
func TestGracefulShutdown(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1})
	g := golden[2]
	resp := ts.OpenStream(t, context.Background(), "/completion",
		map[string]any{"prompt": g.Prompt, "n_predict": g.N, "temperature": 0, "ignore_eos": true, "stream": true})
	stopped := make(chan error, 1)
	go func() { stopped <- ts.Stop() }()
	text, final := llamaStream(t, resp)
	if text != g.Want || final.TokensPredicted != g.N {
		t.Errorf("stream cut by shutdown: %q, %+v", text, final)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := ts.Client.Get(ts.URL + "/health"); err == nil {
		t.Error("server still answers after shutdown")
	}
}

// TestQueueTimeout keeps the only slot busy: waiting requests fail with
// 503 queue_timeout, streamed or not, before any event is sent.
func TestQueueTimeout(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1, CtxSize: 16384, MaxQueueWait: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	running := ts.OpenStream(t, ctx, "/completion",
		map[string]any{"prompt": "Once upon a time", "n_predict": -1, "temperature": 0, "ignore_eos": true, "stream": true})
	defer running.Body.Close()

	for _, stream := range []bool{false, true} {
		resp, b := ts.Post(t, "/v1/completions", map[string]any{"prompt": "Hello", "max_tokens": 4, "stream": stream})
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("stream %v: %d, Retry-After %q: %s", stream, resp.StatusCode, resp.Header.Get("Retry-After"), b)
			continue
		}
		if _, code := e2etest.ErrorOf(t, resp.Header.Get("Content-Type"), b); code != "queue_timeout" {
			t.Errorf("stream %v: code %q", stream, code)
		}
	}
}
