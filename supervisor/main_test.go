package supervisor

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/corral-llm/corral/internal/testmodel"
)

// binDir is a scratch folder for the end-to-end tests (synthetic models).
var binDir string

func TestMain(m *testing.M) {
	if ready, ok := os.LookupEnv(fakeLlamaReadyEnv); ok {
		runFakeLlama(ready) // this process is a fake llama-server child
		return
	}
	dir, err := os.MkdirTemp("", "supervisor-test-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		testmodel.RemoveBinary()
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// corralBinary returns the corral binary: $CORRAL_BIN (make test), else
// ./cmd/corral built once per test process. Only the tests that run a real
// corral child call it.
func corralBinary(t *testing.T) string {
	t.Helper()
	return testmodel.Binary(t)
}
