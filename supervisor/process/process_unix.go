//go:build unix && !linux

package process

import (
	"errors"
	"log/slog"
	"syscall"
)

// Outside Linux there are no PID namespaces, death signals or subreapers:
// the child gets its own process group, which every stop kills.

func isolations(string) []Isolation { return []Isolation{IsolNone} }

func isolationFailed([]Isolation, error) {}

// IsolationError says why no PID namespace is used.
func IsolationError() error { return errors.New("pid namespaces exist on Linux only") }

func childAttr(Isolation) *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func becomeSubreaper(*slog.Logger) {}

// terminateGroup sends SIGTERM and SIGCONT to the child's process group.
func terminateGroup(p *Process) {
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	_ = syscall.Kill(-p.pid, syscall.SIGCONT)
}

// killGroup sends SIGKILL to the child's process group.
func killGroup(p *Process) { _ = syscall.Kill(-p.pid, syscall.SIGKILL) }

func reapGroup(int) {}

// PortListeners finds no listeners: it is implemented on Linux only.
func PortListeners(int) ([]PortHolder, error) { return nil, nil }
