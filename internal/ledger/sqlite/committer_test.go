package sqlite

import (
	"database/sql"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/spool"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/tokens"
)

// commitBatch writes recs as one batch with a committer of l's, in their
// order (Append's goroutines would queue them in any order), and returns
// each record's outcome.
func commitBatch(t *testing.T, l *Ledger, recs []ledger.Record, edit func(i int, args []any)) []error {
	t.Helper()
	ctx := t.Context()
	c, err := newCommitter(ctx, l.db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.close(); err != nil {
			t.Error(err)
		}
	}()
	batch, idx := make([]any, len(recs)), make([]int, len(recs))
	for i, r := range recs {
		p, err := (*sink)(nil).Prepare(r)
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(i, p.(*prepared).args)
		}
		batch[i], idx[i] = p, i
	}
	// As the spool does with a Writer's outcome: a record to blame fails
	// alone and the rest is written again; any other error fails them all.
	errs := make([]error, len(recs))
	for len(batch) > 0 {
		bad, err := c.Write(ctx, batch)
		switch {
		case err == nil:
			return errs
		case bad >= 0:
			errs[idx[bad]] = err
			batch = append(batch[:bad], batch[bad+1:]...)
			idx = append(idx[:bad], idx[bad+1:]...)
		default:
			for _, i := range idx {
				errs[i] = err
			}
			return errs
		}
	}
	return errs
}

// TestMultiRowInsertDuplicates: records are inserted insertRows to a
// statement, and a RequestID already stored — in the ledger before, in
// the same statement, in an earlier statement of the transaction, or in
// the single-row tail — is skipped and not counted, the first record of
// an id winning, in a batch that is not a multiple of insertRows.
func TestMultiRowInsertDuplicates(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
	recs := numbered(2*insertRows + 5) // two statements and a tail of 5
	for i := range recs {
		recs[i].KeyID = fmt.Sprintf("key_%d", i%3)
		recs[i].Tokens[tokens.Input] = int64(1000 + i) // tells the copies apart
	}
	before := []ledger.Record{recs[4], recs[insertRows+7], recs[2*insertRows+1]}
	for i := range before {
		before[i].Tokens[tokens.Input] = 1 // the stored copy, which must stay
	}
	for i, err := range commitBatch(t, l, before, nil) {
		if err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
	}
	type dup struct{ copy, of int }
	dups := []dup{
		{3, 1},                             // in the same statement
		{insertRows + 2, 5},                // in a later statement
		{2*insertRows + 3, 6},              // in the tail, of a record of a statement
		{2*insertRows + 4, 2 * insertRows}, // in the tail, of one in the tail
		{insertRows + 9, 2*insertRows + 2}, // of one in the tail, before it
	}
	batch := append([]ledger.Record(nil), recs...)
	for _, d := range dups {
		batch[d.copy].RequestID = recs[d.of].RequestID
	}
	for i, err := range commitBatch(t, l, batch, nil) {
		if err != nil {
			t.Errorf("record %d: %v; want a duplicate to succeed", i, err)
		}
	}

	got := checkAggregates(t, l)
	want := map[string]int64{}
	for _, r := range before {
		want[r.RequestID] = 1
	}
	for _, r := range batch {
		if _, ok := want[r.RequestID]; !ok {
			want[r.RequestID] = r.Tokens[tokens.Input] // the first of an id
		}
	}
	gotTokens := map[string]int64{}
	for _, r := range got {
		gotTokens[r.RequestID] = r.Tokens[tokens.Input]
	}
	if diff := cmp.Diff(want, gotTokens); diff != "" {
		t.Errorf("stored records' input tokens (-want +got):\n%s", diff)
	}
	// The duplicate in the tail of one in the tail before it: the first
	// wins there too.
	if gotTokens[recs[2*insertRows].RequestID] != recs[2*insertRows].Tokens[tokens.Input] {
		t.Errorf("the tail's first copy of %s was not the one stored", recs[2*insertRows].RequestID)
	}
}

// TestMultiRowInsertRefusal: a record SQLite refuses (a CHECK here, which
// Validate would have caught) fails alone and is named, wherever it is —
// inside a multi-row statement (write then writes the batch again one row
// per statement), or in the single-row tail — and the rest of the batch is
// stored and counted. So with a trigger whose RAISE(ROLLBACK) ends the
// whole transaction within a multi-row statement.
func TestMultiRowInsertRefusal(t *testing.T) {
	for _, tt := range []struct {
		name    string
		bad     []int
		trigger bool
	}{
		{"in a statement", []int{7}, false},
		{"in two statements and the tail", []int{0, insertRows + insertRows/2, 2*insertRows + 2}, false},
		{"in the tail", []int{2*insertRows + 1}, false},
		{"rolled back by a trigger", []int{insertRows + 3}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
			recs := numbered(2*insertRows + 3)
			isBad := map[int]bool{}
			for _, i := range tt.bad {
				isBad[i] = true
			}
			if tt.trigger {
				_, err := l.db.ExecContext(t.Context(), `CREATE TRIGGER refuse BEFORE INSERT ON spend
					WHEN NEW.output_tokens = 999 BEGIN SELECT RAISE(ROLLBACK, 'rolled back by test'); END`)
				if err != nil {
					t.Fatal(err)
				}
				for i := range isBad {
					recs[i].Tokens[tokens.Output] = 999
				}
			}
			errs := commitBatch(t, l, recs, func(i int, args []any) {
				if isBad[i] && !tt.trigger {
					args[8] = int64(-1) // input_tokens, CHECK (input_tokens >= 0)
				}
			})
			var wantIDs []string
			for i, err := range errs {
				want := "CHECK constraint failed"
				if tt.trigger {
					want = "rolled back by test"
				}
				switch {
				case isBad[i]:
					if err == nil || !strings.Contains(err.Error(), want) || !recordFault(err) {
						t.Errorf("record %d = %v; want %q, a record's fault", i, err, want)
					}
				case err != nil:
					t.Errorf("record %d = %v; want it stored", i, err)
				default:
					wantIDs = append(wantIDs, recs[i].RequestID)
				}
			}
			got := checkAggregates(t, l)
			if diff := cmp.Diff(wantIDs, ids(got), sortStrings); diff != "" {
				t.Errorf("stored (-want +got):\n%s", diff)
			}
		})
	}
}

