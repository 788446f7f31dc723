package ledger

import (
	"errors"
	"math"
	"testing"
	"time"
)

// TestNanos: the zero time is 0 and back; the first and last storable
// nanoseconds round-trip; the epoch (0 means unset) and times an int64 of
// nanoseconds cannot hold are ErrInvalid, named by their field.
func TestNanos(t *testing.T) {
	for _, n := range []int64{math.MinInt64, -1, 1, math.MaxInt64} {
		at := time.Unix(0, n).UTC()
		got, err := Nanos("started_at", at)
		if err != nil || got != n || !FromNanos(got).Equal(at) {
			t.Errorf("Nanos(%v) = %d, %v; want %d, round-tripping", at, got, err, n)
		}
	}
	if n, err := Nanos("started_at", time.Time{}); n != 0 || err != nil || !FromNanos(0).IsZero() {
		t.Errorf("the zero time: %d, %v", n, err)
	}
	for _, at := range []time.Time{time.Unix(0, 0), time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if _, err := Nanos("finished_at", at); !errors.Is(err, ErrInvalid) || err.Error()[:len("finished_at: ")] != "finished_at: " {
			t.Errorf("Nanos(%v) = %v; want ErrInvalid naming finished_at", at, err)
		}
	}
}
