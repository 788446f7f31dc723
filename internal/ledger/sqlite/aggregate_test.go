package sqlite

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/ledgertest"
	"github.com/sluicegw/sluice/internal/sqlitedb"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/tokens"
)

// checkAggregates fails the test unless l's aggregates are the sums of
// its records.
func checkAggregates(t *testing.T, l *Ledger) []ledger.Record {
	t.Helper()
	recs, err := l.Records(t.Context(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.Buckets(t.Context(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ledgertest.ExpectedBuckets(recs, time.Time{}), got); diff != "" {
		t.Errorf("aggregates are not the sums of the %d records (-want +got):\n%s", len(recs), diff)
	}
	return recs
}

// TestMigrationBackfill opens a ledger file written by the first schema
// (no aggregates): Open migrates it, and the aggregates it backfills are
// the sums of the records already there; appends go on adding to them,
// and opening it again changes nothing.
func TestMigrationBackfill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	// The file as the previous release left it: schema version 1 (the
	// first migration, which is never edited), records inserted by its
	// insert statement (insertV1).
	old, err := sqlitedb.Open(t.Context(), path, pragmas, migrations[:1], "ledger", nil)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(2, 1))
	base := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	var recs []ledger.Record
	for i := range 500 {
		r := record(fmt.Sprintf("req_old_%03d", i))
		r.KeyID = fmt.Sprintf("key_%d", rng.IntN(7))
		r.Team = []string{"search", "ads", ""}[rng.IntN(3)]
		r.Org = []string{"acme", ""}[rng.IntN(2)]
		r.Model = []string{"gpt-4o", "claude-sonnet", ""}[rng.IntN(3)]
		r.Tokens[tokens.Input], r.Tokens[tokens.CachedInput], r.Tokens[tokens.Output] = rng.Int64N(5000), rng.Int64N(100), rng.Int64N(900)
		r.CostPico = rng.Int64N(1_000_000) * 1_000_000 // whole µ$, as the first schema held
		switch p := rng.IntN(20); {
		case p == 0: // before 1970: the backfill floors towards the past
			r.StartedAt = time.Unix(-1-rng.Int64N(3600), rng.Int64N(1e9))
		case p == 1: // on a bucket edge
			r.StartedAt = base.Add(time.Duration(rng.IntN(96)) * ledger.BucketWidth)
		case p == 2: // a nanosecond before one
			r.StartedAt = base.Add(time.Duration(rng.IntN(96))*ledger.BucketWidth - 1)
		default:
			r.StartedAt = base.Add(time.Duration(rng.Int64N(int64(48 * time.Hour))))
		}
		if i == 0 {
			r.KeyID = "" // counted under its team and org only
		}
		insertV1(t, old, r)
		r.ClientRequestID = r.RequestID // what migration 3 fills in
		recs = append(recs, r)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	l := openTest(t, path, Options{})
	var v int
	if err := l.db.QueryRowContext(t.Context(), "PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != len(migrations) {
		t.Errorf("user_version after Open = %d; want %d", v, len(migrations))
	}
	if got := checkAggregates(t, l); len(got) != len(recs) {
		t.Fatalf("%d records after the migration; want %d", len(got), len(recs))
	}
	// The hand-computed sums and the backfill agree on one row too, so a
	// shared mistake in ExpectedBuckets and the SQL would show.
	var want ledger.Aggregate
	for _, r := range recs {
		if r.KeyID == "key_3" && r.Model == "gpt-4o" && ledger.BucketOf(r.StartedAt).Equal(base) {
			want.Cost = want.Cost.AddPico(r.CostPico)
			want.Requests++
		}
	}
	bs, err := l.Buckets(t.Context(), base)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range bs {
		if a.Scope == ledger.ScopeKey && a.ID == "key_3" && a.Model == "gpt-4o" && a.Bucket.Equal(base) {
			if a.Cost != want.Cost || a.Requests != want.Requests {
				t.Errorf("key_3/gpt-4o at %v = %v in %d requests; want %v in %d", base, a.Cost, a.Requests, want.Cost, want.Requests)
			}
		}
	}

	// Appends after the migration add to the backfilled rows; a RequestID
	// from before the migration is not counted again.
	start(t, l)
	more := []ledger.Record{record("req_new_1"), record("req_new_2"), recs[1]}
	more[2].CostPico++ // a duplicate with another cost: ignored
	for _, r := range more {
		if err := l.Append(testctx.Deadline(t), r); err != nil {
			t.Fatal(err)
		}
	}
	checkAggregates(t, l)

	// Opening the file again does not backfill again.
	before, err := l.Lifetime(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	again := openTest(t, path, Options{})
	after, err := again.Lifetime(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("Lifetime changed on reopening (-before +after):\n%s", diff)
	}
}

// TestAggregateFailureWritesNothing: when the aggregates cannot be
// written, neither are the records, because both are in one transaction.
// Failures are injected with triggers on spend_agg, on the insert of a
// new row and on the update of an existing one: an error that is no
// record's fault (SQLITE_TOOBIG) fails the whole batch; a constraint
// (RAISE(ABORT)) makes the committer retry each record alone, and only
// the record whose row refuses it fails. Once the trigger is gone, the
// same Appends, retried, land records and aggregates together.
func TestAggregateFailureWritesNothing(t *testing.T) {
	for _, tt := range []struct {
		name, event, body, want string
		wholeBatch              bool
	}{
		{"new row, whole batch", "INSERT", `SELECT zeroblob(2000000000)`, "too big", true},
		{"new row, one record", "INSERT", `SELECT RAISE(ABORT, 'refused by test')`, "refused by test", false},
		{"existing row, whole batch", "UPDATE", `SELECT zeroblob(2000000000)`, "too big", true},
		{"existing row, one record", "UPDATE", `SELECT RAISE(ABORT, 'refused by test')`, "refused by test", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.sqlite")
			l := openTest(t, path, Options{})
			seeded := 0
			if tt.event == "UPDATE" {
				// Another handle creates the org's row, so that this
				// one's committer finds the batch queued when it starts.
				seed := openTest(t, path, Options{})
				stop := start(t, seed)
				r := record("req_seed")
				r.StartedAt = r.StartedAt.Add(time.Minute) // same bucket as the batch
				if err := errors.Join(seed.Append(testctx.Deadline(t), r), stop()); err != nil {
					t.Fatal(err)
				}
				seeded = 1
			}
			_, err := l.db.ExecContext(t.Context(), `CREATE TRIGGER fail_agg BEFORE `+tt.event+` ON spend_agg
				WHEN NEW.scope = 'org' BEGIN `+tt.body+`; END`)
			if err != nil {
				t.Fatal(err)
			}
			batch := numbered(6)
			for i := range batch {
				batch[i].Org = ""
			}
			batch[4].Org = "acme" // only this record's org row fails
			wait := appendAsync(t.Context(), l, batch...)
			waitQueued(t, l, len(batch))
			start(t, l)
			for id, err := range wait() {
				switch {
				case tt.wholeBatch || id == batch[4].RequestID:
					if err == nil || !strings.Contains(err.Error(), tt.want) {
						t.Errorf("Append(%s) = %v; want %q", id, err, tt.want)
					}
				case err != nil:
					t.Errorf("Append(%s) = %v; want it committed alone", id, err)
				}
			}
			recs := checkAggregates(t, l)
			for _, r := range recs {
				if r.RequestID == batch[4].RequestID {
					t.Errorf("%s stored although its aggregate failed", r.RequestID)
				}
			}
			want := seeded + len(batch) - 1 // all but batch[4]
			if tt.wholeBatch {
				want = seeded
			}
			if len(recs) != want {
				t.Errorf("%d records after the failure; want %d", len(recs), want)
			}
			if _, err := l.db.ExecContext(t.Context(), `DROP TRIGGER fail_agg`); err != nil {
				t.Fatal(err)
			}
			for _, r := range batch {
				if err := l.Append(testctx.Deadline(t), r); err != nil {
					t.Fatalf("retry: %v", err)
				}
			}
			if recs := checkAggregates(t, l); len(recs) != seeded+len(batch) {
				t.Errorf("%d records after the retry; want %d", len(recs), seeded+len(batch))
			}
		})
	}
}

// TestAggregateOverflow: a record whose sums would take an aggregate
// beyond int64 (its input tokens here; its cost would need $9.2 trillion)
// is refused alone, whether the overflow is within its batch
// (found in Go, which names the record) or against the stored sum
// (refused by SQLite, after which the committer commits the batch's
// records one by one to find it); the others are committed, and the
// aggregates stay exact.
func TestAggregateOverflow(t *testing.T) {
	path, big := seedBigSum(t)

	l := openTest(t, path, Options{})
	over := big
	over.RequestID, over.Tokens[tokens.Input] = "req_over", 200 // against the stored sum
	// Any two of these fit in one aggregate, all three do not: whichever
	// the batch counts last fails.
	three := numbered(3)
	three[0].Tokens[tokens.Input], three[1].Tokens[tokens.Input], three[2].Tokens[tokens.Input] = math.MaxInt64-100, 60, 60
	fine := record("req_fine")
	fine.KeyID, fine.Team, fine.Org = "key_fine", "team_fine", "org_fine"
	wait := appendAsync(t.Context(), l, over, fine, three[0], three[1], three[2])
	waitQueued(t, l, 5)
	start(t, l)
	errs := wait()
	if err := errs[over.RequestID]; err == nil || !strings.Contains(err.Error(), "cannot store REAL") {
		t.Errorf("Append over the stored sum = %v; want SQLite's refusal", err)
	}
	if err := errs[fine.RequestID]; err != nil {
		t.Errorf("Append(%s) = %v", fine.RequestID, err)
	}
	var failed []string
	for _, r := range three {
		if err := errs[r.RequestID]; err != nil {
			if !errors.Is(err, errOverflow) {
				t.Errorf("Append(%s) = %v; want errOverflow", r.RequestID, err)
			}
			failed = append(failed, r.RequestID)
		}
	}
	if len(failed) != 1 {
		t.Errorf("of three records of one row, %v failed; want exactly one", failed)
	}
	if recs := checkAggregates(t, l); len(recs) != 4 {
		t.Errorf("%d records; want 4: big, fine and two of three", len(recs))
	}
}

// seedBigSum stores, through a handle of its own, a record whose input
// tokens are 100 short of int64's limit, in a new ledger file; it
// returns the file and the record.
func seedBigSum(t *testing.T) (string, ledger.Record) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	seed := openTest(t, path, Options{})
	stop := start(t, seed)
	big := record("req_big")
	big.KeyID, big.Team, big.Org, big.Tokens[tokens.Input] = "key_big", "team_big", "org_big", math.MaxInt64-100
	if err := errors.Join(seed.Append(testctx.Deadline(t), big), stop()); err != nil {
		t.Fatal(err)
	}
	return path, big
}

// TestLifetimeOverflow: a record whose sums would take its lifetime row
// beyond int64, where no bucket's row overflows (the records are an hour
// apart), is refused alone, within its batch or against the stored sum,
// as for a bucket's row; the others are committed, and Lifetime stays the
// sums of the records stored.
func TestLifetimeOverflow(t *testing.T) {
	path, big := seedBigSum(t)

	l := openTest(t, path, Options{})
	later := func(r ledger.Record, id string, input int64) ledger.Record {
		r.RequestID, r.Tokens[tokens.Input] = id, input
		r.StartedAt, r.FinishedAt = r.StartedAt.Add(time.Hour), r.FinishedAt.Add(time.Hour)
		return r
	}
	over := later(big, "req_over", 200) // against the stored lifetime sum
	pair := record("req_pair_0")
	pair.KeyID, pair.Team, pair.Org, pair.Tokens[tokens.Input] = "key_pair", "team_pair", "org_pair", math.MaxInt64-100
	pair1 := later(pair, "req_pair_1", 200) // the pair overflows within the batch
	fine := record("req_fine")
	fine.KeyID, fine.Team, fine.Org = "key_fine", "team_fine", "org_fine"
	wait := appendAsync(t.Context(), l, over, pair, pair1, fine)
	waitQueued(t, l, 4)
	start(t, l)
	errs := wait()
	if err := errs[over.RequestID]; err == nil || !strings.Contains(err.Error(), "cannot store REAL") {
		t.Errorf("Append over the stored lifetime sum = %v; want SQLite's refusal", err)
	}
	if err := errs[fine.RequestID]; err != nil {
		t.Errorf("Append(%s) = %v", fine.RequestID, err)
	}
	var failed []string
	for _, id := range []string{pair.RequestID, pair1.RequestID} {
		if err := errs[id]; err != nil {
			if !errors.Is(err, errOverflow) {
				t.Errorf("Append(%s) = %v; want errOverflow", id, err)
			}
			failed = append(failed, id)
		}
	}
	if len(failed) != 1 {
		t.Errorf("of the pair, %v failed; want exactly one", failed)
	}
	recs := checkAggregates(t, l)
	if len(recs) != 3 {
		t.Errorf("%d records; want 3: big, fine and one of the pair", len(recs))
	}
	life, err := l.Lifetime(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ledgertest.ExpectedLifetime(recs), life); diff != "" {
		t.Errorf("Lifetime is not the sums of the records (-want +got):\n%s", diff)
	}
}

// TestAggregateIndexes checks that Buckets(since) is a range scan of the
// primary key and that Lifetime reads spend_life without a sort.
func TestAggregateIndexes(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
	for _, q := range []struct {
		query     string
		args      []any
		want, not string
	}{
		{bucketsQuery, []any{1740787200}, "SEARCH spend_agg USING PRIMARY KEY (bucket>?)", ""},
		{lifetimeQuery, nil, "SCAN spend_life", "TEMP B-TREE"},
	} {
		plan := explain(t, l, q.query, q.args...)
		if q.want != "" && !strings.Contains(plan, q.want) {
			t.Errorf("plan of %q is %q; want %s", q.query, plan, q.want)
		}
		if q.not != "" && strings.Contains(plan, q.not) {
			t.Errorf("plan of %q is %q; want no %s", q.query, plan, q.not)
		}
	}
}

func explain(t *testing.T, l *Ledger, q string, args ...any) string {
	t.Helper()
	rows, err := l.db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}
