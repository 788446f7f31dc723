package testctx

import (
	"context"
	"testing"
	"time"
)

// TestDeadline: the context ends at most Bound from now, and is cancelled
// when the test ends.
func TestDeadline(t *testing.T) {
	var ctx context.Context
	t.Run("inner", func(t *testing.T) {
		ctx = Deadline(t)
		d, ok := ctx.Deadline()
		if !ok || time.Until(d) > Bound || time.Until(d) < Bound-time.Minute {
			t.Errorf("deadline %v (set %v), want within %v of now", d, ok, Bound)
		}
		if ctx.Err() != nil {
			t.Errorf("ended early: %v", ctx.Err())
		}
	})
	if ctx.Err() == nil {
		t.Error("the context outlived its test")
	}
}
