package spool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/ledgertest"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/tokens"
)

// The ledger starts no goroutine but Run's ingester, which ends with Run,
// and every test stops the Runs it starts, so no goroutine needs ignoring.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// errDown is what a memSink set to fail (setFail) fails every Write with:
// the database down, no record's fault, so the whole batch is retried.
var errDown = errors.New("memSink: the database is down")

// refusedError is a record memSink refuses (setRefuse): its fault, so
// RecordFault holds and the batch goes on without it.
type refusedError struct{ id string }

func (e *refusedError) Error() string { return "memSink: record " + e.id + " refused" }

// memSink is a Sink in memory, in place of a database: each Write stores
// its batch at once (all of it, or nothing), a RequestID already stored
// skipped, the first of a batch's records sharing one the one stored. It
// is safe for concurrent use: a reader Ledger and a writer Ledger may
// share one, as they share a SQLite file.
type memSink struct {
	mu   sync.Mutex
	recs map[string]ledger.Record
	// counted is every record as Write stored it, in order: the sink's
	// own sums are taken from it (as SQLite's aggregate rows are written
	// in the transaction of the insert), and it must hold each record of
	// recs once (checkAggregates).
	counted []ledger.Record
	// skipped counts the records Write was given whose RequestID was
	// already stored (or earlier in its batch).
	skipped int

	refuse func(ledger.Record) bool        // setRefuse
	fail   error                           // setFail
	before func(ctx context.Context) error // setBefore
	opens  int                             // Writers opened
	closes int                             // Writers closed
	misuse []error                         // the Writer's contract broken
	idles  atomic.Int64                    // Writer.Idle calls
	// writes counts the Write calls, failed ones included; largest is
	// the largest batch one was given.
	writes, largest int
}

var (
	_ Sink   = (*memSink)(nil)
	_ Writer = (*memWriter)(nil)
)

// newMemSink returns an empty memSink; when the test ends (after the
// Ledgers opened on it, whose cleanups were registered later, are closed)
// it checks that every Writer it gave out was closed, and used by one
// goroutine at a time.
func newMemSink(t testing.TB) *memSink {
	t.Helper()
	s := &memSink{recs: map[string]ledger.Record{}}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.opens != s.closes {
			t.Errorf("memSink: %d Writers opened, %d closed", s.opens, s.closes)
		}
		for _, err := range s.misuse {
			t.Error(err)
		}
	})
	return s
}

// setFail makes every Write fail with err (nil: succeed again).
func (s *memSink) setFail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

// setRefuse makes Write refuse the records refuse holds for (nil: none):
// it returns the first such record's index and a *refusedError, storing
// nothing.
func (s *memSink) setRefuse(refuse func(ledger.Record) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = refuse
}

// setBefore has every Write call fn first, outside the sink's lock: fn
// may block or sleep (a slow or stuck database), or fail the Write.
func (s *memSink) setBefore(fn func(ctx context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.before = fn
}

// all is the records stored, by RequestID.
func (s *memSink) all() []ledger.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	recs := make([]ledger.Record, 0, len(s.recs))
	for _, r := range s.recs {
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(a, b ledger.Record) int { return cmp.Compare(a.RequestID, b.RequestID) })
	return recs
}

// sums are the records as Write counted them.
func (s *memSink) sums() []ledger.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.counted)
}

// duplicates is how many records Write skipped as already stored.
func (s *memSink) duplicates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.skipped
}

func (*memSink) Name() string { return "memSink" }

func (*memSink) Prepare(r ledger.Record) (any, error) { return prepare(r) }

// prepare is what a database's Prepare does: it validates r, refuses the
// times the spool cannot store as it stores them, and returns r as stored
// (its times in UTC, as read back).
func prepare(r ledger.Record) (ledger.Record, error) {
	if err := r.Validate(); err != nil {
		return ledger.Record{}, err
	}
	started, err := ledger.Nanos("started_at", r.StartedAt)
	if err != nil {
		return ledger.Record{}, fmt.Errorf("request %s: %w", r.RequestID, err)
	}
	finished, err := ledger.Nanos("finished_at", r.FinishedAt)
	if err != nil {
		return ledger.Record{}, fmt.Errorf("request %s: %w", r.RequestID, err)
	}
	r.StartedAt, r.FinishedAt = ledger.FromNanos(started), ledger.FromNanos(finished)
	return r, nil
}

func (s *memSink) Open(context.Context) (Writer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opens++
	return &memWriter{s: s}, nil
}

