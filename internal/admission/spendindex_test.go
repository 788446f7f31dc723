package admission

import (
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
)

// TestSpendIndexForgetsOldBuckets: at most once a day, an Add drops the
// buckets older than the retention (a month and a week) before it, so the
// index does not grow for ever; lifetime sums stay. Which buckets an Add
// drops is seen in what Spent answers for a time before the retention.
func TestSpendIndexForgetsOldBuckets(t *testing.T) {
	// The oldest bucket the retention keeps at t0 (one exactly at the
	// cutoff is kept); a day later it is outside.
	old := t0.Add(-retention)
	idx := NewSpendIndex([]ledger.Aggregate{{Scope: ledger.ScopeTeam, ID: "t", Bucket: old, Cost: mu(1000)}}, nil)
	for i, tt := range []struct {
		at        time.Time
		sinceOld  int64 // Spent since old, after this Add
		lifetimes int64
	}{
		{t0, 1001, 1},                                // the first Add prunes: old is within the retention
		{t0.Add(24 * time.Hour), 1002, 2},            // a day after the last prune: not yet again
		{t0.Add(24*time.Hour + time.Second), 3, 3},   // more than a day after: old is dropped
		{t0.Add(24*time.Hour + 2*time.Second), 4, 4}, // nothing more to drop
	} {
		idx.Add("team", "t", "", tt.at, micro)
		if got := idx.Spent("team", "t", "", old); got != mu(tt.sinceOld) {
			t.Errorf("add %d at %v: spent since %v = %v, want %d µ$", i+1, tt.at, old, got, tt.sinceOld)
		}
		if got := idx.Spent("team", "t", "", time.Time{}); got != mu(tt.lifetimes) {
			t.Errorf("add %d: lifetime spent %v, want %d µ$", i+1, got, tt.lifetimes)
		}
	}
}
