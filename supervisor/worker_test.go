package supervisor

import (
	"context"
	"errors"
	"testing"
)

// TestRequestTransitions checks the request state machine on a worker
// with no child: terminal states absorb, slots are freed exactly once, the
// request's context ends with its fail reason, and reading the result
// releases it.
func TestRequestTransitions(t *testing.T) {
	w, err := NewWorker(WorkerConfig{Name: "w", Command: []string{"x"}, Port: 9000, Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	add := func(id int64) (*request, context.Context) {
		ctx, cancel := context.WithCancelCause(context.Background())
		r := &request{id: id, cancel: cancel, state: RequestRunning, toolItersLeft: 2}
		w.reqs[id] = r
		w.slotsUsed++
		return r, ctx
	}
	r1, ctx1 := add(1)
	r2, _ := add(2)

	w.setToolRunning(r1, true)
	if st, _ := w.Status(1); st.State != RequestToolRunning || st.ToolItersLeft != 1 {
		t.Fatalf("tool round: %+v", st)
	}
	if _, err := w.Result(1); !errors.Is(err, ErrNotFinished) {
		t.Fatalf("Result in flight: %v", err)
	}
	if !w.Cancel(1) || w.slotsUsed != 1 {
		t.Fatalf("Cancel: slots used %d", w.slotsUsed)
	}
	var f *failure
	if !errors.As(context.Cause(ctx1), &f) || f.reason != FailCanceled {
		t.Fatalf("cause of the canceled request: %v", context.Cause(ctx1))
	}
	// Late outcomes of the request's goroutine change nothing.
	w.mu.Lock()
	w.finishLocked(r1, RequestCompleted, FinishStop, "", "", "late")
	w.mu.Unlock()
	w.setToolRunning(r1, false)
	if w.Cancel(1) || w.slotsUsed != 1 {
		t.Fatal("a terminal request was canceled again")
	}
	res, err := w.Result(1)
	if err != nil || res.State != RequestCanceled || res.FinishReason != FinishCanceled || res.Text == "late" {
		t.Fatalf("result: %+v, %v", res, err)
	}
	if _, err := w.Status(1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Status after release: %v", err)
	}

	// A restart fails what is left with its reason.
	w.failAll(FailStallTimeout, "frozen")
	if w.slotsUsed != 0 || r2.state != RequestFailed || r2.failReason != FailStallTimeout || r2.failDetail != "frozen" {
		t.Fatalf("after failAll: slots %d, request %+v", w.slotsUsed, r2)
	}
	if st := w.WorkerStatus(); len(st.ActiveRequestIDs) != 0 || st.SlotsUsed != 0 {
		t.Fatalf("worker status: %+v", st)
	}
}

func TestAdmission(t *testing.T) {
	w, err := NewWorker(WorkerConfig{Name: "w", Command: []string{"x"}, Port: 9000, Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	for state, want := range map[WorkerState]error{
		WorkerStopped: ErrWorkerNotReady, WorkerRunning: ErrWorkerNotReady, WorkerFailed: ErrWorkerFailed, WorkerReady: nil,
	} {
		w.state = state
		if err := w.admitLocked(); !errors.Is(err, want) {
			t.Errorf("%s: admit = %v, want %v", state, err, want)
		}
	}
	w.state, w.slotsUsed = WorkerReady, 1
	if err := w.admitLocked(); !errors.Is(err, ErrNoSlotAvailable) {
		t.Errorf("full: admit = %v", err)
	}
	if _, _, err := w.acquire(context.Background()); !errors.Is(err, ErrNoSlotAvailable) {
		t.Errorf("acquire when full: %v", err)
	}
	w.slotsUsed = 0
	ctx, release, err := w.acquire(context.Background())
	if err != nil || w.slotsUsed != 1 {
		t.Fatalf("acquire: %v, slots %d", err, w.slotsUsed)
	}
	w.failAll(FailServerDied, "gone")
	if ctx.Err() == nil {
		t.Fatal("a restart did not cut off the proxied request")
	}
	release()
	if w.slotsUsed != 0 {
		t.Fatalf("release left %d slots used", w.slotsUsed)
	}
}

func TestPick(t *testing.T) {
	ws := []*Worker{{}, {}, {}}
	errs := []error{ErrWorkerFailed, ErrNoSlotAvailable, ErrWorkerNotReady}
	_, _, err := pick(ws, func(w *Worker) (int, error) {
		for i := range ws {
			if ws[i] == w {
				return 0, errs[i]
			}
		}
		return 0, nil
	})
	if !errors.Is(err, ErrNoSlotAvailable) {
		t.Fatalf("pick error = %v, want the most hopeful, no slot", err)
	}
	v, w, err := pick(ws, func(w *Worker) (int, error) {
		if w == ws[2] {
			return 7, nil
		}
		return 0, ErrWorkerNotReady
	})
	if err != nil || v != 7 || w != ws[2] {
		t.Fatalf("pick = %d, %p, %v", v, w, err)
	}
	// The byte budget is the supervisor's: the first refusal is final.
	tried := 0
	if _, _, err := pick(ws, func(*Worker) (int, error) { tried++; return 0, ErrJobStorageFull }); !errors.Is(err, ErrJobStorageFull) || tried != 1 {
		t.Fatalf("pick with the budget spent: %v after %d tries", err, tried)
	}
}