func (*memSink) RecordFault(err error) bool {
	var r *refusedError
	return errors.As(err, &r)
}

// memWriter is a memSink's Writer.
type memWriter struct {
	s      *memSink
	busy   atomic.Bool // a call is under way
	closed atomic.Bool
}

// enter notes a call, and a call while another is under way, or after
// Close, as a misuse that fails the test.
func (w *memWriter) enter(op string) (leave func()) {
	if !w.busy.CompareAndSwap(false, true) {
		w.misused(fmt.Errorf("memSink: Writer.%s while another call is under way", op))
		return func() {}
	}
	if w.closed.Load() {
		w.misused(fmt.Errorf("memSink: Writer.%s after Close", op))
	}
	return func() { w.busy.Store(false) }
}

func (w *memWriter) misused(err error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.misuse = append(w.s.misuse, err)
}

func (w *memWriter) Write(ctx context.Context, batch []any) (int, error) {
	defer w.enter("Write")()
	s := w.s
	s.mu.Lock()
	before := s.before
	s.writes++
	s.largest = max(s.largest, len(batch))
	s.mu.Unlock()
	if before != nil {
		if err := before(ctx); err != nil {
			return -1, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return -1, s.fail
	}
	seen := map[string]bool{}
	var add []ledger.Record
	skip := 0
	for i, p := range batch {
		r, ok := p.(ledger.Record)
		if !ok {
			return i, fmt.Errorf("memSink: %T in a batch, not what Prepare returned", p)
		}
		if s.refuse != nil && s.refuse(r) {
			return i, &refusedError{id: r.RequestID}
		}
		if _, ok := s.recs[r.RequestID]; ok || seen[r.RequestID] {
			skip++
			continue
		}
		seen[r.RequestID] = true
		add = append(add, r)
	}
	for _, r := range add {
		s.recs[r.RequestID] = r
	}
	s.counted = append(s.counted, add...)
	s.skipped += skip
	return -1, nil
}

func (w *memWriter) Idle(context.Context) error {
	defer w.enter("Idle")()
	w.s.idles.Add(1)
	return nil
}

func (w *memWriter) Close() error {
	defer w.enter("Close")()
	if w.closed.Swap(true) {
		w.misused(errors.New("memSink: Writer closed twice"))
		return nil
	}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.closes++
	return nil
}

// spoolPath is a spool's path in a new directory of t's.
func spoolPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "ledger"+Suffix)
}

// openTest opens a Ledger on a new memSink and closes it when the test
// ends, after the Run that start started (cleanups run last first).
func openTest(t testing.TB, opts Options) *Ledger {
	t.Helper()
	return openOn(t, newMemSink(t), opts)
}

