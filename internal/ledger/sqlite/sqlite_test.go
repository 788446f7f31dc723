package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/ledgertest"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/tokens"
)

// database/sql's connection opener goroutine ends with DB.Close, the
// driver starts none of its own, and every test stops the Runs it starts,
// so no goroutine needs ignoring.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestContract(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledgertest.Backend {
		l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
		start(t, l)
		return l
	})
}

// openTest opens the ledger at path and closes it when the test ends,
// after the Run that start started (cleanups run last first).
func openTest(t testing.TB, path string, opts Options) *Ledger {
	t.Helper()
	l, err := Open(context.Background(), path, opts)
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

// start runs l's committer until the test ends, or until the returned
// stop is called; stop returns Run's error.
func start(t testing.TB, l *Ledger) (stop func() error) {
	t.Helper()
	return startRun(t, l, true)
}

// startRun is start; check says whether the test's end fails on an error
// from Run.
func startRun(t testing.TB, l *Ledger, check bool) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = testctx.Receive(t, "Run to return after its context ended", done)
		})
		return err
	}
	t.Cleanup(func() {
		if err := stop(); err != nil && check {
			t.Errorf("Run: %v", err)
		}
	})
	return stop
}

func record(id string) ledger.Record {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	return ledger.Record{
		RequestID: id, KeyID: "key_1", Team: "search", Org: "acme", Endpoint: "chat_completions",
		Model: "gpt-4o", Provider: "openai", UpstreamModel: "gpt-4o",
		Tokens: tokens.Counts{tokens.Input: 100, tokens.Output: 20}, CostPico: 450_000_000, Priced: true, Status: 200, Outcome: "ok",
		StartedAt: at, FinishedAt: at.Add(time.Second), TTFT: 100 * time.Millisecond,
	}
}

// reports collects what a Ledger tells Options.OnError.
type reports struct {
	mu   sync.Mutex
	errs []error
	ch   chan struct{}
}

func newReports() *reports { return &reports{ch: make(chan struct{}, 1024)} }

func (r *reports) onError(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

// ids are the RequestIDs of recs.
func ids(recs []ledger.Record) []string {
	var s []string
	for _, r := range recs {
		s = append(s, r.RequestID)
	}
	return s
}

func TestPragmas(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	l := openTest(t, path, Options{})
	ctx := t.Context()
	// Pragmas are per connection: check ones the pool opened after Open.
	for i := range 2 {
		c, err := l.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got := map[string]string{}
		for _, p := range []string{"journal_mode", "synchronous", "busy_timeout", "user_version"} {
			var v string
			if err := c.QueryRowContext(ctx, "PRAGMA "+p).Scan(&v); err != nil {
				t.Fatalf("PRAGMA %s: %v", p, err)
			}
			got[p] = v
		}
		want := map[string]string{
			"journal_mode": "wal",
			"synchronous":  "2", // FULL
			"busy_timeout": "5000",
			"user_version": strconv.Itoa(len(migrations)),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("connection %d pragmas (-want +got):\n%s", i, diff)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("file mode = %v; want 0600", perm)
	}
}

// TestIndexes checks that each filter is an index range scan, not a scan
// of the table, in the queries Records and Totals run: a time range alone
// reads spend_started; a column filter reads that column's day index, a
// lookup per day (<expr>=?), and Records then sorts only the request_id
// ties, never the whole result (a LIMIT stops the scan).
func TestIndexes(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
	since := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		f      ledger.Filter
		search string
	}{
		{ledger.Filter{Since: since}, "spend_started (started_at>?)"},
		{ledger.Filter{Since: since, Until: since.Add(time.Hour)}, "spend_started (started_at>? AND started_at<?)"},
		{ledger.Filter{KeyID: "key_1"}, "spend_key (<expr>=? AND key_id=?)"},
		{ledger.Filter{KeyID: "key_1", Since: since}, "spend_key (<expr>=? AND key_id=? AND started_at>?)"},
		{ledger.Filter{KeyID: "key_1", Since: since, Until: since.Add(time.Hour)}, "spend_key (<expr>=? AND key_id=? AND started_at>? AND started_at<?)"},
		{ledger.Filter{Team: "search", Since: since}, "spend_team (<expr>=? AND team=? AND started_at>?)"},
		{ledger.Filter{Org: "acme", Until: since}, "spend_org (<expr>=? AND org=? AND started_at<?)"},
		{ledger.Filter{Model: "gpt-4o", Since: since}, "spend_model (<expr>=? AND model=? AND started_at>?)"},
	}
	for _, tt := range tests {
		records, rargs := recordsQuery(tt.f)
		totals, targs := totalsQuery(tt.f, ledger.ByDay)
		for _, q := range []struct {
			name, sql string
			args      []any
		}{{"records", records, rargs}, {"totals", totals, targs}} {
			rows, err := l.db.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q.sql, q.args...)
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
			p := strings.Join(plan, "; ")
			if strings.Contains(p, "SCAN spend") {
				t.Errorf("%s %+v: plan %q scans", q.name, tt.f, p)
			}
			if !strings.Contains(p, "SEARCH spend USING INDEX "+tt.search) &&
				!strings.Contains(p, "SEARCH spend USING COVERING INDEX "+tt.search) {
				t.Errorf("%s %+v: plan %q does not search %s", q.name, tt.f, p, tt.search)
			}
			if q.name == "records" && strings.Contains(p, "USE TEMP B-TREE FOR ORDER BY") {
				t.Errorf("records %+v: plan %q sorts the whole result", tt.f, p)
			}
		}
	}
}

