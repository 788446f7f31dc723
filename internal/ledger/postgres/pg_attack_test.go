package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/spool"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/internal/tokens"
)

// lifeOf is the lifetime aggregate of scope "key", id key, model, or the
// zero Aggregate.
func lifeOf(t testing.TB, read func(context.Context) ([]ledger.Aggregate, error), key, model string) ledger.Aggregate {
	t.Helper()
	as, err := read(testctx.Deadline(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.Scope == "key" && a.ID == key && a.Model == model {
			return a
		}
	}
	return ledger.Aggregate{}
}

// TestAttackUnstorableTextKeepsSpend: a record whose label PostgreSQL
// cannot store as it is — a client's x-request-id clipped to 128 bytes
// inside a character, holding a NUL, or in Latin-1 — is stored with the
// label made valid (U+FFFD), its cost counted: the money of a record never
// depends on its labels.
func TestAttackUnstorableTextKeepsSpend(t *testing.T) {
	for _, tt := range []struct{ name, clientID string }{
		{"x-request-id clipped inside a rune", (strings.Repeat("a", 127) + "é")[:128]},
		{"x-request-id with a NUL", "abc\x00def"},
		{"x-request-id with Latin-1 bytes", "caf\xe9"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var reported atomic.Int64
			l := openSpooled(t, newDatabase(t), spool.Options{Path: filepath.Join(t.TempDir(), "ledger-spool"),
				OnError: func(error) { reported.Add(1) }})
			ctx := testctx.Deadline(t)
			r := record("req_label", 1, time.Now().UTC(), 7_000_000_000_000)
			r.ClientRequestID = tt.clientID
			if err := l.Append(ctx, r); err != nil {
				t.Fatalf("Append = %v; the record is valid (ledger.Record.Validate) and was acknowledged to the request", err)
			}
			got := lifeOf(t, l.Lifetime, r.KeyID, r.Model)
			if want := money.FromPico(r.CostPico); !got.Cost.Equal(want) {
				t.Errorf("the acknowledged request's lifetime cost = %v (requests %d); want %v: PostgreSQL refused its ClientRequestID %q and the spool dropped the whole record (reported %d times, Dropped %d)",
					got.Cost, got.Requests, want, tt.clientID, reported.Load(), l.Dropped())
			}
		})
	}
}

// TestAttackReplayIntoDroppedMonthReported: a record of a month retention
// dropped before it reached PostgreSQL (a spool replayed after longer
// than ledger.retention) cannot be told from one counted before the drop
// (the month's request ids went with it), so it is skipped — and counted
// and logged (DB.LateDropped, sluice_ledger_late_dropped_total), never
// silently.
func TestAttackReplayIntoDroppedMonthReported(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := newDatabase(t)
	db := openTest(t, url)
	jan := time.Date(2025, 1, 10, 0, 0, 0, 0, time.UTC)
	insert(t, db, record("req_counted", 1, jan, 100))
	if dropped, err := db.DropBefore(ctx, time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC)); err != nil || len(dropped) != 1 {
		t.Fatalf("DropBefore = %v, %v", dropped, err)
	}
	before := lifeOf(t, db.Lifetime, "key_002", "")

	var reported atomic.Int64
	l := openSpooled(t, url, spool.Options{Path: filepath.Join(t.TempDir(), "ledger-spool"), OnError: func(error) { reported.Add(1) }})
	late := record("req_never_counted", 2, jan.Add(time.Hour), 5_000_000)
	if err := l.Append(ctx, late); err != nil {
		t.Fatal(err)
	}
	after := lifeOf(t, l.Lifetime, "key_002", "")
	if after.Requests == before.Requests && reported.Load() == 0 && l.Dropped() == 0 && l.DB().LateDropped() == 0 {
		t.Errorf("an acknowledged record of a dropped month that was never counted vanished: lifetime of its key %v → %v, nothing reported (OnError %d, Dropped %d, LateDropped %d); want it in the lifetime sums, or reported",
			before.Cost, after.Cost, reported.Load(), l.Dropped(), l.DB().LateDropped())
	}
}

