package bench

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/corral-llm/corral/internal/testmodel"
)

// corralBin is the corral binary the end-to-end tests run: $CORRAL_BIN
// (make test), else built once for this test process.
var corralBin string

func TestMain(m *testing.M) {
	bin, err := testmodel.BinaryPath()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	corralBin = bin
	// With a Cleanup option goleak leaves the exit to it: without the
	// os.Exit a leak would be printed and the run would still pass.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		testmodel.RemoveBinary()
		os.Exit(code)
	}))
}
