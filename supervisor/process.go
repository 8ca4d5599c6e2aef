package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// process is one child in its own process group. On Linux the child gets
// SIGKILL when the thread that started it dies (Pdeathsig); the thread is
// locked for the child's lifetime so that this means "when corral dies",
// even on kill -9.
type process struct {
	pid  int // also the process group id
	done chan struct{}
	err  error // how the child exited; valid once done is closed
}

// startProcess starts argv with env appended to the inherited environment,
// feeding its stdout and stderr into logs line by line.
func startProcess(argv []string, env []string, logs *lineRing) (*process, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("start worker: empty command")
	}
	p := &process{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the creating thread exits, not the
		// process: keep this thread alive (and ours) until the child
		// is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), env...)
		stdout, stderr := logs.Writer("stdout: "), logs.Writer("stderr: ")
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		// A grandchild keeping the pipes open must not block Wait forever.
		cmd.WaitDelay = time.Second
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.err = cmd.Wait()
		stdout.Flush()
		stderr.Flush()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start worker %q: %w", argv[0], err)
	}
	return p, nil
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

// signalGroup sends sig to the child's whole process group.
func (p *process) signalGroup(sig syscall.Signal) {
	// ESRCH (group already gone) is the expected way for this to fail.
	_ = syscall.Kill(-p.pid, sig)
}

// groupGoneTimeout bounds the wait for killed grandchildren to finish
// exiting; SIGKILL cannot be ignored, so this is only scheduling delay.
const groupGoneTimeout = 5 * time.Second

// stop ends the process group: SIGTERM (plus SIGCONT, so that a stopped
// child can act on it), up to grace for the child to exit, then SIGKILL to
// the group, which also reaches stragglers after the leader exited. It
// returns once the child has been reaped and no live member of its group
// is left (grandchildren are not ours to wait for, so that is polled).
func (p *process) stop(grace time.Duration) {
	if !p.exited() {
		p.signalGroup(syscall.SIGTERM)
		p.signalGroup(syscall.SIGCONT)
		t := time.NewTimer(grace)
		select {
		case <-p.done:
		case <-t.C:
		}
		t.Stop()
	}
	p.signalGroup(syscall.SIGKILL)
	<-p.done
	deadline := time.Now().Add(groupGoneTimeout)
	for {
		if _, live := groupCPU(p.pid); live == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// exitDetail describes how the child exited; call it once exited.
func (p *process) exitDetail() string {
	if p.err == nil {
		return "exited with status 0"
	}
	return p.err.Error()
}
