package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
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

// TestServeKeyFromEnv: corral serve's access flags accept the key
// specification of $CORRAL_SERVE_API_KEY (how the supervisor gives a
// worker its key) beside --api-key, take it out of the environment, and
// name the variable when it is no key; corral supervise's ignore it.
func TestServeKeyFromEnv(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	setup := func(env string, args ...string) (access, error) {
		t.Helper()
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		acc := addAccessFlags(fs)
		acc.keyEnv = env
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return acc.setup(log)
	}
	t.Setenv(supervisor.ServeKeyEnv, "corral-worker-0123456789 role=user name=supervisor")
	a, err := setup(supervisor.ServeKeyEnv, "--api-key", "sk-operator-0123 name=ops")
	if err != nil {
		t.Fatal(err)
	}
	if k := a.policy.Keys.Lookup("corral-worker-0123456789"); k == nil || k.ID != "supervisor" || a.policy.Keys.Lookup("sk-operator-0123") == nil {
		t.Fatalf("keys: %d, the worker key %+v", a.policy.Keys.Len(), k)
	}
	if v, ok := os.LookupEnv(supervisor.ServeKeyEnv); ok {
		t.Fatalf("$%s still set: %q", supervisor.ServeKeyEnv, v)
	}
	t.Setenv(supervisor.ServeKeyEnv, "corral-worker-0123456789")
	if a, err := setup(""); err != nil || a.policy.Keys.Len() != 0 {
		t.Fatalf("without keyEnv (corral supervise): %d keys, %v", a.policy.Keys.Len(), err)
	}
	t.Setenv(supervisor.ServeKeyEnv, "xq7z")
	if _, err := setup(supervisor.ServeKeyEnv); err == nil || !strings.Contains(err.Error(), "$"+supervisor.ServeKeyEnv) || strings.Contains(err.Error(), "xq7z") {
		t.Fatalf("a bad key in $%s: %v", supervisor.ServeKeyEnv, err)
	}
}
