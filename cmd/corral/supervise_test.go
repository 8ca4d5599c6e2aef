package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/supervisor"
)

// TestSuperviseRestart runs "corral supervise restart" against a real
// supervisor whose only worker exits at once, so that it is FAILED: the
// command restarts it with reason manual, and reports unknown workers.
func TestSuperviseRestart(t *testing.T) {
	tp := supervisor.DefaultTimeouts()
	tp.ProbeInterval, tp.RestartBackoff, tp.MaxRestartsPerWindow = 20*time.Millisecond, time.Millisecond, 0
	sup, err := supervisor.New([]supervisor.WorkerConfig{{Name: "w", Command: []string{"sh", "-c", "exit 3"}, Port: 1, Timeouts: tp}}, supervisor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sup.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sup.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()
	srv := httptest.NewServer(sup.Handler())
	defer srv.Close()
	w := sup.Worker("w")
	failedWith := func(n int) bool {
		st := w.WorkerStatus()
		return st.State == supervisor.WorkerFailed && len(w.DebugInfo().RecentRestartReasons) == n
	}
	for deadline := time.Now().Add(patience); !failedWith(1); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("worker never FAILED: %+v", w.WorkerStatus())
		}
	}
	var out bytes.Buffer
	if err := runSuperviseRestart(context.Background(), []string{"w", "--url", srv.URL}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "worker w: restart requested") {
		t.Fatalf("output %q", out.String())
	}
	// The manual restart ran the child again (which exited again).
	for deadline := time.Now().Add(patience); !failedWith(3); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no manual restart: %+v", w.DebugInfo().RecentRestartReasons)
		}
	}
	if r := w.DebugInfo().RecentRestartReasons[1]; r.Reason != supervisor.FailManual {
		t.Fatalf("restart records %+v", w.DebugInfo().RecentRestartReasons)
	}
	err = runSuperviseRestart(context.Background(), []string{"--url", srv.URL, "nope"}, &out)
	if err == nil || !strings.Contains(err.Error(), "UNKNOWN_WORKER") {
		t.Fatalf("unknown worker: %v", err)
	}
	if err := runSuperviseRestart(context.Background(), nil, &out); err == nil {
		t.Fatal("no name accepted")
	}
}
