// Package testctx gives tests a context with a deadline, so that a test
// waiting for something another goroutine must do (a processor's reply,
// an Append's commit) fails with the context's error instead of hanging
// the suite until go test's timeout.
package testctx

import (
	"context"
	"testing"
	"time"
)

// Bound is how long Deadline's context lives: far beyond what any passing
// run comes near, even on a loaded machine.
const Bound = 30 * time.Second

// Deadline is t's context, ended after Bound (or when the test ends).
func Deadline(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), Bound)
	t.Cleanup(cancel)
	return ctx
}
