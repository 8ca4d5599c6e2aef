package picker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// Corral is a `corral serve` child process listening on one loopback
// address.
type Corral struct {
	// Host and Port are where it listens; Addr is host:port.
	Host, Port, Addr string

	cmd  *exec.Cmd
	done chan error
}

// StartCorral starts bin as `corral serve` on host (a loopback address)
// and port ("": a free one), with args after the address flags, and
// waits until /health answers 200. Stderr goes to log (nil: discarded).
func StartCorral(ctx context.Context, bin, host, port string, log io.Writer, args ...string) (*Corral, error) {
	if port == "" {
		p, err := FreePort(host)
		if err != nil {
			return nil, err
		}
		port = p
	}
	c := &Corral{Host: host, Port: port, Addr: net.JoinHostPort(host, port), done: make(chan error, 1)}
	c.cmd = exec.Command(bin, append([]string{"serve", "--host=" + host, "--port=" + port}, args...)...)
	c.cmd.Stderr = log
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get("http://" + c.Addr + "/health")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c, nil
			}
		}
		select {
		case err := <-c.done:
			c.done <- err
			return nil, fmt.Errorf("corral serve on %s exited before it was ready: %v", c.Addr, err)
		case <-ctx.Done():
			c.Stop()
			return nil, fmt.Errorf("corral serve on %s: %w", c.Addr, ctx.Err())
		case <-tick.C:
		}
	}
}

// FreePort returns a TCP port free on every host at the time of the call
// (the picker's pool has one target port for all its pods).
func FreePort(hosts ...string) (string, error) {
	for range 100 {
		ln, err := net.Listen("tcp", net.JoinHostPort(hosts[0], "0"))
		if err != nil {
			return "", fmt.Errorf("a free port on %s: %w", hosts[0], err)
		}
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		free := true
		for _, h := range hosts[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(h, port))
			if err != nil {
				free = false
				break
			}
			l.Close()
		}
		ln.Close()
		if free {
			return port, nil
		}
	}
	return "", fmt.Errorf("no port free on all of %v", hosts)
}

// Stop interrupts the process and waits for it; a clean exit is nil.
func (c *Corral) Stop() error {
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-c.done:
		c.done <- err
		return err
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		err := <-c.done
		c.done <- err
		return fmt.Errorf("corral serve on %s did not stop in 30s: %v", c.Addr, err)
	}
}

// CorralBinary returns $CORRAL_BIN, or builds the repository's
// cmd/corral into dir (with the environment's cgo flags: export the
// Makefile's so that llama.cpp comes from the build cache).
func CorralBinary(dir string) (string, error) {
	if p := os.Getenv("CORRAL_BIN"); p != "" {
		return filepath.Abs(p)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "corral")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/corral")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/corral (set $CORRAL_BIN to skip it): %w\n%s", err, out)
	}
	return bin, nil
}

// ModelsDir returns the folder of the shared test models:
// $CORRAL_TEST_MODELS, else ../shared/models beside the repository.
func ModelsDir() (string, error) {
	d := os.Getenv("CORRAL_TEST_MODELS")
	if d == "" {
		d = "../../../shared/models"
	}
	d, err := filepath.Abs(d)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(d); err != nil {
		return "", errors.New("no test models: set CORRAL_TEST_MODELS or provide ../shared/models")
	}
	return d, nil
}