var sortStrings = cmp.Transformer("sort", func(s []string) []string {
	s = append([]string(nil), s...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
})

// TestCommitterSettings: the committer's connection gets its own page
// cache and checkpoint interval, and goes back to the pool as it came.
func TestCommitterSettings(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
	ctx := t.Context()
	conn, err := l.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pool := settingsOf(t, conn)
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if pool == [2]int{-committerCacheKiB, committerCheckpoint} {
		t.Fatalf("the pool's connection has the committer's settings %v before it ran", pool)
	}
	c, err := newCommitter(ctx, l.db)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := settingsOf(t, c.conn), [2]int{-committerCacheKiB, committerCheckpoint}; got != want {
		t.Errorf("committer's cache_size, wal_autocheckpoint = %v; want %v", got, want)
	}
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	// The pool gives back the connection given back last: the committer's.
	conn, err = l.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := settingsOf(t, conn); got != pool {
		t.Errorf("the pool's connection after the committer: %v; want %v as before", got, pool)
	}
}

// settingsOf reads conn's cache_size and wal_autocheckpoint.
func settingsOf(t *testing.T, conn *sql.Conn) [2]int {
	t.Helper()
	var s [2]int
	for i, p := range []string{"cache_size", "wal_autocheckpoint"} {
		if err := conn.QueryRowContext(t.Context(), "PRAGMA "+p).Scan(&s[i]); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// TestIdleCheckpoint: once the ingester (or, without a spool, the
// committer) has had nothing to do for IdleAfter, the database file
// holds everything the WAL does, although far fewer pages than
// committerCheckpoint were written.
func TestIdleCheckpoint(t *testing.T) {
	for _, spooled := range []bool{false, true} {
		t.Run(fmt.Sprintf("spool=%v", spooled), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.sqlite")
			rep := newReports()
			l := openTest(t, path, Options{Spool: spooled, OnError: rep.onError,
				tune: func(o *spool.Options) { o.IdleAfter = time.Millisecond }})
			start(t, l)
			for _, r := range numbered(10) {
				if err := l.Append(testctx.Deadline(t), r); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := l.Records(testctx.Deadline(t), ledger.Filter{Limit: 1}); err != nil {
				t.Fatal(err)
			}
			testctx.Wait(t, "an idle checkpoint that moves every WAL frame into the database file", func() bool {
				frames, backfilled := walState(t, path)
				return frames > 0 && backfilled == frames && l.Idles() > 0
			})
			rep.mu.Lock()
			defer rep.mu.Unlock()
			if len(rep.errs) > 0 {
				t.Errorf("checkpoints that succeeded reported errors: %v", rep.errs)
			}
		})
	}
}

// walState reads, from the WAL index (the -shm file), how many frames the
// WAL holds (mxFrame, at offset 16 of the index header) and how many of
// them are in the database file (nBackfill, the first field of the
// checkpoint information that follows the two 48-byte copies of the
// header): SQLite's wal.c, WalIndexHdr and WalCkptInfo, in native byte
// order.
func walState(t *testing.T, path string) (frames, backfilled uint32) {
	t.Helper()
	b, err := os.ReadFile(path + "-shm")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 100 {
		t.Fatalf("-shm holds %d bytes", len(b))
	}
	return binary.NativeEndian.Uint32(b[16:]), binary.NativeEndian.Uint32(b[96:])
}

// TestNumColumns: numColumns, which sizes the multi-row insert, is how
// many columns columns names and encode fills.
func TestNumColumns(t *testing.T) {
	args, err := encode(record("req_1"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(columns, ",") + 1; n != numColumns || len(args) != numColumns {
		t.Errorf("columns names %d, encode fills %d; numColumns is %d", n, len(args), numColumns)
	}
}

// TestBatchSumOverflowBlamesItsRecord: a record whose tokens would take its
// aggregate row past what it holds, within a batch (the row's sum of the
// records before it in the same transaction), is the one blamed — also
// in a later multi-row statement, at an offset within it — and the rest
// of the batch is stored.
func TestBatchSumOverflowBlamesItsRecord(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
	recs := numbered(3*insertRows + 3)
	big, over := insertRows+2, insertRows+5 // both in the second statement
	for i := range recs {
		recs[i].Tokens[tokens.Input] = 0
	}
	recs[big].Tokens[tokens.Input] = math.MaxInt64 - 10
	recs[over].Tokens[tokens.Input] = 100
	errs := commitBatch(t, l, recs, nil)
	for i, err := range errs {
		if (err != nil) != (i == over) {
			t.Errorf("record %d: %v; want only record %d refused", i, err, over)
		}
	}
	if got := checkAggregates(t, l); len(got) != len(recs)-1 {
		t.Errorf("%d records stored; want %d", len(got), len(recs)-1)
	}
}
