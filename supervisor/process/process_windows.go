//go:build windows

package process

import (
	"errors"
	"log/slog"
	"syscall"
)

// On Windows there are no process groups to signal: stop kills the child
// itself (TerminateProcess); what it started is not tracked.

func isolations(string) []Isolation { return []Isolation{IsolNone} }

func isolationFailed([]Isolation, error) {}

// IsolationError says why no PID namespace is used.
func IsolationError() error { return errors.New("pid namespaces exist on Linux only") }

func childAttr(Isolation) *syscall.SysProcAttr { return nil }

func becomeSubreaper(*slog.Logger) {}

// terminateGroup kills the child: Windows has no SIGTERM to send.
func terminateGroup(p *Process) { _ = p.os.Kill() }

// killGroup kills the child.
func killGroup(p *Process) { _ = p.os.Kill() }

func reapGroup(int) {}

// PortListeners finds no listeners: it is implemented on Linux only.
func PortListeners(int) ([]PortHolder, error) { return nil, nil }
