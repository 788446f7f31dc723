package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/ledgertest"
	"github.com/sluicegw/sluice/internal/ledger/spool"
	"github.com/sluicegw/sluice/internal/pgmigrate"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/internal/testenv/pgtest"
	"github.com/sluicegw/sluice/internal/tokens"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// backend is a Ledger as ledgertest wants it: Append inserts the one
// record at once, as the spool's ingester would, so the suite checks
// Insert and the reads without a spool in front.
type backend struct{ *DB }

func (b backend) Append(ctx context.Context, r ledger.Record) error {
	_, err := b.Insert(ctx, []ledger.Record{r})
	return err
}

func TestContract(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledgertest.Backend {
		return backend{openTest(t, newDatabase(t))}
	})
}

// TestContractSpooled runs the suite against the Ledger serve runs: the
// spool in front of the database, Append acknowledged once the spool
// holds the record, reads waiting until the database does.
func TestContractSpooled(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledgertest.Backend {
		return openSpooled(t, newDatabase(t), spool.Options{Path: filepath.Join(t.TempDir(), "ledger-spool")})
	})
}

// openSpooled opens a Ledger with so for its spool, runs it until the
// test ends, and closes it.
func openSpooled(t testing.TB, url string, so spool.Options) *Ledger {
	t.Helper()
	l, err := Open(context.Background(), url, Options{Log: testenv.Quiet(), Spool: so})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := testctx.Receive(t, "Run to return", done); err != nil {
			t.Errorf("Run: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

// newDatabase is the URL of a new database migrated to the ledger's
// schema.
func newDatabase(t testing.TB) string {
	t.Helper()
	url := pgtest.Database(t)
	if _, _, err := Migrate(context.Background(), url, testenv.Quiet()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return url
}

// openTest opens the ledger at url and closes it when the test ends.
func openTest(t testing.TB, url string) *DB {
	t.Helper()
	l, err := OpenDB(context.Background(), url, Options{Log: testenv.Quiet()})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

func TestMigrate(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := pgtest.Database(t)
	for _, want := range [][2]int{{0, len(migrations)}, {len(migrations), len(migrations)}} {
		from, to, err := Migrate(ctx, url, nil)
		if err != nil || from != want[0] || to != want[1] {
			t.Errorf("Migrate = %d, %d, %v; want %d, %d, nil", from, to, err, want[0], want[1])
		}
	}
}

// TestOpenRefusesSchema: Open never migrates; it refuses a schema older
// or newer than its own and says what to do.
func TestOpenRefusesSchema(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := pgtest.Database(t)
	open := func(want error, msg string) {
		t.Helper()
		l, err := OpenDB(ctx, url, Options{})
		if err == nil {
			l.Close()
		}
		if !errors.Is(err, want) || !strings.Contains(err.Error(), msg) {
			t.Errorf("Open = %v; want %v saying %q", err, want, msg)
		}
	}
	open(pgmigrate.ErrTooOld, fmt.Sprintf("ledger schema version 0 is older than this sluice needs (%d); run `sluice migrate`", len(migrations)))
	if _, _, err := Migrate(ctx, url, nil); err != nil {
		t.Fatal(err)
	}
	exec(t, url, `UPDATE sluice_schema SET version = 99 WHERE component = 'ledger'`)
	open(pgmigrate.ErrTooNew, fmt.Sprintf("ledger schema version 99 is newer than this sluice knows (%d); upgrade sluice", len(migrations)))
	if n := len(partitions(t, url)); n != 0 {
		t.Errorf("%d partitions made by a refused Open; want none", n)
	}
}

// exec runs sql on a connection of its own.
func exec(t testing.TB, url, sql string, args ...any) {
	t.Helper()
	ctx := testctx.Deadline(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// partitions are the names of ledger_records' partitions, sorted.
func partitions(t testing.TB, url string) []string {
	t.Helper()
	ctx := testctx.Deadline(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = to_regclass('ledger_records') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// count is the number of rows of table.
func count(t testing.TB, l *DB, table string) int {
	t.Helper()
	var n int
	if err := l.pool.QueryRow(testctx.Deadline(t), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMonths: a month's name, bounds and buckets, at the ends of what a
// ledger stores and across the epoch.
func TestMonths(t *testing.T) {
	for _, tt := range []struct {
		at                 time.Time
		name, bounds       string
		bucketLo, bucketHi int64
	}{
		{time.Date(2025, 3, 17, 5, 0, 0, 0, time.FixedZone("+5:30", 5*3600+1800)), "ledger_records_2025_03",
			"FROM (1740787200000000000) TO (1743465600000000000)", 1740787200, 1743465599},
		{time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Nanosecond), "ledger_records_1969_12",
			"FROM (-2678400000000000) TO (0)", -2678400, -1},
		{firstStorable, "ledger_records_1677_09", "FROM (MINVALUE) TO (-9222508800000000000)", math.MinInt64, -9222508801},
		{lastStorable, "ledger_records_2262_04", "FROM (9222422400000000000) TO (MAXVALUE)", 9222422400, math.MaxInt64},
	} {
		m := monthOf(tt.at)
		lo, hi := m.buckets()
		if m.name() != tt.name || m.bounds() != tt.bounds || lo != tt.bucketLo || hi != tt.bucketHi {
			t.Errorf("monthOf(%v) = %s %s buckets %d..%d; want %s %s buckets %d..%d",
				tt.at, m.name(), m.bounds(), lo, hi, tt.name, tt.bounds, tt.bucketLo, tt.bucketHi)
		}
		if p, ok := parseMonth(m.name()); !ok || p != m {
			t.Errorf("parseMonth(%s) = %v, %v; want %v", m.name(), p, ok, m)
		}
	}
	for _, name := range []string{"ledger_records", "ledger_records_2025_13", "ledger_records_2025_3", "other_2025_03"} {
		if m, ok := parseMonth(name); ok {
			t.Errorf("parseMonth(%s) = %v; want not ours", name, m)
		}
	}
}

// TestEnsurePartitions: Open makes this month's partition and the next
// three; EnsurePartitions makes those of another month the same way, and
// again finds nothing to do.
func TestEnsurePartitions(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := newDatabase(t)
	l := openTest(t, url)
	var want []string
	for m, i := monthOf(time.Now()), 0; i <= Ahead; m, i = m.next(), i+1 {
		want = append(want, m.name())
	}
	if diff := cmp.Diff(want, partitions(t, url)); diff != "" {
		t.Errorf("partitions after Open (-want +got):\n%s", diff)
	}
	for range 2 {
		if err := l.EnsurePartitions(ctx, time.Date(2030, 11, 30, 23, 0, 0, 0, time.UTC)); err != nil {
			t.Fatal(err)
		}
	}
	want = append(want, "ledger_records_2030_11", "ledger_records_2030_12", "ledger_records_2031_01", "ledger_records_2031_02")
	if diff := cmp.Diff(want, partitions(t, url)); diff != "" {
		t.Errorf("partitions after EnsurePartitions (-want +got):\n%s", diff)
	}
}

// record is a record of key k at started, costing cost.
func record(id string, k int, started time.Time, cost int64) ledger.Record {
	return ledger.Record{
		RequestID: id, KeyID: fmt.Sprintf("key_%03d", k), Team: fmt.Sprintf("team_%d", k%7), Org: fmt.Sprintf("org_%d", k%3),
		Model: []string{"gpt-4o", "claude-sonnet", ""}[k%3], Endpoint: "chat_completions", Provider: "p", UpstreamModel: "u",
		Tokens:   tokens.Counts{tokens.Input: int64(100 + k), tokens.CachedInput: int64(k), tokens.Output: int64(10 + k), tokens.Reasoning: 3},
		CostPico: cost, Priced: true, Status: 200, Outcome: "ok",
		StartedAt: started, FinishedAt: started.Add(time.Second), TTFT: time.Millisecond,
	}
}

// batch is n records over the three months from 2025-01-01, their keys,
// costs and times spread, every tenth a duplicate of an earlier RequestID
// (otherwise different).
func batch(n int) []ledger.Record {
	rng := rand.New(rand.NewPCG(7, 11))
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	recs := make([]ledger.Record, n)
	for i := range recs {
		at := base.Add(time.Duration(rng.Int64N(int64(90 * 24 * time.Hour))))
		recs[i] = record(fmt.Sprintf("req_%05d", i), rng.IntN(50), at, rng.Int64N(5_000_000_000_000))
		if i > 0 && i%10 == 0 {
			recs[i].RequestID = recs[rng.IntN(i)].RequestID
		}
	}
	return recs
}

// state is everything a ledger reports.
type state struct {
	Records           []ledger.Record
	Buckets, Lifetime []ledger.Aggregate
}

func stateOf(t testing.TB, l *DB) state {
	t.Helper()
	ctx := testctx.Deadline(t)
	var (
		s   state
		err error
	)
	if s.Records, err = l.Records(ctx, ledger.Filter{}); err != nil {
		t.Fatal(err)
	}
	if s.Buckets, err = l.Buckets(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if s.Lifetime, err = l.Lifetime(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// checkAggregates checks that the aggregates are the sums of the records.
func checkAggregates(t testing.TB, s state) {
	t.Helper()
	if diff := cmp.Diff(ledgertest.ExpectedBuckets(s.Records, time.Time{}), s.Buckets, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Buckets are not the sums of the records (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ledgertest.ExpectedLifetime(s.Records), s.Lifetime, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Lifetime is not the sum of the records (-want +got):\n%s", diff)
	}
}

// insert inserts recs, which must all be good.
func insert(t testing.TB, l *DB, recs ...ledger.Record) {
	t.Helper()
	if bad, err := l.Insert(testctx.Deadline(t), recs); bad != -1 || err != nil {
		t.Fatalf("Insert = %d, %v; want -1, nil", bad, err)
	}
}

// TestInsertBatch: a thousand records (a tenth of them repeating an
// earlier RequestID) in one Insert, over three months whose partitions
// Insert makes: the first record of each RequestID is stored, and the
// aggregates are its sums.
func TestInsertBatch(t *testing.T) {
	l := openTest(t, newDatabase(t))
	recs := batch(1000)
	insert(t, l, recs...)
	first := map[string]ledger.Record{}
	for _, r := range recs {
		if _, ok := first[r.RequestID]; !ok {
			first[r.RequestID] = r
		}
	}
	s := stateOf(t, l)
	if len(s.Records) != len(first) {
		t.Fatalf("%d records; want %d", len(s.Records), len(first))
	}
	for _, r := range s.Records {
		if diff := cmp.Diff(first[r.RequestID], r); diff != "" {
			t.Errorf("%s is not the first record of its RequestID (-want +got):\n%s", r.RequestID, diff)
		}
	}
	checkAggregates(t, s)
	if n := count(t, l, "ledger_ids"); n != len(first) {
		t.Errorf("ledger_ids holds %d ids; want %d", n, len(first))
	}
}

// TestInsertTwice: a batch inserted again, whole or in parts, changes
// neither the records nor the aggregates.
func TestInsertTwice(t *testing.T) {
	l := openTest(t, newDatabase(t))
	recs := batch(300)
	insert(t, l, recs...)
	want := stateOf(t, l)
	checkAggregates(t, want)
	insert(t, l, recs...)
	insert(t, l, recs[100:200]...)
	insert(t, l, recs[250])
	if diff := cmp.Diff(want, stateOf(t, l)); diff != "" {
		t.Errorf("after inserting the batch again (-first +again):\n%s", diff)
	}
}

// TestConcurrentInserts: two replicas insert the same records at once,
// in opposite orders and batches of their own: no error (their ids and
// aggregate rows are taken in one order, so they never deadlock), and
// each record is stored and counted once.
func TestConcurrentInserts(t *testing.T) {
	url := newDatabase(t)
	a, b := openTest(t, url), openTest(t, url)
	recs := batch(600)
	rev := slices.Clone(recs)
	slices.Reverse(rev)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, in := range []struct {
		l    *DB
		recs []ledger.Record
	}{{a, recs}, {b, rev}} {
		wg.Go(func() {
			ctx := testctx.Deadline(t)
			for c := range slices.Chunk(in.recs, 50) {
				if bad, err := in.l.Insert(ctx, c); err != nil {
					errs[i] = fmt.Errorf("Insert = %d, %w", bad, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	s := stateOf(t, a)
	ids := map[string]bool{}
	for _, r := range recs {
		ids[r.RequestID] = true
	}
	if len(s.Records) != len(ids) {
		t.Errorf("%d records; want %d", len(s.Records), len(ids))
	}
	checkAggregates(t, s)
}

// TestPartitionOnDemand: a record two years ahead, in a month with no
// partition, makes one, alone and in a batch with records of months that
// have theirs.
func TestPartitionOnDemand(t *testing.T) {
	url := newDatabase(t)
	l := openTest(t, url)
	now := time.Now().UTC()
	ahead := now.AddDate(2, 0, 0)
	name := monthOf(ahead).name()
	if slices.Contains(partitions(t, url), name) {
		t.Fatalf("%s exists before any record needs it", name)
	}
	insert(t, l, record("req_now", 1, now, 10), record("req_ahead", 2, ahead, 20), record("req_later", 3, ahead.AddDate(0, 1, 0), 30))
	got := partitions(t, url)
	for _, want := range []string{name, monthOf(ahead.AddDate(0, 1, 0)).name()} {
		if !slices.Contains(got, want) {
			t.Errorf("partitions %v; want %s among them", got, want)
		}
	}
	s := stateOf(t, l)
	if len(s.Records) != 3 {
		t.Errorf("%d records; want 3", len(s.Records))
	}
	checkAggregates(t, s)
}

// TestSynchronousCommit: Insert commits with synchronous_commit on, even
// where the database's default is off.
func TestSynchronousCommit(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := newDatabase(t)
	exec(t, url, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET synchronous_commit = off', current_database()); END $$`)
	l := openTest(t, url)
	var outside string
	if err := l.pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&outside); err != nil || outside != "off" {
		t.Fatalf("SHOW synchronous_commit outside Insert = %q, %v; want off (the database's default)", outside, err)
	}
	var inside []string
	l.inTx = func(ctx context.Context, tx pgx.Tx) error {
		var v string
		err := tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&v)
		inside = append(inside, v)
		return err
	}
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	insert(t, l, record("req_1", 1, start, 1), record("req_2", 2, start, 2))
	insert(t, l, record("req_3", 3, start, 3))
	// A batch the database refused is stored one statement at a time, in
	// a transaction of its own, committed if no record is to blame: that
	// one too.
	if bad, err := l.findBad(ctx, []ledger.Record{record("req_4", 4, start, 4), record("req_5", 5, start, 5)}); bad != -1 || err != nil {
		t.Fatalf("findBad of good records = %d, %v; want -1, nil", bad, err)
	}
	if s := stateOf(t, l); len(s.Records) != 5 {
		t.Errorf("%d records; want 5", len(s.Records))
	}
	if diff := cmp.Diff([]string{"on", "on", "on"}, inside); diff != "" {
		t.Errorf("SHOW synchronous_commit in Insert's transactions (-want +got):\n%s", diff)
	}
}

// TestBadRecord: a record that is invalid, or that PostgreSQL refuses
// for its values, is named by its index, and nothing of its batch is
// stored; the batch without it is.
func TestBadRecord(t *testing.T) {
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	long := make([]byte, 6000)
	for i := range long {
		long[i] = "0123456789abcdef"[rng.IntN(16)]
	}
	for _, tt := range []struct {
		name    string
		bad     func(r *ledger.Record)
		invalid bool // ErrInvalid, refused before the database
	}{
		{"negative cost", func(r *ledger.Record) { r.CostPico = -1 }, true},
		{"no request id", func(r *ledger.Record) { r.RequestID = "" }, true},
		{"after 2262", func(r *ledger.Record) { r.StartedAt = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC) }, true},
		{"the epoch", func(r *ledger.Record) { r.StartedAt = time.Unix(0, 0) }, true},
		{"NUL in text", func(r *ledger.Record) { r.Team = "team\x00" }, false},
		{"not UTF-8", func(r *ledger.Record) { r.Model = "gpt-\xff" }, false},
		{"key too long to index", func(r *ledger.Record) { r.KeyID = string(long) }, false},
		{"aggregate overflows", func(r *ledger.Record) {
			// The same key and model as record 0, whose output adds 10.
			r.KeyID, r.Model, r.Tokens[tokens.Output] = "key_000", "gpt-4o", math.MaxInt64-5
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := openTest(t, newDatabase(t))
			recs := []ledger.Record{record("req_0", 0, start, 1), record("req_1", 1, start, 2), record("req_2", 2, start, 3)}
			tt.bad(&recs[1])
			bad, err := l.Insert(testctx.Deadline(t), recs)
			if bad != 1 || err == nil || errors.Is(err, ledger.ErrInvalid) != tt.invalid {
				t.Fatalf("Insert = %d, %v; want 1 and an error (ErrInvalid: %v)", bad, err, tt.invalid)
			}
			if s := stateOf(t, l); len(s.Records)+len(s.Buckets)+len(s.Lifetime) != 0 {
				t.Fatalf("after a refused batch: %+v; want nothing stored", s)
			}
			insert(t, l, recs[0], recs[2])
			s := stateOf(t, l)
			if len(s.Records) != 2 {
				t.Errorf("%d records; want 2", len(s.Records))
			}
			checkAggregates(t, s)
		})
	}
}

// TestDropBefore: retention drops the partitions entirely before the
// cutoff, their ids and their buckets, keeps the lifetime sums, skips in
// about lockTimeout a partition another connection holds, drops it once
// released, and a record of a dropped month inserted again is skipped.
func TestDropBefore(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := newDatabase(t)
	l := openTest(t, url)
	jan, feb, mar := time.Date(2025, 1, 10, 0, 0, 0, 0, time.UTC), time.Date(2025, 2, 10, 0, 0, 0, 0, time.UTC), time.Date(2025, 3, 10, 0, 0, 0, 0, time.UTC)
	recs := []ledger.Record{
		record("req_jan1", 1, jan, 100), record("req_jan2", 2, jan.Add(time.Hour), 200),
		record("req_feb1", 1, feb, 300), record("req_feb2", 2, feb.Add(time.Hour), 400),
		record("req_mar1", 1, mar, 500), record("req_mar2", 2, mar.Add(time.Hour), 600),
	}
	insert(t, l, recs...)
	before := stateOf(t, l)
	checkAggregates(t, before)

	// Another connection reads February's partition in an open
	// transaction.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE ledger_records_2025_02 IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	cutoff := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	began := time.Now()
	dropped, err := l.DropBefore(ctx, cutoff)
	took := time.Since(began)
	if diff := cmp.Diff([]string{"ledger_records_2025_01"}, dropped); diff != "" || !errors.Is(err, ErrSkipped) ||
		!strings.Contains(err.Error(), "ledger_records_2025_02") {
		t.Fatalf("DropBefore with February in use = %v, %v; want January dropped and February skipped", dropped, err)
	}
	if took > 4*time.Second {
		t.Errorf("DropBefore took %v with a partition in use; want about the lock timeout, %s", took, lockTimeout)
	}
	kept := func(months ...time.Time) []ledger.Record {
		var rs []ledger.Record
		for _, r := range before.Records {
			if slices.Contains(months, monthOf(r.StartedAt).start) {
				rs = append(rs, r)
			}
		}
		return rs
	}
	check := func(when string, records []ledger.Record) {
		t.Helper()
		s := stateOf(t, l)
		if diff := cmp.Diff(records, s.Records); diff != "" {
			t.Errorf("%s: Records (-want +got):\n%s", when, diff)
		}
		if diff := cmp.Diff(ledgertest.ExpectedBuckets(records, time.Time{}), s.Buckets); diff != "" {
			t.Errorf("%s: Buckets (-want +got):\n%s", when, diff)
		}
		if diff := cmp.Diff(before.Lifetime, s.Lifetime); diff != "" {
			t.Errorf("%s: Lifetime changed (-before +after):\n%s", when, diff)
		}
		if n := count(t, l, "ledger_ids"); n != len(records) {
			t.Errorf("%s: %d request ids; want %d", when, n, len(records))
		}
	}
	check("January dropped", kept(monthOf(feb).start, monthOf(mar).start))

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	dropped, err = l.DropBefore(ctx, cutoff)
	if diff := cmp.Diff([]string{"ledger_records_2025_02"}, dropped); diff != "" || err != nil {
		t.Fatalf("DropBefore again = %v, %v; want February dropped", dropped, err)
	}
	check("February dropped", kept(monthOf(mar).start))

	// The records of the dropped months come again (a replay): skipped,
	// no partition made for them, nothing counted.
	insert(t, l, recs...)
	check("after a replay", kept(monthOf(mar).start))
	for _, p := range partitions(t, url) {
		if p == "ledger_records_2025_01" || p == "ledger_records_2025_02" {
			t.Errorf("partition %s made again by a replay", p)
		}
	}
	if dropped, err := l.DropBefore(ctx, cutoff); len(dropped) != 0 || err != nil {
		t.Errorf("DropBefore with nothing to drop = %v, %v; want nothing", dropped, err)
	}
}

// durableDatabase is a migrated database on a server of b's own that
// syncs its commits (fsync on), as a production one does.
func durableDatabase(b *testing.B) string {
	b.Helper()
	url := pgtest.OwnWith(b, pgtest.Options{Durable: true}).Database(b)
	if _, _, err := Migrate(context.Background(), url, testenv.Quiet()); err != nil {
		b.Fatal(err)
	}
	return url
}

// BenchmarkInsert inserts batches of 1, 10, 100 and 1,000 new records, a
// key each of 1,000 keys (100 teams, 10 orgs, 5 models), at times a
// millisecond apart in the current month: the spool's ingester at full
// speed, a transaction a batch. ns/op is a batch's latency.
func BenchmarkInsert(b *testing.B) {
	for _, size := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) { benchInsert(b, size) })
	}
}

func benchInsert(b *testing.B, size int) {
	l := openTest(b, durableDatabase(b))
	ctx := context.Background()
	start := time.Now().UTC().Add(-time.Hour)
	models := []string{"gpt-4o", "gpt-4o-mini", "claude-sonnet", "claude-haiku", "llama"}
	recs := make([]ledger.Record, size)
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		for i := range recs {
			k := n % 1000
			r := record(fmt.Sprintf("req_%09d", n), k, start.Add(time.Duration(n)*time.Millisecond), int64(n%5000)*1_000_000)
			r.Team, r.Org, r.Model = fmt.Sprintf("team_%d", k%100), fmt.Sprintf("org_%d", k%10), models[n%5]
			recs[i] = r
			n++
		}
		if bad, err := l.Insert(ctx, recs); err != nil {
			b.Fatalf("Insert = %d, %v", bad, err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}
