package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// corralBin is the corral binary the end-to-end tests run, built once.
var corralBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bench-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	corralBin = filepath.Join(dir, "corral")
	build := exec.Command("go", "build", "-o", corralBin, "github.com/corral-llm/corral/cmd/corral")
	// The Makefile's flags, so the llama.cpp objects come from the cache.
	build.Env = append(os.Environ(), "CGO_CFLAGS=-O3 -march=native", "CGO_CXXFLAGS=-O3 -march=native")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build corral: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { os.RemoveAll(dir) }))
}
