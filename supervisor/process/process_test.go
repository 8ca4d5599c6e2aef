package process

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStartStop starts a child that forks and ignores SIGTERM: Stop
// escalates to SIGKILL of the group and leaves no member alive; the
// child's lines reach the ring and the sink.
func TestStartStop(t *testing.T) {
	opts, err := NewOptions("t", 0, Config{}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	opts.SetStderr(&out)
	ring := NewRing(8)
	p, err := Start([]string{"sh", "-c", `trap "" TERM; echo started; sleep 1000 & wait`}, nil, ring, opts)
	if err != nil {
		t.Fatal(err)
	}
	if p.PID() <= 0 {
		t.Fatalf("pid %d", p.PID())
	}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(ring.Lines(), "stdout: started") {
		if time.Now().After(deadline) {
			t.Fatalf("ring: %q", ring.Lines())
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Stop(100 * time.Millisecond)
	select {
	case <-p.Done():
	default:
		t.Fatal("Done is open after Stop")
	}
	if _, live := GroupCPU(p.PID()); live != 0 {
		t.Fatalf("%d members of group %d survived Stop", live, p.PID())
	}
	if !strings.Contains(p.ExitDetail(), "killed") {
		t.Errorf("exit detail %q, want a kill", p.ExitDetail())
	}
	for _, want := range []string{"[t] corral: started pid ", "[t] stdout: started\n", "[t] corral: pid "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("sink lacks %q:\n%s", want, out.String())
		}
	}
}

func TestStartErrors(t *testing.T) {
	if _, err := Start(nil, nil, NewRing(1), nil); err == nil {
		t.Error("empty command started")
	}
	if _, err := Start([]string{"/nonexistent/server"}, nil, NewRing(1), nil); err == nil {
		t.Error("missing binary started")
	}
	for _, pc := range []Config{{PIDNamespace: "on"}, {LogMaxBytes: -1}} {
		if _, err := NewOptions("w", 1, pc, slog.Default()); err == nil {
			t.Errorf("NewOptions accepted %+v", pc)
		}
	}
}

func TestPlaceholder(t *testing.T) {
	p := Placeholder()
	if p.PID() != 0 {
		t.Errorf("pid %d", p.PID())
	}
	select {
	case <-p.Done():
		t.Error("a placeholder exited")
	default:
	}
}