// TestAttackDropRacesInsert: a regression guard. Retention drops January
// while inserts of January's records — some stored already, some new,
// some twice in a batch — and of this month's run on other connections.
// Whatever the interleaving (the drop waiting, the insert waiting, a
// deadlock retried), no record is counted twice: each January record
// costs a distinct power of two, so a record counted twice carries into
// the next bit and the lifetime's request count no longer equals the
// popcount of its cost. A replay afterwards changes nothing.
func TestAttackDropRacesInsert(t *testing.T) {
	jan := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := time.Now().UTC()
	for round := range 4 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			ctx := testctx.Deadline(t)
			url := newDatabase(t)
			a, b := openTest(t, url), openTest(t, url)
			var old, cur []ledger.Record
			for i := range 50 {
				r := record(fmt.Sprintf("req_jan_%02d", i), 0, jan.Add(time.Duration(i)*time.Hour), int64(1)<<i)
				r.KeyID, r.Team, r.Org, r.Model = "key_jan", "team_jan", "org_jan", "m"
				old = append(old, r)
				c := record(fmt.Sprintf("req_now_%02d", i), 1, now.Add(-time.Duration(i)*time.Second), int64(1)<<i)
				c.KeyID, c.Team, c.Org, c.Model = "key_now", "team_now", "org_now", "m"
				cur = append(cur, c)
			}
			insert(t, a, old[:20]...)
			var wg sync.WaitGroup
			var insertErrs []error
			var mu sync.Mutex
			for w := range 3 {
				wg.Go(func() {
					for k := range 10 {
						batch := []ledger.Record{old[(w*7+k*3)%50], old[(w*11+k*5)%50], old[(w*7+k*3)%50], cur[(w*13+k)%50]}
						for attempt := 0; ; attempt++ {
							bad, err := b.Insert(ctx, batch)
							if err == nil {
								break
							}
							if bad >= 0 || refused(err) || attempt > 20 || ctx.Err() != nil {
								mu.Lock()
								insertErrs = append(insertErrs, fmt.Errorf("Insert = %d, %w", bad, err))
								mu.Unlock()
								return
							}
						}
					}
				})
			}
			wg.Go(func() {
				for attempt := 0; ; attempt++ {
					_, err := a.DropBefore(ctx, jan.AddDate(0, 1, 0))
					if err == nil || attempt > 20 || ctx.Err() != nil {
						if err != nil {
							mu.Lock()
							insertErrs = append(insertErrs, fmt.Errorf("DropBefore: %w", err))
							mu.Unlock()
						}
						return
					}
				}
			})
			wg.Wait()
			if err := errors.Join(insertErrs...); err != nil {
				t.Fatalf("a record refused or an operation that never succeeded: %v", err)
			}
			check := func(when string) ledger.Aggregate {
				t.Helper()
				for _, key := range []string{"key_jan", "key_now"} {
					got := lifeOf(t, a.Lifetime, key, "m")
					c := uint64(got.Cost.Pico())
					if int64(bits.OnesCount64(c)) != got.Requests {
						t.Errorf("%s: lifetime of %s: cost %b over %d requests: a record counted twice", when, key, c, got.Requests)
					}
				}
				return lifeOf(t, a.Lifetime, "key_jan", "m")
			}
			first := check("after the race")
			insert(t, a, old...)
			insert(t, a, cur...)
			if again := check("after a replay"); !again.Cost.Equal(first.Cost) {
				t.Errorf("a replay of January after its drop changed its lifetime cost: %v → %v", first.Cost, again.Cost)
			}
			if n := count(t, a, "ledger_records"); n != len(cur) {
				t.Errorf("%d records after the race and a replay; want this month's %d (January dropped)", n, len(cur))
			}
		})
	}
}

