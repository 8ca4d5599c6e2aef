// Package process starts, isolates, stops and reaps the child process
// group of a supervised worker: on Linux in its own PID namespace where the
// kernel allows it, with the supervisor as a child subreaper. It reports
// stale processes on the worker's port before a start, and feeds the
// child's output into a Ring of recent lines and a log sink (the
// supervisor's stderr, or a size-rotated file).
package process

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"time"

	"github.com/prometheus/procfs"
)

// Process is one child in its own process group. On Linux the child gets
// SIGKILL when the thread that started it dies (Pdeathsig); the thread is
// locked for the child's lifetime so that this means "when corral dies",
// even on kill -9. Where the kernel allows it the child is also the first
// process of its own PID namespace (process_linux.go), so that its death
// takes everything it forked with it; elsewhere the supervisor is a child
// subreaper that kills and reaps the group on every stop.
type Process struct {
	pid  int // also the process group id
	os   *os.Process
	isol Isolation // how the child was isolated
	done chan struct{}
	err  error // how the child exited; valid once done is closed
}

// Isolation is how a child is started: in a fresh PID namespace (possibly
// inside a fresh user namespace) or as a plain child.
type Isolation int

// The isolations, weakest first.
const (
	IsolNone    Isolation = iota // own process group only
	IsolPID                      // CLONE_NEWPID
	IsolUserPID                  // CLONE_NEWUSER|CLONE_NEWPID, uid/gid mapped to themselves
)

// String names the isolation for logs.
func (i Isolation) String() string {
	switch i {
	case IsolPID:
		return "pid namespace"
	case IsolUserPID:
		return "user+pid namespace"
	}
	return "process group"
}

// defaultOptions serves starts without options (never in production:
// NewWorker makes its worker's options).
var defaultOptions = &Options{name: "worker", pidns: PIDNamespaceAuto, log: slog.Default()}

// Start starts argv with env appended to the inherited environment,
// feeding its stdout and stderr into logs line by line (and into the
// worker's log sink, per opts; nil opts are the defaults of a bare
// worker). Before the start it reports any process still listening on the
// worker's port: on a system without PID namespaces that is a leftover of
// a supervisor that was killed.
func Start(argv []string, env []string, logs *Ring, opts *Options) (*Process, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("start worker: empty command")
	}
	if opts == nil {
		opts = defaultOptions
	}
	becomeSubreaper(opts.log)
	opts.reportStale()
	p := &Process{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the creating thread exits, not the
		// process: keep this thread alive (and ours) until the child
		// is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		stdout, stderr := logs.writer("stdout: "), logs.writer("stderr: ")
		stdout.tee, stderr.tee = opts.sink, opts.sink
		stdout.redact, stderr.redact = opts.redact, opts.redact
		cmd, isol, nsErr, err := spawn(argv, env, stdout, stderr, opts.pidns)
		if err != nil {
			started <- err
			return
		}
		p.pid, p.os, p.isol = cmd.Process.Pid, cmd.Process, isol
		opts.reportIsolation(isol, nsErr)
		opts.sink.note("started pid %d (%s): %q", p.pid, isol, opts.redact.Args(argv))
		started <- nil
		p.err = cmd.Wait()
		stdout.Flush()
		stderr.Flush()
		opts.sink.note("pid %d %s", p.pid, p.ExitDetail())
		opts.sink.close()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start worker %q: %w", argv[0], err)
	}
	return p, nil
}

// spawn starts the command in the first isolation that works, from the
// strongest down. nsErr says why a stronger isolation than the one used
// was not available (nil when none was wanted or the strongest worked).
func spawn(argv, env []string, stdout, stderr *lineWriter, pidns string) (cmd *exec.Cmd, isol Isolation, nsErr, err error) {
	var failed []Isolation
	var nsErrs []error
	for _, isol = range isolations(pidns) {
		cmd = exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.SysProcAttr = childAttr(isol)
		// A grandchild keeping the pipes open must not block Wait forever.
		cmd.WaitDelay = time.Second
		err = cmd.Start()
		if err == nil {
			nsErr = errors.Join(nsErrs...)
			if len(failed) > 0 {
				isolationFailed(failed, nsErr)
			}
			return cmd, isol, nsErr, nil
		}
		if isol == IsolNone {
			break
		}
		// The namespace may be what failed, or the command itself: only
		// a plain start that works afterwards tells.
		failed = append(failed, isol)
		nsErrs = append(nsErrs, fmt.Errorf("%s: %w", isol, err))
	}
	return nil, IsolNone, nil, err
}

