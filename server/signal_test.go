//go:build linux

package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/wire"
)

// These tests signal a real `corral serve` process. Its one slot runs a
// stream to the end of stories260K's 2,048-token context (seconds), so
// the checks made while it runs have ample time.

// longStream starts a greedy stream that runs to the end of the context
// and returns its reader once the first event has arrived.
func longStream(t *testing.T, c *e2etest.Child) (*http.Response, *wire.Reader) {
	t.Helper()
	body := e2etest.Marshal(t, map[string]any{"prompt": "Once upon a time", "n_predict": -1, "ignore_eos": true,
		"temperature": 0, "stream": true})
	req, err := http.NewRequest(http.MethodPost, c.URL+"/completion", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: status %d", resp.StatusCode)
	}
	r := wire.NewReader(resp.Body)
	if _, err := r.Next(); err != nil {
		t.Fatalf("first event: %v", err)
	}
	return resp, r
}

// waitDraining polls /health until it answers 503 "draining".
func waitDraining(t *testing.T, c *e2etest.Child) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(e2etest.ChildWait)
	for {
		code, b, err := c.Do(context.Background(), http.MethodGet, "/health", nil)
		if err == nil && code == http.StatusServiceUnavailable && strings.Contains(string(b), "draining") {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("/health never answered 503 draining (last %d %s %v)", code, b, err)
		}
	}
}

// waitExit waits for the process to end and returns its exit code.
func waitExit(t *testing.T, c *e2etest.Child) int {
	t.Helper()
	select {
	case <-c.Exited():
		return c.State().ExitCode()
	case <-time.After(e2etest.ChildWait):
		t.Fatalf("corral serve still running %s after the signal", e2etest.ChildWait)
		return -1
	}
}

func TestSIGTERMDrainsThenExits(t *testing.T) {
	c := e2etest.StartChild(t, testmodel.Stories260K, "-np", "1", "-t", "1", "--shutdown-timeout", "2m")
	_, stream := longStream(t, c)

	// A second request waits for the only slot.
	queued := make(chan int, 1)
	body := e2etest.Marshal(t, map[string]any{"prompt": "Hello", "n_predict": 4})
	go func() {
		code, _, _ := c.Do(context.Background(), http.MethodPost, "/completion", body)
		queued <- code
	}()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(e2etest.ChildWait)
	queuedOne := regexp.MustCompile(`(?m)^corral_queue_depth\{model_name="[^"]*"\} 1$`)
	for !queuedOne.MatchString(metricsText(t, c)) {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("the second request never showed in the queue")
		}
	}

	if err := syscall.Kill(c.PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitDraining(t, c)
	if code := <-queued; code != http.StatusServiceUnavailable {
		t.Errorf("queued request after SIGTERM: status %d, want 503", code)
	}
	if code, b, err := c.Do(context.Background(), http.MethodPost, "/completion", e2etest.Marshal(t, map[string]any{"prompt": "Hi", "n_predict": 2})); err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("new request while draining: %d %s %v, want 503", code, b, err)
	}
	// The running stream goes on to its end.
	var last e2etest.LlamaResult
	for {
		ev, err := stream.Next()
		if err != nil {
			break
		}
		if json.Unmarshal(ev.Data, &last) != nil {
			t.Fatalf("event %q", ev.Data)
		}
	}
	if !last.Stop || last.StopType != "limit" || last.TokensPredicted < 1000 {
		t.Fatalf("running stream after SIGTERM ended with %+v, want the whole generation", last)
	}
	if code := waitExit(t, c); code != 0 {
		t.Fatalf("exit code %d after a graceful shutdown, want 0", code)
	}
}

func TestSecondSignalExitsAtOnce(t *testing.T) {
	c := e2etest.StartChild(t, testmodel.Stories260K, "-np", "1", "-t", "1", "--shutdown-timeout", "2m")
	longStream(t, c)
	if err := syscall.Kill(c.PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitDraining(t, c)
	if err := syscall.Kill(c.PID, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, c); code != 1 {
		t.Fatalf("exit code %d after a second signal, want 1", code)
	}
}

// metricsText is c's GET /metrics.
func metricsText(t *testing.T, c *e2etest.Child) string {
	t.Helper()
	code, b, err := c.Do(context.Background(), http.MethodGet, "/metrics", nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	return string(b)
}
