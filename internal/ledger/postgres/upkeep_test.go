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

// TestUpkeep: one round at a given now makes the partitions ahead of it
// and drops the months that end before now minus the retention, and
// nothing more; with retention 0 it drops nothing. Upkeep returns nil
// when its context ends.
func TestUpkeep(t *testing.T) {
	url := newDatabase(t)
	l := openTest(t, url)
	l.log = testenv.Quiet()
	jan, feb, mar := time.Date(2025, 1, 10, 0, 0, 0, 0, time.UTC), time.Date(2025, 2, 10, 0, 0, 0, 0, time.UTC), time.Date(2025, 3, 10, 0, 0, 0, 0, time.UTC)
	insert(t, l, record("req_jan", 1, jan, 100), record("req_feb", 1, feb, 200), record("req_mar", 1, mar, 300))
	now := time.Date(2025, 4, 15, 0, 0, 0, 0, time.UTC)

	l.upkeep(testctx.Deadline(t), 0, now)
	if got := partitions(t, url); !slices.Contains(got, "ledger_records_2025_01") || !slices.Contains(got, "ledger_records_2025_07") {
		t.Fatalf("partitions after a round without retention: %v; want January kept and up to July made (April and three ahead)", got)
	}
	// 45 days before April 15 is March 1: January and February end by
	// then, March does not.
	l.upkeep(testctx.Deadline(t), 45*24*time.Hour, now)
	got := partitions(t, url)
	if slices.Contains(got, "ledger_records_2025_01") || slices.Contains(got, "ledger_records_2025_02") || !slices.Contains(got, "ledger_records_2025_03") {
		t.Errorf("partitions after a round with 45 days' retention at April 15: %v; want January and February dropped, March kept", got)
	}
	recs, err := l.Records(testctx.Deadline(t), ledger.Filter{})
	if err != nil || len(recs) != 1 || recs[0].RequestID != "req_mar" {
		t.Errorf("records after retention: %v, %v; want March's alone", recs, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Upkeep(ctx, time.Hour*24*400, time.Now) }()
	cancel()
	if err := testctx.Receive(t, "Upkeep to return", done); err != nil {
		t.Errorf("Upkeep = %v; want nil when its context ends", err)
	}
}
