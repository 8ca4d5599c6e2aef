//go:build linux

package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/supervisor/process"
)

// namespacesHere reports whether this kernel gives children a PID
// namespace (the result of the first start is cached by the package).
func namespacesHere(t *testing.T) bool {
	t.Helper()
	w := shellWorker(t, "exec sleep 1000", nil)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer stopNow(t, w)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.proc.Isolation() != process.IsolNone
}

// stopNow stops w and fails t on error.
func stopNow(t *testing.T, w *Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// gone reports whether pid no longer exists at all (not even a zombie).
func gone(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return os.IsNotExist(err)
}

func TestChildPIDNamespace(t *testing.T) {
	ns := namespacesHere(t)
	t.Logf("pid namespaces here: %v (%v)", ns, process.IsolationError())
	for _, mode := range []string{process.PIDNamespaceAuto, process.PIDNamespaceOff} {
		t.Run(mode, func(t *testing.T) {
			w := shellWorker(t, `echo "pid=$$"; exec sleep 1000`, func(c *WorkerConfig) { c.PIDNamespace = mode })
			if err := w.Start(); err != nil {
				t.Fatal(err)
			}
			defer stopNow(t, w)
			var lines []string
			waitFor(t, 10*time.Second, "the child's pid line", func() bool {
				lines = w.DebugInfo().RecentLogs
				return len(lines) > 0
			})
			first := mode == process.PIDNamespaceAuto && ns
			if got := slices.Contains(lines, "stdout: pid=1"); got != first {
				t.Fatalf("mode %s: child saw itself as pid 1: %v, want %v (lines %q)", mode, got, first, lines)
			}
		})
	}
}

// TestForkingChildCrashLeavesNoOrphans kills the leader of a child that
// forked: with a namespace the kernel kills the grandchild; without one
// it is reparented to the supervisor (a subreaper), killed with the group
// on restart and reaped: its pid disappears entirely.
func TestForkingChildCrashLeavesNoOrphans(t *testing.T) {
	for _, mode := range []string{process.PIDNamespaceAuto, process.PIDNamespaceOff} {
		t.Run(mode, func(t *testing.T) {
			w := shellWorker(t, `sleep 1000 & echo forked; wait`, func(c *WorkerConfig) { c.PIDNamespace = mode })
			if err := w.Start(); err != nil {
				t.Fatal(err)
			}
			defer stopNow(t, w)
			leader := w.WorkerStatus().PID
			var grandchild int
			waitFor(t, 10*time.Second, "the grandchild", func() bool {
				for _, pid := range liveGroupMembers(leader) {
					if pid != leader {
						grandchild = pid
					}
				}
				return grandchild != 0
			})
			if err := syscall.Kill(leader, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "the restart", func() bool {
				st := w.WorkerStatus()
				return st.RestartCount == 1 && st.PID != 0 && st.PID != leader
			})
			waitFor(t, 10*time.Second, fmt.Sprintf("grandchild %d to be gone and reaped", grandchild), func() bool { return gone(grandchild) })
		})
	}
}

// superviseConfig writes a corral supervise configuration whose one worker
// is a shell wrapping corral serve in the background (a forking child).
func superviseConfig(t *testing.T, dir string, port int, pidns string) string {
	t.Helper()
	corral := corralBinary(t)
	model := testmodel.Path(t, testmodel.Stories260K)
	serve := fmt.Sprintf("'%s' serve --host 127.0.0.1 --port %d -m '%s' --chat-template chatml -t 1 -c 2048 & wait", corral, port, model)
	cfg := fmt.Sprintf(`host: 127.0.0.1
port: %d
workers:
  - name: wrapped
    port: %d
    command: ["sh", "-c", %q]
    pid_namespace: %s
    log_file: %s
    timeouts: {probe_interval: 100ms}
`, freePort(t), port, serve, pidns, filepath.Join(dir, "{name}.log"))
	path := filepath.Join(dir, "supervise.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSupervisorKillNine runs corral supervise as its own process with a
// forking worker (sh -c 'corral serve … & wait'), SIGKILLs the supervisor
// and checks what is left. With a PID namespace nothing is: the serving
// grandchild's pid is gone and its port is free. Without one (pid_namespace
// off) the grandchild survives, and the next start reports it by pid.
func TestSupervisorKillNine(t *testing.T) {
	ns := namespacesHere(t)
	for _, mode := range []string{process.PIDNamespaceAuto, process.PIDNamespaceOff} {
		t.Run(mode, func(t *testing.T) {
			if mode == process.PIDNamespaceAuto && !ns {
				t.Skipf("no pid namespaces here: %v", process.IsolationError())
			}
			dir := t.TempDir()
			port := freePort(t)
			var stderr lockedBuffer
			sup := exec.Command(corralBinary(t), "supervise", "--config", superviseConfig(t, dir, port, mode))
			sup.Stderr = &stderr
			if err := sup.Start(); err != nil {
				t.Fatal(err)
			}
			killed := false
			defer func() {
				if !killed {
					_ = sup.Process.Kill()
					_ = sup.Wait()
				}
			}()
			var serve process.PortHolder
			waitFor(t, readyTimeout, "corral serve to listen on the worker's port and log that it is ready", func() bool {
				hs, err := process.PortListeners(port)
				if err != nil {
					t.Fatal(err)
				}
				if len(hs) != 1 || !strings.Contains(hs[0].Cmdline, " serve ") {
					return false
				}
				serve = hs[0]
				// It listens before it loads the model: killed before its
				// last start-up line, it would write that line to a pipe
				// nobody reads and die of SIGPIPE.
				b, _ := os.ReadFile(filepath.Join(dir, "wrapped.log"))
				return strings.Contains(string(b), "model loaded; ready")
			})
			p, err := procfs.NewProc(serve.PID)
			if err != nil {
				t.Fatal(err)
			}
			st, err := p.Stat()
			if err != nil {
				t.Fatal(err)
			}
			wrapper := st.PGRP // the sh leader
			t.Logf("supervisor %d, wrapper %d, corral serve %d (%s)", sup.Process.Pid, wrapper, serve.PID, serve.Cmdline)
			if wrapper == serve.PID || !alive(wrapper) {
				t.Fatalf("corral serve %d is not a grandchild (group %d)", serve.PID, wrapper)
			}
			if err := sup.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = true
			_ = sup.Wait() // "signal: killed"
			waitFor(t, 10*time.Second, "the wrapper to die with the supervisor (Pdeathsig)", func() bool { return !alive(wrapper) })

			if mode == process.PIDNamespaceAuto {
				waitFor(t, 10*time.Second, "the grandchild to be gone and the port free", func() bool {
					hs, _ := process.PortListeners(port)
					return !alive(serve.PID) && len(hs) == 0
				})
				ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
				if err != nil {
					t.Fatalf("port %d after the supervisor died: %v", port, err)
				}
				ln.Close()
			} else {
				defer func() {
					_ = syscall.Kill(serve.PID, syscall.SIGKILL)
					waitFor(t, 10*time.Second, "the leftover to die", func() bool { return !alive(serve.PID) })
					_, _ = unix.Wait4(serve.PID, nil, unix.WNOHANG, nil) // ours if we are its subreaper
				}()
				if !alive(serve.PID) {
					t.Fatal("without a pid namespace the grandchild was expected to outlive the supervisor")
				}
				if !strings.Contains(stderr.String(), "without a pid namespace") {
					t.Errorf("supervisor stderr lacks the no-namespace warning:\n%s", stderr.String())
				}
				// The next start reports the leftover by pid.
				var logs lockedBuffer
				w := shellWorker(t, "exec sleep 1000", func(c *WorkerConfig) {
					c.Port, c.PIDNamespace = port, process.PIDNamespaceOff
					c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
				})
				if err := w.Start(); err != nil {
					t.Fatal(err)
				}
				stopNow(t, w)
				want := fmt.Sprintf("pid=%d", serve.PID)
				if !strings.Contains(logs.String(), "stale process") || !strings.Contains(logs.String(), want) {
					t.Errorf("next start did not report stale pid %d:\n%s", serve.PID, logs.String())
				}
			}
			// The child's lines went to its log file, prefixed.
			b, err := os.ReadFile(filepath.Join(dir, "wrapped.log"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), "[wrapped] corral: started pid") || !strings.Contains(string(b), "[wrapped] stderr: ") {
				t.Errorf("wrapped.log:\n%s", b)
			}
		})
	}
}