// TestDurableWhenAppendReturns: what Append acknowledged, another handle
// on the file (another process, say sluice spend) sees at once.
func TestDurableWhenAppendReturns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	l := openTest(t, path, Options{})
	start(t, l)
	other := openTest(t, path, Options{})
	for i := range 5 {
		id := fmt.Sprintf("req_%d", i)
		if err := l.Append(testctx.Deadline(t), record(id)); err != nil {
			t.Fatal(err)
		}
		got, err := other.Records(t.Context(), ledger.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != i+1 {
			t.Fatalf("after Append(%s) the other handle sees %v", id, ids(got))
		}
	}
}

func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	l, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, l)
	want := record("req_kept")
	appendErr := l.Append(testctx.Deadline(t), want)
	if err := errors.Join(appendErr, stop(), l.Close()); err != nil {
		t.Fatal(err)
	}
	l = openTest(t, path, Options{})
	got, err := l.Records(t.Context(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]ledger.Record{want}, got); diff != "" {
		t.Errorf("Records after reopen (-want +got):\n%s", diff)
	}
}

// waitQueued polls until n Appends are queued: the way to have Run find a
// known batch waiting when it starts.
func waitQueued(t *testing.T, l *Ledger, n int) {
	t.Helper()
	testctx.Wait(t, fmt.Sprintf("%d Appends queued", n), func() bool {
		return l.Queued() == n
	})
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
	return func() map[string]error {
		wg.Wait()
		return errs
	}
}

func numbered(n int) []ledger.Record {
	recs := make([]ledger.Record, n)
	for i := range recs {
		recs[i] = record(fmt.Sprintf("req_%04d", i))
	}
	return recs
}