// reportIsolation logs, once per worker, that its children run without a
// PID namespace and what that means.
func (o *Options) reportIsolation(isol Isolation, nsErr error) {
	if isol != IsolNone {
		return
	}
	o.warned.Do(func() {
		why := "pid_namespace is off"
		if nsErr != nil {
			why = nsErr.Error()
		} else if o.pidns != PIDNamespaceOff {
			why = IsolationError().Error()
		}
		o.log.Warn("worker child runs without a pid namespace: processes it forks can outlive a supervisor that is killed; "+
			"a process still holding the worker's port is reported at the next start", "reason", why)
	})
}

// reportStale logs the processes that listen on the worker's port before
// its child starts.
func (o *Options) reportStale() {
	holders, err := PortListeners(o.port)
	if err != nil {
		o.log.Debug("stale port check failed", "port", o.port, "error", err)
		return
	}
	for _, h := range holders {
		h.Cmdline = o.redact.String(h.Cmdline)
		o.log.Warn("a stale process still listens on the worker's port (left by a supervisor that was killed?); the child may fail to bind",
			"port", o.port, "pid", h.PID, "command", h.Cmdline)
		o.sink.note("port %d is held by stale pid %d: %s", o.port, h.PID, h.Cmdline)
	}
}

// PortHolder is a process with a listening socket.
type PortHolder struct {
	PID     int    // the process
	Cmdline string // its command line (or command name), for reports
}

// Placeholder returns a Process that stands for a child the supervisor
// does not run (a remote worker's server): it has no pid, never exits and
// must not be stopped.
func Placeholder() *Process {
	return &Process{done: make(chan struct{})}
}

// PID returns the child's pid, which is also its process group id (0 for
// a Placeholder).
func (p *Process) PID() int { return p.pid }

// Isolation returns how the child was isolated.
func (p *Process) Isolation() Isolation { return p.isol }

// Done is closed once the child has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// exited reports whether the child has exited and been reaped.
func (p *Process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// groupGoneTimeout bounds the wait for killed grandchildren to finish
// exiting; SIGKILL cannot be ignored, so this is only scheduling delay.
const groupGoneTimeout = 5 * time.Second

// Stop ends the process group: SIGTERM (plus SIGCONT, so that a stopped
// child can act on it), up to grace for the child to exit, then SIGKILL to
// the group, which also reaches stragglers after the leader exited. It
// returns once the child has been reaped and no live member of its group
// is left (grandchildren are not ours to wait for, so that is polled);
// members reparented to the supervisor (a subreaper) are reaped.
//
// A child that is the first process of a PID namespace only gets the
// signals it has handlers for: one without a SIGTERM handler (a shell)
// waits for the rest of its group to exit, or for the SIGKILL.
func (p *Process) Stop(grace time.Duration) {
	if !p.exited() {
		terminateGroup(p)
		t := time.NewTimer(grace)
		select {
		case <-p.done:
		case <-t.C:
		}
		t.Stop()
	}
	killGroup(p)
	<-p.done
	deadline := time.Now().Add(groupGoneTimeout)
	for {
		if _, live := GroupCPU(p.pid); live == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronization
	}
	reapGroup(p.pid)
}

// ExitDetail describes how the child exited; call it once Done is closed.
func (p *Process) ExitDetail() string {
	if p.err == nil {
		return "exited with status 0"
	}
	return p.err.Error()
}

// GroupCPU sums the CPU time of the live (non-zombie) members of process
// group pgid, so that servers that fork helpers (vLLM's engine core) count
// as a whole. It reports how many live members it found.
func GroupCPU(pgid int) (ticks uint64, live int) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0, 0 // no /proc (not Linux)
	}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || st.PGRP != pgid || st.State == "Z" {
			continue // exited while we looked, another group, or a zombie
		}
		ticks += uint64(st.UTime + st.STime)
		live++
	}
	return ticks, live
}
