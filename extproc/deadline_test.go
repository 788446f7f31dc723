package extproc_test

import (
	"context"
	"testing"
	"time"
)

// deadline is the test's context, ended after a bound no passing run comes
// near: a reply, a settle or an Append that never comes fails the test with
// the context's error instead of hanging the suite until go test's timeout.
func deadline(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
