package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/testctx"
)

// The tests here pin down how the committer fails: what Run returns when
// a commit fails while it drains the queue, what a refused record costs,
// how a committer that could not be set up is torn down, and what a
// rollback that SQLite already did adds to an Append's error (nothing).

// drain queues recs, then runs the committer with an already-ended
// context, so that every record is committed by Run's drain; it returns
// Run's error and the Appends' errors by RequestID.
func drain(t *testing.T, l *Ledger, recs ...ledger.Record) (error, map[string]error) {
	t.Helper()
	wait := appendAsync(testctx.Deadline(t), l, recs...)
	waitQueued(t, l, len(recs))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	runErr := l.Run(ctx)
	return runErr, wait()
}

// storedIDs are the RequestIDs in l, in the Reader's order.
func storedIDs(t *testing.T, l *Ledger) []string {
	t.Helper()
	got, err := l.Records(testctx.Deadline(t), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return ids(got)
}

// TestDrainReturnsCommitError: a commit that fails while Run drains the
// queue at shutdown is Run's error, whether it is a whole batch's failure
// or a failure of the one-record-per-transaction fallback; the batches
// and records that can be committed still are.
func TestDrainReturnsCommitError(t *testing.T) {
	for _, tt := range []struct {
		name     string
		triggers []string
		maxBatch int
		recs     []string
		failed   []string // the Appends that fail, with "too big"
		stored   []string
		anyFail  bool // which records fail depends on the queue order, not on req_poison
	}{
		{
			// The poison's batch fails as a whole; the next batch is
			// still committed.
			name: "whole batch",
			triggers: []string{`CREATE TRIGGER toobig BEFORE INSERT ON spend
				WHEN NEW.request_id = 'req_poison' BEGIN SELECT zeroblob(2000000000); END`},
			maxBatch: 2,
			recs:     []string{"req_a", "req_poison", "req_c", "req_d"},
			failed:   []string{"req_a", "req_poison"},
			stored:   []string{"req_c", "req_d"},
		},
		{
			// An aggregate row refuses the batch's sum (a new row with
			// more than one request) with a constraint, so the records
			// are committed one per transaction; the second one's then
			// updates the org row, which fails with an error that is
			// not a record's. That error is the fallback's, so Run's.
			name: "one per transaction",
			triggers: []string{
				`CREATE TRIGGER refuse_sum BEFORE INSERT ON spend_agg
					WHEN NEW.requests > 1 BEGIN SELECT RAISE(ABORT, 'refused by test'); END`,
				`CREATE TRIGGER toobig BEFORE UPDATE ON spend_agg
					WHEN NEW.scope = 'org' BEGIN SELECT zeroblob(2000000000); END`,
			},
			// Whichever record is committed second fails: the order
			// the two concurrent Appends were queued in decides which.
			recs:    []string{"req_a", "req_poison"},
			failed:  []string{"req_poison"},
			stored:  []string{"req_a"},
			anyFail: true,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{MaxBatch: tt.maxBatch})
			for _, q := range tt.triggers {
				if _, err := l.db.ExecContext(t.Context(), q); err != nil {
					t.Fatal(err)
				}
			}
			var recs []ledger.Record
			for _, id := range tt.recs {
				recs = append(recs, record(id))
			}
			runErr, errs := drain(t, l, recs...)
			if runErr == nil || !strings.Contains(runErr.Error(), "commit queued records") ||
				!strings.Contains(runErr.Error(), "too big") {
				t.Errorf("Run = %v; want the drain's commit error", runErr)
			}
			// Which records share the poisoned one's batch depends on the
			// order the concurrent Appends were queued in, so the check is
			// by count: as many failures as the case names, the poisoned
			// record among them, each with the commit's error; every other
			// record stored, and no failed one.
			var failed, stored []string
			for _, id := range tt.recs {
				switch err := errs[id]; {
				case err == nil:
					stored = append(stored, id)
				case !strings.Contains(err.Error(), "too big"):
					t.Errorf("Append(%s) = %v; want the commit's error", id, err)
				default:
					failed = append(failed, id)
				}
			}
			if len(failed) != len(tt.failed) || (!tt.anyFail && !slices.Contains(failed, "req_poison")) {
				t.Errorf("failed appends %q; want %d of them, req_poison among them unless any may fail", failed, len(tt.failed))
			}
			if diff := cmp.Diff(stored, storedIDs(t, l)); diff != "" {
				t.Errorf("records (-the appends that succeeded +stored):\n%s", diff)
			}
			if len(stored) != len(tt.stored) {
				t.Errorf("stored %q; want %d records", stored, len(tt.stored))
			}
		})
	}
}

