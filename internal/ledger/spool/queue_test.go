package spool

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/testctx"
)

// The queue and the committer, with and without a spool: how Appends
// become batches.

// numbered is n records, req_000 and on.
func numbered(n int) []ledger.Record {
	recs := make([]ledger.Record, n)
	for i := range recs {
		recs[i] = record(fmt.Sprintf("req_%03d", i))
	}
	return recs
}

// appendAsync starts an Append of each record and returns a function that
// waits for them all and returns their errors by RequestID.
func appendAsync(ctx context.Context, l *Ledger, recs ...ledger.Record) (wait func() map[string]error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[string]error{}
	for _, r := range recs {
		wg.Go(func() {
			err := l.Append(ctx, r)
			mu.Lock()
			errs[r.RequestID] = err
			mu.Unlock()
		})
	}
	return func() map[string]error { wg.Wait(); return errs }
}

// eachMode runs fn without a spool and with one.
func eachMode(t *testing.T, fn func(t *testing.T, path string)) {
	t.Run("direct", func(t *testing.T) { fn(t, "") })
	t.Run("spooled", func(t *testing.T) { fn(t, spoolPath(t)) })
}

// TestMaxBatch: Run finds 50 records queued; with MaxBatch 8 it commits
// (or spools) them in exactly 7 batches.
func TestMaxBatch(t *testing.T) {
	eachMode(t, func(t *testing.T, path string) {
		l := openTest(t, Options{Path: path, MaxBatch: 8})
		wait := appendAsync(testctx.Deadline(t), l, numbered(50)...)
		testctx.Wait(t, "50 Appends queued", func() bool { return l.Queued() == 50 })
		start(t, l)
		for id, err := range wait() {
			if err != nil {
				t.Errorf("Append(%s): %v", id, err)
			}
		}
		if records, commits := l.Stats(); records != 50 || commits != 7 {
			t.Errorf("Stats = %d records, %d batches; want 50, 7", records, commits)
		}
	})
}

// TestFullBatchWakesTheCommitter: with a MaxWait an hour away, the Append
// that fills a batch wakes the committer, which takes the batch at once,
// whole.
func TestFullBatchWakesTheCommitter(t *testing.T) {
	eachMode(t, func(t *testing.T, path string) {
		l := openTest(t, Options{Path: path, MaxBatch: 4, MaxWait: time.Hour})
		start(t, l)
		ctx := testctx.Deadline(t)
		recs := numbered(4)
		wait := appendAsync(ctx, l, recs[:3]...)
		testctx.Wait(t, "3 Appends queued", func() bool { return l.Queued() == 3 })
		if err := l.Append(ctx, recs[3]); err != nil {
			t.Fatalf("the Append that filled the batch: %v", err)
		}
		for id, err := range wait() {
			if err != nil {
				t.Errorf("Append(%s): %v", id, err)
			}
		}
		if records, commits := l.Stats(); records != 4 || commits != 1 {
			t.Errorf("Stats = %d records, %d batches; want 4 in one", records, commits)
		}
	})
}

// TestMaxWait: a lone record waits MaxWait for company, then goes alone.
// Only the lower bound is asserted: an upper one would be a timed test;
// that Append returned at all shows the timer fired.
func TestMaxWait(t *testing.T) {
	eachMode(t, func(t *testing.T, path string) {
		l := openTest(t, Options{Path: path, MaxBatch: 1000, MaxWait: 20 * time.Millisecond})
		start(t, l)
		begin := time.Now()
		if err := l.Append(testctx.Deadline(t), record("lone")); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(begin); took < 20*time.Millisecond {
			t.Errorf("Append returned after %v; want at least MaxWait 20ms", took)
		}
	})
}

// TestBatching: 64 appenders, 10 records each, with a short MaxWait:
// the records share batches.
func TestBatching(t *testing.T) {
	eachMode(t, func(t *testing.T, path string) {
		l := openTest(t, Options{Path: path, MaxWait: 5 * time.Millisecond})
		start(t, l)
		var recs []ledger.Record
		for g := range 64 {
			for i := range 10 {
				recs = append(recs, record(fmt.Sprintf("req_%02d_%02d", g, i)))
			}
		}
		for id, err := range appendAsync(testctx.Deadline(t), l, recs...)() {
			if err != nil {
				t.Fatalf("Append(%s): %v", id, err)
			}
		}
		records, commits := l.Stats()
		if records != 640 || commits >= records/4 {
			t.Errorf("Stats = %d records in %d batches; want 640 in batches of 4 or more on average", records, commits)
		}
	})
}

// TestIdle: once the committer (without a spool) or the ingester (with
// one) has had nothing to write for IdleAfter after writing, the Writer's
// Idle is called.
func TestIdle(t *testing.T) {
	eachMode(t, func(t *testing.T, path string) {
		l := openTest(t, Options{Path: path, IdleAfter: time.Millisecond})
		start(t, l)
		if l.Idles() != 0 {
			t.Fatalf("Idle called %d times before anything was written", l.Idles())
		}
		if err := l.Append(testctx.Deadline(t), record("one")); err != nil {
			t.Fatal(err)
		}
		testctx.Wait(t, "the Writer's Idle after the write", func() bool { return l.Idles() > 0 })
	})
}
