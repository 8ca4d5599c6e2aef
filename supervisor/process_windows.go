//go:build windows

package supervisor

import (
	"errors"
	"log/slog"
	"syscall"
)

// On Windows there are no process groups to signal: stop kills the child
// itself (TerminateProcess); what it started is not tracked.

func isolations(string) []isolation { return []isolation{isolNone} }

func isolationFailed([]isolation, error) {}

func isolationError() error { return errors.New("pid namespaces exist on Linux only") }

func childAttr(isolation) *syscall.SysProcAttr { return nil }

func becomeSubreaper(*slog.Logger) {}

// terminateGroup kills the child: Windows has no SIGTERM to send.
func terminateGroup(p *process) { _ = p.os.Kill() }

// killGroup kills the child.
func killGroup(p *process) { _ = p.os.Kill() }

func reapGroup(int) {}

func portListeners(int) ([]portHolder, error) { return nil, nil }
