package supervisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// binDir holds the corral binary built for the end-to-end tests.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "supervisor-test-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

var (
	buildOnce sync.Once
	buildErr  error
)

// corralBinary builds ./cmd/corral once per test run (with the Makefile's
// cgo flags, so the llama.cpp build is shared) and returns its path. Only
// the tests that run a real corral child call it.
func corralBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir, "corral")
	buildOnce.Do(func() {
		cmd := exec.Command("go", "build", "-o", bin, "github.com/corral-llm/corral/cmd/corral")
		cmd.Env = append(os.Environ(), "CGO_CFLAGS=-O3 -march=native", "CGO_CXXFLAGS=-O3 -march=native")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = err
			t.Logf("go build ./cmd/corral:\n%s", out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build corral: %v", buildErr)
	}
	return bin
}
