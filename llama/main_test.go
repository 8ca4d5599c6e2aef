package llama_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/corral-llm/corral/internal/testsynth"
)

// archDir holds the synthetic models of llama.cpp's architectures
// (testsynth.Arch), each written once for all the tests that load it.
var archDir string

// TestMain has the tests load ggml's CPU variant the architecture
// goldens were made with, where the machine runs it, and makes archDir.
func TestMain(m *testing.M) {
	testsynth.PinGoldenCPU()
	dir, err := os.MkdirTemp("", "corral-llama-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	archDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
