//go:build unix && !linux

package supervisor

import (
	"errors"
	"log/slog"
	"syscall"
)

// Outside Linux there are no PID namespaces, death signals or subreapers:
// the child gets its own process group, which every stop kills.

func isolations(string) []isolation { return []isolation{isolNone} }

func isolationFailed([]isolation, error) {}

func isolationError() error { return errors.New("pid namespaces exist on Linux only") }

func childAttr(isolation) *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func becomeSubreaper(*slog.Logger) {}

// terminateGroup sends SIGTERM and SIGCONT to the child's process group.
func terminateGroup(p *process) {
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	_ = syscall.Kill(-p.pid, syscall.SIGCONT)
}

// killGroup sends SIGKILL to the child's process group.
func killGroup(p *process) { _ = syscall.Kill(-p.pid, syscall.SIGKILL) }

func reapGroup(int) {}

func portListeners(int) ([]portHolder, error) { return nil, nil }
