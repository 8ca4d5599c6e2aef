package llama_test

import (
	"os"
	"testing"

	"github.com/corral-llm/corral/internal/testsynth"
)

// TestMain has the tests load ggml's CPU variant the architecture
// goldens were made with, where the machine runs it.
func TestMain(m *testing.M) {
	testsynth.PinGoldenCPU()
	os.Exit(m.Run())
}