// openOn is openTest on s: Ledgers opened on one memSink share its
// records, as Ledgers of one database file do.
func openOn(t testing.TB, s *memSink, opts Options) *Ledger {
	t.Helper()
	l, err := Open(context.Background(), s, opts, nil)
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

// sinkOf is the memSink l was opened on.
func sinkOf(l *Ledger) *memSink { return l.sink.(*memSink) }

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

// ids are the RequestIDs of recs.
func ids(recs []ledger.Record) []string {
	var s []string
	for _, r := range recs {
		s = append(s, r.RequestID)
	}
	return s
}

// records is a read of l's sink: once l.Visible returned (the sink holds
// what l acknowledged before), the sink's records, by RequestID.
func records(ctx context.Context, l *Ledger) ([]ledger.Record, error) {
	if err := l.Visible(ctx); err != nil {
		return nil, err
	}
	return sinkOf(l).all(), nil
}

// storedIDs are the RequestIDs a read of l sees, in order.
func storedIDs(t *testing.T, l *Ledger) []string {
	t.Helper()
	got, err := records(testctx.Deadline(t), l)
	if err != nil {
		t.Fatal(err)
	}
	return ids(got)
}

// checkAggregates fails the test unless the sums l's sink counted are the
// sums of its records: each record counted once. It returns the records.
func checkAggregates(t *testing.T, l *Ledger) []ledger.Record {
	t.Helper()
	recs, err := records(testctx.Deadline(t), l)
	if err != nil {
		t.Fatal(err)
	}
	got := ledgertest.ExpectedBuckets(sinkOf(l).sums(), time.Time{})
	if diff := gocmp.Diff(ledgertest.ExpectedBuckets(recs, time.Time{}), got); diff != "" {
		t.Errorf("the sink's sums are not the sums of its %d records (-want +got):\n%s", len(recs), diff)
	}
	return recs
}

// lifetime is the lifetime aggregates of what l's sink counted, once l
// caught up (what Lifetime reads from SQLite).
func lifetime(t *testing.T, l *Ledger) []ledger.Aggregate {
	t.Helper()
	if err := l.Visible(testctx.Deadline(t)); err != nil {
		t.Fatal(err)
	}
	return ledgertest.ExpectedLifetime(sinkOf(l).sums())
}

// memBackend is a Ledger on a memSink as the contract suite sees it: its
// reads wait for Visible, then read the sink's records.
type memBackend struct{ *Ledger }

var _ ledgertest.Backend = memBackend{}

func (b memBackend) read(ctx context.Context) (*ledgertest.Memory, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	recs, err := records(ctx, b.Ledger)
	if err != nil {
		return nil, err
	}
	m := &ledgertest.Memory{}
	for _, r := range recs {
		if err := m.Append(ctx, r); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (b memBackend) Records(ctx context.Context, f ledger.Filter) ([]ledger.Record, error) {
	m, err := b.read(ctx)
	if err != nil {
		return nil, err
	}
	return m.Records(ctx, f)
}

func (b memBackend) Totals(ctx context.Context, f ledger.Filter, by ledger.GroupBy) ([]ledger.Total, error) {
	m, err := b.read(ctx)
	if err != nil {
		return nil, err
	}
	return m.Totals(ctx, f, by)
}

func (b memBackend) Buckets(ctx context.Context, since time.Time) ([]ledger.Aggregate, error) {
	m, err := b.read(ctx)
	if err != nil {
		return nil, err
	}
	return m.Buckets(ctx, since)
}

func (b memBackend) Lifetime(ctx context.Context) ([]ledger.Aggregate, error) {
	m, err := b.read(ctx)
	if err != nil {
		return nil, err
	}
	return m.Lifetime(ctx)
}

// TestMemSink: the test sink stores a batch whole or not at all, the first
// of a RequestID's records winning; refuses a record by its index with an
// error RecordFault takes for the record's; fails a whole batch with one
// it does not; and refuses, at Prepare, what a database would.
func TestMemSink(t *testing.T) {
	s := newMemSink(t)
	w, err := s.Open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	prep := func(r ledger.Record) any {
		t.Helper()
		p, err := s.Prepare(r)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, a2, b := record("a"), record("a"), record("b")
	a2.KeyID = "second"
	if bad, err := w.Write(t.Context(), []any{prep(a), prep(a2), prep(b)}); bad != -1 || err != nil {
		t.Fatalf("Write = %d, %v", bad, err)
	}
	if got := s.all(); len(got) != 2 || got[0].KeyID != "key_1" || s.duplicates() != 1 {
		t.Errorf("stored %+v (%d skipped); want a (the first) and b, one skipped", got, s.duplicates())
	}
	s.setRefuse(func(r ledger.Record) bool { return r.RequestID == "bad" })
	if bad, err := w.Write(t.Context(), []any{prep(record("c")), prep(record("bad"))}); bad != 1 || !s.RecordFault(err) {
		t.Errorf("Write with a refused record = %d, %v; want 1 and the record's fault", bad, err)
	}
	s.setRefuse(nil)
	s.setFail(errDown)
	if bad, err := w.Write(t.Context(), []any{prep(record("c"))}); bad != -1 || !errors.Is(err, errDown) || s.RecordFault(err) {
		t.Errorf("Write with the database down = %d, %v; want -1 and no record's fault", bad, err)
	}
	s.setFail(nil)
	before := make(chan struct{})
	s.setBefore(func(context.Context) error { close(before); return errDown })
	if bad, err := w.Write(t.Context(), []any{prep(record("c"))}); bad != -1 || !errors.Is(err, errDown) {
		t.Errorf("Write failed by its before hook = %d, %v; want -1 and errDown", bad, err)
	}
	testctx.Receive(t, "the before hook's call", before)
	s.setBefore(nil)
	if got := ids(s.all()); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("failed Writes stored something: %v", got)
	}
	for _, r := range []ledger.Record{{RequestID: "x"}, func() ledger.Record { r := record("y"); r.FinishedAt = time.Unix(0, 0); return r }()} {
		if _, err := s.Prepare(r); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("Prepare(%+v) = %v; want ErrInvalid", r, err)
		}
	}
}