// TestDrainOfRefusedRecordIsNotRunError: a record refused alone (its own
// fault) fails only its Append, even while Run drains: Run returns nil.
// And a batch whose only record was refused costs no commit: nothing is
// left to commit, so no empty transaction follows.
func TestDrainOfRefusedRecordIsNotRunError(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
	_, err := l.db.ExecContext(t.Context(), `CREATE TRIGGER refuse BEFORE INSERT ON spend
		WHEN NEW.request_id = 'req_bad' BEGIN SELECT RAISE(ABORT, 'refused by test'); END`)
	if err != nil {
		t.Fatal(err)
	}
	runErr, errs := drain(t, l, record("req_bad"))
	if runErr != nil {
		t.Errorf("Run = %v; want nil: a record's fault fails only its Append", runErr)
	}
	if err := errs["req_bad"]; err == nil || !strings.Contains(err.Error(), "refused by test") {
		t.Errorf("Append(req_bad) = %v; want the trigger's error", err)
	}
	if records, commits := l.Stats(); records != 0 || commits != 0 {
		t.Errorf("Stats = %d records, %d commits; want none", records, commits)
	}
	if got := storedIDs(t, l); len(got) != 0 {
		t.Errorf("records %v; want none", got)
	}
}

// TestRolledBackAlready: a trigger's RAISE(ROLLBACK) ends the transaction
// itself, so the committer's ROLLBACK finds none ("cannot rollback - no
// transaction is active"). That is not an error: the refused record's
// Append gets the trigger's error alone, and the others are committed.
func TestRolledBackAlready(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
	_, err := l.db.ExecContext(t.Context(), `CREATE TRIGGER refuse BEFORE INSERT ON spend
		WHEN NEW.request_id = 'req_bad' BEGIN SELECT RAISE(ROLLBACK, 'rolled back by test'); END`)
	if err != nil {
		t.Fatal(err)
	}
	wait := appendAsync(testctx.Deadline(t), l, record("req_a"), record("req_bad"), record("req_c"))
	waitQueued(t, l, 3)
	start(t, l)
	errs := wait()
	if errs["req_a"] != nil || errs["req_c"] != nil {
		t.Errorf("good records failed: %v", errs)
	}
	err = errs["req_bad"]
	if err == nil || !strings.Contains(err.Error(), "rolled back by test") {
		t.Errorf("Append(req_bad) = %v; want the trigger's error", err)
	} else if strings.Contains(err.Error(), "rollback") || strings.Contains(err.Error(), "no transaction") {
		t.Errorf("Append(req_bad) = %v; want no error from the rollback SQLite had done", err)
	}
	if diff := cmp.Diff([]string{"req_a", "req_c"}, storedIDs(t, l)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// TestRunCannotPrepare: if a statement cannot be prepared (here spend_agg
// is gone, so addAgg fails and newAgg is never prepared), Run returns the
// error at once, fails what is queued with it, and tears down what it did
// prepare without touching what it did not.
func TestRunCannotPrepare(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
	if _, err := l.db.ExecContext(t.Context(), `ALTER TABLE spend_agg RENAME TO spend_agg_gone`); err != nil {
		t.Fatal(err)
	}
	wait := appendAsync(testctx.Deadline(t), l, record("req_a"))
	waitQueued(t, l, 1)
	err := l.Run(testctx.Deadline(t))
	if err == nil || !strings.Contains(err.Error(), "no such table") {
		t.Errorf("Run = %v; want the prepare's error", err)
	}
	if err := wait()["req_a"]; err == nil || !strings.Contains(err.Error(), "no such table") {
		t.Errorf("Append = %v; want Run's error", err)
	}
	if err := l.Append(testctx.Deadline(t), record("req_after")); !errors.Is(err, ledger.ErrClosed) {
		t.Errorf("Append after Run failed = %v; want ErrClosed", err)
	}
}

// TestQueueHoldsFourBatches: the queue takes 4×MaxBatch records when that
// is more than its floor of 1024, so that many Appends wait queued (not
// for a slot) while the committer is away, and are all committed once it
// runs.
func TestQueueHoldsFourBatches(t *testing.T) {
	const maxBatch, n = 300, 1100 // 1024 < n <= 4*maxBatch
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{MaxBatch: maxBatch})
	wait := appendAsync(testctx.Deadline(t), l, numbered(n)...)
	waitQueued(t, l, n)
	start(t, l)
	for id, err := range wait() {
		if err != nil {
			t.Errorf("Append(%s): %v", id, err)
		}
	}
	if records, _ := l.Stats(); records != n {
		t.Errorf("Stats = %d records; want %d", records, n)
	}
}
