// Package e2e holds corral's end-to-end tests: the real engine on a real
// tiny model behind the real server.Server on a loopback port (see
// internal/e2etest), spoken to over HTTP, by the official SDKs (openai-go,
// anthropic-sdk-go, Ollama's client) and by a headless browser; and real
// `corral serve` processes sent hostile requests (chaos_test.go). With the
// build tag gpu, the offload tests (gpu_test.go).
package e2e

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/corral-llm/corral/internal/testmodel"
)

// TestMain checks for leaked goroutines, and deletes the corral binary
// the subprocess tests built if they built one (plain go test). With a
// Cleanup option goleak leaves the exit to it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		testmodel.RemoveBinary()
		os.Exit(code)
	}))
}
