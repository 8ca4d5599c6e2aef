package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"time"
)

// process is one child in its own process group. On Linux the child gets
// SIGKILL when the thread that started it dies (Pdeathsig); the thread is
// locked for the child's lifetime so that this means "when corral dies",
// even on kill -9. Where the kernel allows it the child is also the first
// process of its own PID namespace (process_linux.go), so that its death
// takes everything it forked with it; elsewhere the supervisor is a child
// subreaper that kills and reaps the group on every stop.
type process struct {
	pid  int // also the process group id
	os   *os.Process
	isol isolation // how the child was isolated
	done chan struct{}
	err  error // how the child exited; valid once done is closed
}

// isolation is how a child is started: in a fresh PID namespace (possibly
// inside a fresh user namespace) or as a plain child.
type isolation int

const (
	isolNone    isolation = iota // own process group only
	isolPID                      // CLONE_NEWPID
	isolUserPID                  // CLONE_NEWUSER|CLONE_NEWPID, uid/gid mapped to themselves
)

func (i isolation) String() string {
	switch i {
	case isolPID:
		return "pid namespace"
	case isolUserPID:
		return "user+pid namespace"
	}
	return "process group"
}

// defaultProcOptions serves rings made without a worker (never in
// production: NewWorker sets its ring's options).
var defaultProcOptions = &procOptions{name: "worker", pidns: pidNamespaceAuto, log: slog.Default()}

// startProcess starts argv with env appended to the inherited environment,
// feeding its stdout and stderr into logs line by line (and into the
// worker's log sink). Before the start it reports any process still
// listening on the worker's port: on a system without PID namespaces that
// is a leftover of a supervisor that was killed.
func startProcess(argv []string, env []string, logs *lineRing) (*process, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("start worker: empty command")
	}
	opts := logs.proc
	if opts == nil {
		opts = defaultProcOptions
	}
	becomeSubreaper(opts.log)
	opts.reportStale()
	p := &process{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the creating thread exits, not the
		// process: keep this thread alive (and ours) until the child
		// is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		stdout, stderr := logs.Writer("stdout: "), logs.Writer("stderr: ")
		stdout.tee, stderr.tee = opts.sink, opts.sink
		cmd, isol, nsErr, err := spawn(argv, env, stdout, stderr, opts.pidns)
		if err != nil {
			started <- err
			return
		}
		p.pid, p.os, p.isol = cmd.Process.Pid, cmd.Process, isol
		opts.reportIsolation(isol, nsErr)
		opts.sink.note("started pid %d (%s): %q", p.pid, isol, argv)
		started <- nil
		p.err = cmd.Wait()
		stdout.Flush()
		stderr.Flush()
		opts.sink.note("pid %d %s", p.pid, p.exitDetail())
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
func spawn(argv, env []string, stdout, stderr *lineWriter, pidns string) (cmd *exec.Cmd, isol isolation, nsErr, err error) {
	var failed []isolation
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
		if isol == isolNone {
			break
		}
		// The namespace may be what failed, or the command itself: only
		// a plain start that works afterwards tells.
		failed = append(failed, isol)
		nsErrs = append(nsErrs, fmt.Errorf("%s: %w", isol, err))
	}
	return nil, isolNone, nil, err
}

// reportIsolation logs, once per worker, that its children run without a
// PID namespace and what that means.
func (o *procOptions) reportIsolation(isol isolation, nsErr error) {
	if isol != isolNone {
		return
	}
	o.warned.Do(func() {
		why := "pid_namespace is off"
		if nsErr != nil {
			why = nsErr.Error()
		} else if o.pidns != pidNamespaceOff {
			why = isolationError().Error()
		}
		o.log.Warn("worker child runs without a pid namespace: processes it forks can outlive a supervisor that is killed; "+
			"a process still holding the worker's port is reported at the next start", "reason", why)
	})
}

// reportStale logs the processes that listen on the worker's port before
// its child starts.
func (o *procOptions) reportStale() {
	holders, err := portListeners(o.port)
	if err != nil {
		o.log.Debug("stale port check failed", "port", o.port, "error", err)
		return
	}
	for _, h := range holders {
		o.log.Warn("a stale process still listens on the worker's port (left by a supervisor that was killed?); the child may fail to bind",
			"port", o.port, "pid", h.pid, "command", h.cmdline)
		o.sink.note("port %d is held by stale pid %d: %s", o.port, h.pid, h.cmdline)
	}
}

// portHolder is a process with a listening socket.
type portHolder struct {
	pid     int
	cmdline string
}

// exited reports whether the child has exited and been reaped.
func (p *process) exited() bool {
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

// stop ends the process group: SIGTERM (plus SIGCONT, so that a stopped
// child can act on it), up to grace for the child to exit, then SIGKILL to
// the group, which also reaches stragglers after the leader exited. It
// returns once the child has been reaped and no live member of its group
// is left (grandchildren are not ours to wait for, so that is polled);
// members reparented to the supervisor (a subreaper) are reaped.
//
// A child that is the first process of a PID namespace only gets the
// signals it has handlers for: one without a SIGTERM handler (a shell)
// waits for the rest of its group to exit, or for the SIGKILL.
func (p *process) stop(grace time.Duration) {
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
		if _, live := groupCPU(p.pid); live == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronization
	}
	reapGroup(p.pid)
}

// exitDetail describes how the child exited; call it once exited.
func (p *process) exitDetail() string {
	if p.err == nil {
		return "exited with status 0"
	}
	return p.err.Error()
}
