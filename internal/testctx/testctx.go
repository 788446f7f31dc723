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

// Wait polls cond every millisecond until it holds, failing t (naming
// what it waited for) when Bound passes first.
func Wait(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", Bound, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Receive returns the next value from ch, failing t (naming what it
// waited for) when Bound passes first. It does not depend on t's
// context, so it bounds a wait in a cleanup function too.
func Receive[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(Bound)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("waited %v for %s", Bound, what)
		panic("unreachable")
	}
}
