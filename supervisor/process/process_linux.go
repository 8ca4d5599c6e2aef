//go:build linux

package process

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Isolation on Linux: each child is started as the first process of its
// own PID namespace (CLONE_NEWPID; without CAP_SYS_ADMIN inside a user
// namespace that maps the caller's uid and gid to themselves). When that
// process dies the kernel kills everything else in the namespace, and it
// dies with the supervisor (Pdeathsig), so nothing the child forked can
// outlive the supervisor, however it dies. What the kernel refuses is
// remembered for the process's lifetime and the next isolation is used.

var isolState struct {
	mu     sync.Mutex
	broken map[Isolation]error
}

// isolations lists the isolations to try, strongest first, for the
// pid_namespace setting.
func isolations(pidns string) []Isolation {
	if pidns == PIDNamespaceOff {
		return []Isolation{IsolNone}
	}
	isolState.mu.Lock()
	defer isolState.mu.Unlock()
	var out []Isolation
	for _, i := range []Isolation{IsolPID, IsolUserPID} {
		if isolState.broken[i] == nil {
			out = append(out, i)
		}
	}
	return append(out, IsolNone)
}

// isolationFailed records that the kernel refused the isolations in
// failed (a plain start worked right after).
func isolationFailed(failed []Isolation, err error) {
	isolState.mu.Lock()
	defer isolState.mu.Unlock()
	if isolState.broken == nil {
		isolState.broken = make(map[Isolation]error)
	}
	for _, i := range failed {
		isolState.broken[i] = err
	}
}

// IsolationError says why no PID namespace is used.
func IsolationError() error {
	isolState.mu.Lock()
	defer isolState.mu.Unlock()
	var errs []error
	for _, i := range []Isolation{IsolPID, IsolUserPID} {
		if err := isolState.broken[i]; err != nil && !slices.ContainsFunc(errs, func(e error) bool { return e == err }) {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return errors.New("pid namespaces unavailable")
	}
	return errors.Join(errs...)
}

// childAttr is the child's own process group, its death signal and its
// namespaces.
func childAttr(isol Isolation) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	switch isol {
	case IsolPID:
		a.Cloneflags = syscall.CLONE_NEWPID
	case IsolUserPID:
		a.Cloneflags = syscall.CLONE_NEWPID | syscall.CLONE_NEWUSER
		uid, gid := os.Getuid(), os.Getgid()
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		a.GidMappingsEnableSetgroups = false
	}
	return a
}

var subreaperOnce sync.Once

// becomeSubreaper makes the supervisor a child subreaper, once: the
// descendants of a child that dies are reparented to it (not to init), so
// that stop can kill and reap them.
func becomeSubreaper(log *slog.Logger) {
	subreaperOnce.Do(func() {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			log.Warn("cannot become a child subreaper; orphaned grandchildren go to init", "error", err)
		}
	})
}

// terminateGroup sends SIGTERM and SIGCONT to the child's process group.
func terminateGroup(p *Process) {
	// ESRCH (group already gone) is the expected way for this to fail.
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	_ = syscall.Kill(-p.pid, syscall.SIGCONT)
}

// killGroup sends SIGKILL to the child's process group.
func killGroup(p *Process) {
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
}

// reapGroup reaps the zombies of group pgid that were reparented to the
// supervisor (its leader is reaped by exec.Cmd.Wait, and nothing else is
// touched: other children of the process are not in the group).
func reapGroup(pgid int) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || st.PPID != self || st.PGRP != pgid || p.PID == pgid || st.State != "Z" {
			continue
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(p.PID, &ws, unix.WNOHANG, nil)
	}
}

// tcpListen is the state of a listening socket in /proc/net/tcp{,6}.
const tcpListen = 10

// PortListeners lists the processes with a TCP socket listening on port
// (any address): the listening sockets of /proc/net/tcp and tcp6, mapped
// to processes by the socket inodes among their file descriptors.
func PortListeners(port int) ([]PortHolder, error) {
	if port <= 0 {
		return nil, nil
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, fmt.Errorf("port listeners: %w", err)
	}
	inodes := map[string]bool{}
	// procfs prefers sock_diag over netlink for this; the text files are
	// enough for one lookup per start and need no further dependency.
	//lint:ignore SA1019 /proc/net/tcp{,6} are read on purpose (see above)
	for _, read := range []func() (procfs.NetTCP, error){fs.NetTCP, fs.NetTCP6} {
		socks, err := read()
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6
		}
		if err != nil {
			return nil, fmt.Errorf("port listeners: %w", err)
		}
		for _, s := range socks {
			if s.St == tcpListen && s.LocalPort == uint64(port) {
				inodes[fmt.Sprintf("socket:[%d]", s.Inode)] = true
			}
		}
	}
	if len(inodes) == 0 {
		return nil, nil
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("port listeners: %w", err)
	}
	var out []PortHolder
	for _, p := range procs {
		fds, err := p.FileDescriptorTargets()
		if err != nil || !slices.ContainsFunc(fds, func(fd string) bool { return inodes[fd] }) {
			continue // exited, or not ours to read
		}
		h := PortHolder{PID: p.PID}
		if args, err := p.CmdLine(); err == nil && len(args) > 0 {
			h.Cmdline = strings.Join(args, " ")
		} else if comm, err := p.Comm(); err == nil {
			h.Cmdline = comm
		}
		out = append(out, h)
	}
	return out, nil
}
