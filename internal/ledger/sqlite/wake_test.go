package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/testctx"
)

// TestFullBatchWakesTheCommitter: with a MaxWait far away, the Append
// that fills a batch wakes the committer, which commits the batch at
// once, in one transaction.
func TestFullBatchWakesTheCommitter(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{MaxBatch: 4, MaxWait: time.Hour})
	start(t, l)
	ctx := testctx.Deadline(t)
	recs := numbered(4)
	wait := appendAsync(ctx, l, recs[:3]...)
	waitQueued(t, l, 3)
	if err := l.Append(ctx, recs[3]); err != nil {
		t.Fatalf("the Append that filled the batch: %v", err)
	}
	for id, err := range wait() {
		if err != nil {
			t.Errorf("Append(%s): %v", id, err)
		}
	}
	if records, commits := l.Stats(); records != 4 || commits != 1 {
		t.Errorf("Stats = %d records, %d commits; want 4 in one", records, commits)
	}
}
