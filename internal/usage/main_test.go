package usage

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a decoder goroutine behind: Close
// must always end it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
