package e2etest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/corral-llm/corral/internal/testmodel"
)

// ChildWait bounds every wait on a child: for health at start, for one
// request (its client's timeout); the tests' own waits use it too.
const ChildWait = 2 * time.Minute

// childMemLimit is a child's address-space limit: far above what it
// needs, far below the 8 GB a 2e9-token penalty window would take, so
// that such a bug fails the test instead of swapping the machine.
const childMemLimit = 4 << 30

// Child is one `corral serve` process (testmodel.Binary) on a loopback
// port, killed when the test ends. Linux only: the child is pinned to its
// parent with a parent-death signal and limited with prlimit.
type Child struct {
	// URL is the child's base URL, http://127.0.0.1:port.
	URL string
	// PID is the process's id.
	PID int
	// Client is an HTTP client without keep-alives, its timeout
	// ChildWait.
	Client *http.Client

	exited chan struct{} // closed once the process has been waited for
	state  *os.ProcessState
	stderr *tailBuffer
	kill   func()
}

// tailBuffer keeps the last max bytes written to it; safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > w.max {
		w.b = append(w.b[:0], w.b[len(w.b)-w.max:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}

// StartChild starts `corral serve` on the named test model (or the model
// at an absolute path) with args, and waits until /health answers 200.
func StartChild(t *testing.T, modelName string, args ...string) *Child {
	t.Helper()
	bin := testmodel.Binary(t)
	model := modelName
	if !filepath.IsAbs(model) {
		model = testmodel.Path(t, modelName)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	c := &Child{
		URL:    "http://127.0.0.1:" + strconv.Itoa(port),
		Client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: ChildWait},
		exited: make(chan struct{}),
		stderr: &tailBuffer{max: 1 << 20},
	}
	cmd := exec.Command(bin, append([]string{"serve", "-m", model, "--port", strconv.Itoa(port)}, args...)...)
	cmd.Stdout = c.stderr
	cmd.Stderr = c.stderr
	// Killed with the test process even when it dies without cleanups (a
	// -timeout panic). The signal comes when the thread that started the
	// child ends, so that thread is locked until the child is gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
		c.state = cmd.ProcessState
		close(c.exited)
	}()
	if err := <-started; err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	c.PID = cmd.Process.Pid
	var once sync.Once
	c.kill = func() {
		once.Do(func() { cmd.Process.Kill() })
		<-c.exited
	}
	t.Cleanup(c.kill)
	if err := setMemLimit(c.PID, childMemLimit); err != nil {
		t.Fatalf("prlimit: %v", err)
	}

	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(ChildWait)
	defer deadline.Stop()
	for {
		if code, _, err := c.Do(context.Background(), http.MethodGet, "/health", nil); err == nil && code == http.StatusOK {
			return c
		}
		select {
		case <-tick.C:
		case <-c.exited:
			t.Fatalf("corral serve exited before it was healthy (%v):\n%s", c.state, c.stderr)
		case <-deadline.C:
			t.Fatalf("corral serve not healthy after %s:\n%s", ChildWait, c.stderr)
		}
	}
}

// setMemLimit sets the process's RLIMIT_AS.
func setMemLimit(pid int, bytes uint64) error {
	lim := syscall.Rlimit{Cur: bytes, Max: bytes}
	_, _, errno := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), syscall.RLIMIT_AS,
		uintptr(unsafe.Pointer(&lim)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// Kill kills the process at once and waits for it; safe to call again.
func (c *Child) Kill() { c.kill() }

// Exited is closed once the process has ended and been waited for.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// State is the ended process's state: nil until Exited is closed.
func (c *Child) State() *os.ProcessState {
	select {
	case <-c.exited:
		return c.state
	default:
		return nil
	}
}

// Alive reports whether the process has not yet been seen to end.
func (c *Child) Alive() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// Died describes the child's death for a failure message: its output
// from the first sign of the crash (a Go panic or fatal signal, a C++
// abort), else its last lines.
func (c *Child) Died() string {
	out := c.stderr.String()
	start := len(out)
	for _, mark := range []string{"panic:", "fatal error:", "SIGSEGV", "SIGABRT", "SIGBUS", "SIGILL", "SIGFPE", "terminate called", "GGML_ASSERT"} {
		if i := strings.Index(out, mark); i >= 0 && i < start {
			start = i
		}
	}
	if start == len(out) {
		start = max(0, len(out)-4096)
	}
	out = out[start:]
	if len(out) > 6144 {
		out = out[:6144] + "\n[...]"
	}
	return fmt.Sprintf("corral serve died (%v); its output:\n%s", c.state, out)
}

// Do sends one request, body (unless nil) as JSON, and reads the whole
// response.
func (c *Child) Do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	return c.DoAs(ctx, method, path, body, "application/json")
}

// DoAs is Do with the body's Content-Type.
func (c *Child) DoAs(ctx context.Context, method, path string, body []byte, contentType string) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, r)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.Client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Request sends one request, failing t (with the child's death, if that
// is why) when there is no response.
func (c *Child) Request(t *testing.T, method, path string, body []byte) (int, []byte) {
	t.Helper()
	return c.RequestAs(t, method, path, body, "application/json")
}

// RequestAs is Request with the body's Content-Type.
func (c *Child) RequestAs(t *testing.T, method, path string, body []byte, contentType string) (int, []byte) {
	t.Helper()
	code, b, err := c.DoAs(context.Background(), method, path, body, contentType)
	if err != nil {
		c.Settle()
		if !c.Alive() {
			t.Fatalf("%s %s: %v\n%s", method, path, err, c.Died())
		}
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return code, b
}

// Settle gives a crashing child a moment (at most half a second) to be
// reaped, so that a failed request is blamed on the crash.
func (c *Child) Settle() {
	select {
	case <-c.exited:
	case <-time.After(500 * time.Millisecond):
	}
}