// TestAttackEdgesOfTime: a regression guard. Records at the ends of what
// a ledger stores (1677 and 2262, whose partitions are open-ended), a
// nanosecond either side of the epoch and of a month's edge, finished
// before they started, with the largest token counts and costs (two
// records' cost past an int64, in the numeric aggregates), and request ids
// differing only in case or Unicode normalization (distinct, bytewise, as
// in every ledger): stored and read back as they are, the aggregates
// their sums, a second insert a no-op; retention then drops the 1677 and
// 1969 months, and their records replayed are skipped.
func TestAttackEdgesOfTime(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := newDatabase(t)
	l := openTest(t, url)
	mar := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	epoch := time.Unix(0, 0).UTC()
	var recs []ledger.Record
	add := func(id string, k int, at time.Time, cost int64, f func(*ledger.Record)) {
		r := record(id, k, at, cost)
		if f != nil {
			f(&r)
		}
		recs = append(recs, r)
	}
	add("req_first", 1, firstStorable, 1, func(r *ledger.Record) { r.FinishedAt = firstStorable })
	add("req_last", 2, lastStorable, 2, func(r *ledger.Record) { r.FinishedAt = lastStorable.Add(-time.Hour) })
	add("req_pre_epoch", 3, epoch.Add(-time.Nanosecond), 3, nil)
	add("req_post_epoch", 4, epoch.Add(time.Nanosecond), 4, func(r *ledger.Record) { r.FinishedAt = time.Time{} })
	add("req_feb_last", 5, mar.Add(-time.Nanosecond), 5, nil)
	add("req_mar_first", 5, mar, 6, nil)
	add("req_backwards", 6, mar.Add(time.Hour), 7, func(r *ledger.Record) { r.FinishedAt = r.StartedAt.Add(-time.Hour) })
	// Their own key, team and org: a token count of MaxInt64 fills every
	// aggregate it is in (and a record more there would be refused).
	big := func(r *ledger.Record) {
		r.KeyID, r.Team, r.Org, r.Tokens = "key_big", "team_big", "org_big", tokens.Counts{}
	}
	add("req_big_1", 7, mar.Add(2*time.Hour), math.MaxInt64, func(r *ledger.Record) {
		big(r)
		r.Tokens[tokens.Input] = math.MaxInt64
	})
	add("req_big_2", 7, mar.Add(2*time.Hour+time.Second), math.MaxInt64, big)
	for _, id := range []string{"Req-Case", "req-case", "REQ-CASE", "caf\u00e9", "cafe\u0301", "req\u212a", "reqK"} {
		add(id, 8, mar.Add(3*time.Hour), 1_000_000, nil)
	}
	insert(t, l, recs...)
	s := stateOf(t, l)
	if len(s.Records) != len(recs) {
		t.Fatalf("%d records stored; want %d", len(s.Records), len(recs))
	}
	want := slices.Clone(recs)
	for i := range want {
		want[i].StartedAt, want[i].FinishedAt = ledger.FromNanos(want[i].StartedAt.UnixNano()), utcOrZero(want[i].FinishedAt)
	}
	byID := func(rs []ledger.Record) map[string]ledger.Record {
		m := map[string]ledger.Record{}
		for _, r := range rs {
			m[r.RequestID] = r
		}
		return m
	}
	if diff := cmp.Diff(byID(want), byID(s.Records)); diff != "" {
		t.Errorf("records read back (-inserted +read):\n%s", diff)
	}
	checkAggregates(t, s)
	insert(t, l, recs...)
	if diff := cmp.Diff(s, stateOf(t, l)); diff != "" {
		t.Errorf("inserting the same records again changed the ledger (-first +again):\n%s", diff)
	}
	dropped, err := l.DropBefore(ctx, time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil || !slices.Contains(dropped, "ledger_records_1677_09") || !slices.Contains(dropped, "ledger_records_1969_12") {
		t.Fatalf("DropBefore(1970) = %v, %v; want the 1677-09 and 1969-12 months dropped", dropped, err)
	}
	life := stateOf(t, l).Lifetime
	insert(t, l, recs...)
	after := stateOf(t, l)
	if diff := cmp.Diff(life, after.Lifetime); diff != "" {
		t.Errorf("a replay after the drop changed the lifetime sums (-before +after):\n%s", diff)
	}
	if len(after.Records) != len(recs)-2 {
		t.Errorf("%d records after the drop and a replay; want %d", len(after.Records), len(recs)-2)
	}
}

func utcOrZero(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// TestAttackTwoReplicasReplayOneSpool: a regression guard. A spool that
// holds acknowledged records the database never got (its ingestion
// failing until the stop) is copied — a volume snapshot restored under a
// second replica — and both copies are replayed into the one database at
// once, each by the Open of a replica of its own: every record is stored
// and counted once.
func TestAttackTwoReplicasReplayOneSpool(t *testing.T) {
	url := newDatabase(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger-spool")
	l, err := Open(context.Background(), url, Options{Log: testenv.Quiet(), Spool: spool.Options{Path: path,
		Fault: func(op string) error {
			if op == "commit" {
				return errors.New("injected: the database is unreachable")
			}
			return nil
		}}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()
	ctx := testctx.Deadline(t)
	var recs []ledger.Record
	start := time.Now().UTC().Add(-time.Hour)
	for i := range 300 {
		r := record(fmt.Sprintf("req_%04d", i), i%13, start.Add(time.Duration(i)*time.Millisecond), int64(1000+i))
		if i%7 == 0 && i > 0 {
			r.RequestID = recs[i-1].RequestID // a retried Append
		}
		recs = append(recs, r)
		if err := l.Append(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	if err := testctx.Receive(t, "Run to return", done); err == nil {
		t.Fatal("Run returned nil with every ingestion failing; want the records left in the spool")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(t.TempDir(), "ledger-spool")
	copyFile(t, path, copyPath)

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, p := range []string{path, copyPath} {
		wg.Go(func() {
			r, err := Open(testctx.Deadline(t), url, Options{Log: testenv.Quiet(), Spool: spool.Options{Path: p}})
			if err != nil {
				errs[i] = err
				return
			}
			errs[i] = r.Close()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	db := openTest(t, url)
	s := stateOf(t, db)
	ids := map[string]bool{}
	for _, r := range recs {
		ids[r.RequestID] = true
	}
	if len(s.Records) != len(ids) {
		t.Errorf("%d records after two replays of one spool; want %d", len(s.Records), len(ids))
	}
	checkAggregates(t, s)
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAttackFastClockDropsNothingCurrent: a replica whose clock runs two
// months ahead runs its upkeep: retention's cutoff comes from the
// database's clock, which the fleet shares, so the current month — its
// records, buckets and ids — stays, and no range is noted dropped.
func TestAttackFastClockDropsNothingCurrent(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := newDatabase(t)
	healthy, skewed := openTest(t, url), openTest(t, url)
	now := time.Now().UTC()
	insert(t, healthy, record("req_before", 1, now.Add(-time.Minute), 1_000_000))
	const retention = 744 * time.Hour
	// The skewed replica's clock: two months and a day ahead.
	skewed.upkeep(ctx, retention, now.AddDate(0, 2, 1))
	// A healthy replica goes on recording this month's requests.
	insert(t, healthy, record("req_after", 1, now, 2_000_000))
	s := stateOf(t, healthy)
	ids := make([]string, len(s.Records))
	for i, r := range s.Records {
		ids[i] = r.RequestID
	}
	slices.Sort(ids)
	if diff := cmp.Diff([]string{"req_after", "req_before"}, ids); diff != "" {
		t.Errorf("this month's records after a replica with a clock two months fast ran its upkeep (-want +got):\n%s", diff)
	}
	if n := count(t, healthy, "ledger_dropped"); n != 0 {
		t.Errorf("ledger_dropped holds %d ranges, this month's among them; want none: the month is not over", n)
	}
}

// TestAttackDetachedPartitionBlamesTheRecord: an operator detached an old
// month's partition to archive it (the table still exists). A record of
// that month cannot be placed even after Insert made what was missing:
// it is blamed (its index returned, the spool drops and reports it)
// rather than failing the batch, which the spool would retry forever with
// every record behind it.
func TestAttackDetachedPartitionBlamesTheRecord(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := newDatabase(t)
	l := openTest(t, url)
	jan := time.Date(2025, 1, 10, 0, 0, 0, 0, time.UTC)
	insert(t, l, record("req_jan", 1, jan, 100))
	exec(t, url, `ALTER TABLE ledger_records DETACH PARTITION ledger_records_2025_01`)
	now := record("req_now", 2, time.Now().UTC(), 200)
	bad, err := l.Insert(ctx, []ledger.Record{record("req_jan_late", 3, jan.Add(time.Hour), 300), now})
	if err != nil && bad < 0 && !(sink{}).RecordFault(err) {
		t.Errorf("Insert of a batch with a record of a detached month = %d, %v: an error the spool retries forever, the batch's other records (this month's) stuck with it", bad, err)
	}
}
