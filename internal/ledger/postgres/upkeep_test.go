package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv"
)

// TestUpkeep: one round makes the partitions ahead of its now and drops
// the months that end before the database's now minus the retention, and
// nothing more, whatever the replica's clock says; with retention 0 it
// drops nothing. Upkeep returns nil
// when its context ends.
func TestUpkeep(t *testing.T) {
	url := newDatabase(t)
	l := openTest(t, url)
	l.log = testenv.Quiet()
	// Retention goes by the database's clock (here the machine's).
	now := time.Now().UTC()
	old, recent := now.AddDate(-2, 0, 0), now.Add(-time.Minute)
	insert(t, l, record("req_old", 1, old, 100), record("req_recent", 1, recent, 300))
	oldName, aheadName := monthOf(old).name(), monthOf(now).next().next().next().name()

	// Without retention: partitions made ahead, nothing dropped.
	l.upkeep(testctx.Deadline(t), 0, now)
	if got := partitions(t, url); !slices.Contains(got, oldName) || !slices.Contains(got, aheadName) {
		t.Fatalf("partitions after a round without retention: %v; want %s kept and up to %s made (this month and three ahead)", got, oldName, aheadName)
	}
	// 400 days: the month two years ago ended before the cutoff, this one
	// did not. The replica's own clock, two months fast, is not asked.
	l.upkeep(testctx.Deadline(t), 400*24*time.Hour, now.AddDate(0, 2, 0))
	got := partitions(t, url)
	if slices.Contains(got, oldName) || !slices.Contains(got, monthOf(now).name()) {
		t.Errorf("partitions after a round with 400 days' retention: %v; want %s dropped, this month's kept", got, oldName)
	}
	recs, err := l.Records(testctx.Deadline(t), ledger.Filter{})
	if err != nil || len(recs) != 1 || recs[0].RequestID != "req_recent" {
		t.Errorf("records after retention: %v, %v; want the recent one alone", recs, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Upkeep(ctx, time.Hour*24*400, time.Now) }()
	cancel()
	if err := testctx.Receive(t, "Upkeep to return", done); err != nil {
		t.Errorf("Upkeep = %v; want nil when its context ends", err)
	}
}