// TestBatching: concurrent Appends share commits.
func TestBatching(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{MaxWait: 5 * time.Millisecond})
	start(t, l)
	const appenders, each = 64, 10
	errs := make([]error, appenders)
	var wg sync.WaitGroup
	for g := range appenders {
		wg.Go(func() {
			for i := range each {
				if err := l.Append(testctx.Deadline(t), record(fmt.Sprintf("req_%02d_%02d", g, i))); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	records, commits := l.Stats()
	if records != appenders*each {
		t.Errorf("Stats records = %d; want %d", records, appenders*each)
	}
	if commits >= records/4 {
		t.Errorf("%d records took %d commits; want batches of 4 or more on average", records, commits)
	}
	t.Logf("%d records in %d commits", records, commits)
}

// TestMaxBatch: Run finds 50 records queued; with MaxBatch 8 it commits
// them in exactly 7 transactions.
func TestMaxBatch(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{MaxBatch: 8})
	wait := appendAsync(t.Context(), l, numbered(50)...)
	waitQueued(t, l, 50)
	start(t, l)
	for id, err := range wait() {
		if err != nil {
			t.Errorf("Append(%s): %v", id, err)
		}
	}
	if records, commits := l.Stats(); records != 50 || commits != 7 {
		t.Errorf("Stats = %d records, %d commits; want 50, 7", records, commits)
	}
}

// TestAppendWithoutRun: with no committer, Append waits for its context,
// no longer; the record stays queued and is committed once Run runs.
func TestAppendWithoutRun(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := l.Append(ctx, record("req_early")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Append without Run = %v; want DeadlineExceeded", err)
	}
	start(t, l)
	// The queue is FIFO: once this one is committed, so is req_early.
	if err := l.Append(testctx.Deadline(t), record("req_late")); err != nil {
		t.Fatal(err)
	}
	got, err := l.Records(t.Context(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"req_early", "req_late"}, ids(got)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// TestRunDrainsOnCancel: when Run's context ends, what is queued is
// committed before Run returns, and the ledger takes no more Appends.
func TestRunDrainsOnCancel(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{MaxBatch: 16, MaxWait: time.Hour})
	wait := appendAsync(t.Context(), l, numbered(40)...)
	waitQueued(t, l, 40)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := l.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for id, err := range wait() {
		if err != nil {
			t.Errorf("Append(%s): %v", id, err)
		}
	}
	if records, commits := l.Stats(); records != 40 || commits != 3 {
		t.Errorf("Stats = %d records, %d commits; want 40, 3", records, commits)
	}
	if err := l.Append(testctx.Deadline(t), record("req_after")); !errors.Is(err, ledger.ErrClosed) {
		t.Errorf("Append after Run returned = %v; want ErrClosed", err)
	}
	if err := l.Run(t.Context()); !errors.Is(err, ledger.ErrClosed) {
		t.Errorf("Run after Run returned = %v; want ErrClosed", err)
	}
}

// TestMaxWait: a lone Append is committed MaxWait after it arrived, not
// later, even though the batch never fills.
func TestMaxWait(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{MaxBatch: 1000, MaxWait: 20 * time.Millisecond})
	start(t, l)
	begin := time.Now()
	if err := l.Append(testctx.Deadline(t), record("req_lone")); err != nil {
		t.Fatal(err)
	}
	// Only the lower bound is asserted: an upper one would be a timed
	// test. That it returned at all shows the timer fired.
	if took := time.Since(begin); took < 20*time.Millisecond {
		t.Errorf("Append returned after %v; want at least MaxWait 20ms", took)
	}
}

func TestRunTwice(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
	start(t, l)
	// The first Run has started once an Append returns.
	if err := l.Append(testctx.Deadline(t), record("req_1")); err != nil {
		t.Fatal(err)
	}
	if err := l.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second Run = %v; want already running", err)
	}
}

// TestCloseFailsQueued: an Append queued with no committer and no
// deadline returns when the ledger is closed.
func TestCloseFailsQueued(t *testing.T) {
	l, err := Open(t.Context(), filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	wait := appendAsync(t.Context(), l, record("req_stuck"))
	waitQueued(t, l, 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := wait()["req_stuck"]; !errors.Is(err, ledger.ErrClosed) {
		t.Errorf("queued Append after Close = %v; want ErrClosed", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestBadRecordFailsAlone: a record the database refuses (here by a
// trigger) fails alone; the rest of its batch is committed.
func TestBadRecordFailsAlone(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
	_, err := l.db.ExecContext(t.Context(), `CREATE TRIGGER refuse BEFORE INSERT ON spend
		WHEN NEW.request_id = 'req_bad' BEGIN SELECT RAISE(ABORT, 'refused by test'); END`)
	if err != nil {
		t.Fatal(err)
	}
	wait := appendAsync(t.Context(), l, record("req_a"), record("req_bad"), record("req_c"))
	waitQueued(t, l, 3)
	start(t, l)
	errs := wait()
	if errs["req_a"] != nil || errs["req_c"] != nil {
		t.Errorf("good records failed: %v", errs)
	}
	if err := errs["req_bad"]; err == nil || !strings.Contains(err.Error(), "refused by test") {
		t.Errorf("Append(req_bad) = %v; want the trigger's error", err)
	}
	got, err := l.Records(t.Context(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"req_a", "req_c"}, ids(got)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// TestFailedBatch: an error that is not one record's (here SQLITE_TOOBIG,
// raised by a trigger) fails every record of the batch, none is
// committed, and Run goes on: a retry succeeds.
func TestFailedBatch(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
	_, err := l.db.ExecContext(t.Context(), `CREATE TRIGGER toobig BEFORE INSERT ON spend
		WHEN NEW.request_id = 'req_poison' BEGIN SELECT zeroblob(2000000000); END`)
	if err != nil {
		t.Fatal(err)
	}
	batch := append(numbered(5), record("req_poison"))
	wait := appendAsync(t.Context(), l, batch...)
	waitQueued(t, l, len(batch))
	start(t, l)
	for id, err := range wait() {
		if err == nil || !strings.Contains(err.Error(), "too big") {
			t.Errorf("Append(%s) = %v; want the batch's error", id, err)
		}
	}
	if records, commits := l.Stats(); records != 0 || commits != 0 {
		t.Errorf("Stats = %d records, %d commits; want none", records, commits)
	}
	// The caller retries without the poison.
	for _, r := range batch[:5] {
		if err := l.Append(testctx.Deadline(t), r); err != nil {
			t.Fatalf("retry: %v", err)
		}
	}
	got, err := l.Records(t.Context(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 {
		t.Errorf("records after retry: %v; want 5", ids(got))
	}
}

func TestUnstorableTimes(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
	start(t, l)
	for name, f := range map[string]func(*ledger.Record){
		"started in 1600":  func(r *ledger.Record) { r.StartedAt = time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC) },
		"finished in 3000": func(r *ledger.Record) { r.FinishedAt = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) },
		"started at epoch": func(r *ledger.Record) { r.StartedAt = time.Unix(0, 0) },
	} {
		r := record("req_" + name)
		f(&r)
		if err := l.Append(testctx.Deadline(t), r); !errors.Is(err, ledger.ErrInvalid) || !strings.Contains(err.Error(), "cannot be stored") {
			t.Errorf("%s: Append = %v; want ErrInvalid, cannot be stored", name, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	notDB := filepath.Join(dir, "sluice.yaml")
	text := strings.Repeat("listen:\n  grpc: 127.0.0.1:9001\n", 200)
	if err := os.WriteFile(notDB, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	tooNew := filepath.Join(dir, "new.sqlite")
	db, err := sql.Open("sqlite", tooNew)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.ExecContext(t.Context(), "PRAGMA user_version = 99")
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, path string
		opts       Options
		want       string
	}{
		{"not a database", notDB, Options{}, notDB + ": not a SQLite database"},
		{"schema too new", tooNew, Options{}, fmt.Sprintf("ledger schema version 99 is newer than this sluice (max %d); upgrade sluice", len(migrations))},
		{"a directory", dir, Options{}, dir},
		{"negative max batch", filepath.Join(dir, "ok.sqlite"), Options{MaxBatch: -1}, "max_batch: -1 is negative"},
		{"negative max wait", filepath.Join(dir, "ok.sqlite"), Options{MaxWait: -time.Millisecond}, "max_wait: -1ms is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Open(t.Context(), tt.path, tt.opts)
			if err == nil {
				l.Close()
				t.Fatal("Open succeeded; want an error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open error = %q; want one containing %q", err, tt.want)
			}
		})
	}
	if got, err := os.ReadFile(notDB); err != nil || string(got) != text {
		t.Errorf("Open modified the file it refused (%v)", err)
	}
}

func TestCreatesParentDirectories(t *testing.T) {
	path := filepath.Join(t.TempDir(), "var", "lib", "sluice", "ledger.sqlite")
	openTest(t, path, Options{})
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database file: %v", err)
	}
}

func TestConcurrentOpenOfNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	const n = 4
	ls := make([]*Ledger, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ls[i], errs[i] = Open(t.Context(), path, Options{}) })
	}
	wg.Wait()
	for _, l := range ls {
		if l != nil {
			errs = append(errs, l.Close())
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
