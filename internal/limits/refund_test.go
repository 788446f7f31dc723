package limits

import (
	"testing"
	"time"
)

// TestAdjustOldestBucket: a refund for a reservation in the oldest bucket
// still in the window (it counts whole, B buckets back) is taken from it;
// once that bucket has left, there is nothing to refund and nothing is.
func TestAdjustOldestBucket(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) // on a 15 s bucket boundary
	const key = "k/tokens/1m"
	remaining := func(c *Counters, now time.Time) int64 {
		t.Helper()
		return c.Admit(now, []Demand{{Key: key, Period: time.Minute, Limit: 100}}).Remaining[0]
	}
	for _, tt := range []struct {
		name  string
		after time.Duration // from the reservation to the refund
		want  int64
	}{
		{"newest bucket", 0, 94},
		{"oldest bucket in the window", 4 * 15 * time.Second, 94}, // B = 4 buckets back: still counted
		{"oldest bucket, its last nanosecond", 5*15*time.Second - time.Nanosecond, 94},
		{"left the window", 5 * 15 * time.Second, 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Options{Buckets: 4})
			if !c.Admit(start, []Demand{{Key: key, Period: time.Minute, Limit: 100, Amount: 10}}).Admitted {
				t.Fatal("refused")
			}
			now := start.Add(tt.after)
			c.Adjust(start, now, key, time.Minute, -4)
			if got := remaining(c, now); got != tt.want {
				t.Errorf("remaining %d after a refund of 4 on 10 reserved, want %d", got, tt.want)
			}
		})
	}
}
