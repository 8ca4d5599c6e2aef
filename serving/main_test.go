package serving_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the core's tests leave no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
