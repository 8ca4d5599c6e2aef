package supervisor

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// shellWorker is a worker whose child is a shell script (never READY: it
// serves no HTTP).
func shellWorker(t *testing.T, script string, mutate func(*WorkerConfig)) *Worker {
	t.Helper()
	cfg := WorkerConfig{
		Name: "sh", Command: []string{"sh", "-c", script}, Port: freePort(t),
		Timeouts: fastTimeouts(), StopTimeout: 200 * time.Millisecond,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	w, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestStopLeavesNoOrphans(t *testing.T) {
	// Two grandchildren in the child's group; the child ignores SIGTERM, so
	// Stop has to escalate to SIGKILL of the group.
	w := shellWorker(t, `trap "" TERM; echo started; sleep 1000 & sleep 1000 & wait`, nil)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	st := w.WorkerStatus()
	if st.State != WorkerRunning || st.PID == 0 {
		t.Fatalf("after Start: %+v", st)
	}
	pgid := st.PID
	waitFor(t, 10*time.Second, "the child and two grandchildren", func() bool { return len(liveGroupMembers(pgid)) >= 3 })
	waitFor(t, 10*time.Second, "the child's output in the log ring", func() bool {
		return slices.Contains(w.DebugInfo().RecentLogs, "stdout: started")
	})
	if _, err := w.Submit(Job{UserPrompt: "x"}); !errors.Is(err, ErrWorkerNotReady) {
		t.Fatalf("Submit before READY: %v, want ErrWorkerNotReady", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if left := liveGroupMembers(pgid); len(left) > 0 {
		t.Fatalf("processes of group %d survived Stop: %v", pgid, left)
	}
	if st := w.WorkerStatus(); st.State != WorkerStopped || st.PID != 0 {
		t.Fatalf("after Stop: %+v", st)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestCrashLoopFails(t *testing.T) {
	w := shellWorker(t, "echo dying >&2; exit 3", func(c *WorkerConfig) { c.Timeouts.MaxRestartsPerWindow = 2 })
	stopWorker(t, w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, w, WorkerFailed, 30*time.Second)
	if st.RestartCount != 2 || st.PID != 0 || !strings.Contains(st.LastError, "more than 2 restarts") {
		t.Fatalf("FAILED status: %+v", st)
	}
	dbg := w.DebugInfo()
	if len(dbg.RecentRestartReasons) != 3 {
		t.Fatalf("restart records: %+v, want 3 (two restarts, then the refused one)", dbg.RecentRestartReasons)
	}
	for _, r := range dbg.RecentRestartReasons {
		if r.Reason != FailServerDied || !strings.Contains(r.Detail, "exit status 3") || r.At.IsZero() {
			t.Errorf("restart record %+v, want server_died with exit status 3", r)
		}
	}
	if n := strings.Count(strings.Join(dbg.RecentLogs, "\n"), "stderr: dying"); n != 3 {
		t.Errorf("log ring holds %d child lines, want 3: %q", n, dbg.RecentLogs)
	}
	if _, err := w.Submit(Job{UserPrompt: "x"}); !errors.Is(err, ErrWorkerFailed) {
		t.Fatalf("Submit when FAILED: %v, want ErrWorkerFailed", err)
	}
	if err := w.Start(); err == nil {
		t.Fatal("Start of a FAILED worker accepted")
	}
}

func TestStartErrors(t *testing.T) {
	w := shellWorker(t, "", func(c *WorkerConfig) { c.Command = []string{"/nonexistent/server"} })
	if err := w.Start(); err == nil {
		t.Fatal("Start of a missing binary succeeded")
	}
	if st := w.WorkerStatus(); st.State != WorkerStopped {
		t.Fatalf("state after failed Start: %s", st.State)
	}
	if _, err := w.Submit(Job{UserPrompt: "x"}); !errors.Is(err, ErrWorkerNotReady) {
		t.Fatalf("Submit on a stopped worker: %v", err)
	}
	if _, err := w.Status(1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Status of an unknown id: %v", err)
	}
	if _, err := w.Result(1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Result of an unknown id: %v", err)
	}
	if w.Cancel(1) {
		t.Fatal("Cancel of an unknown id reported success")
	}
}
