package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluicegw/sluice/internal/ledger"
)

// BenchmarkIngest measures ingestion alone: the CPU per record (the
// process's, from getrusage) of inserting pre-built records into SQLite in
// transactions of batch records, as the ingester does (Writer.Write: the
// inserts, the aggregates, the commits and the WAL checkpoints they
// trigger, and one checkpoint at the end, so that every page written
// reaches the database file within the measurement whatever the
// checkpoint interval), into a new ledger and into one that already holds
// a million rows. No Append, no spool: what is measured is what the
// ingester costs the server per record.
//
// keys=1: every record on one key, team, org and model, as in the
// whole-service benchmark (bench/), where a transaction changes a few
// pages at the end of each b-tree; keys=1000: benchRecord's spread (1,000
// keys, 50 teams, 5 orgs, 4 models), where it changes a page per key in
// spend_key and in the aggregates. Request ids are UUIDv7, as Sluice
// generates them. The million rows span the 28 hours before a midnight
// (StartedAt 100 ms apart, so with 1,000 keys the aggregates hold 112
// buckets' rows, some 125,000), and the records ingested follow them 1 ms
// apart from that midnight on: a ledger's history, then today. batch=128 is
// the ingester's transaction at 2,500 records/s (what it collects in
// spool.DefaultIngestDelay), 1024 its cap.
//
// The million-row runs need SLUICE_BENCH_LEDGERS, a directory where the
// two million-row ledgers (about 350 MB each) are built on first use (a
// minute or so each) and kept, to be copied for every run and reused by
// later ones (so that two builds compare on the same files); without it
// they are skipped, so that `make test` and `make bench` build no such
// ledger. Run with a fixed count of records:
//
//	SLUICE_BENCH_LEDGERS=/tmp/ledgers go test -tags=vtprotobuf -run '^$' -bench BenchmarkIngest -benchtime 20480x -count 5 ./internal/ledger/sqlite
func BenchmarkIngest(b *testing.B) {
	for _, keys := range []int{1, 1000} {
		for _, rows := range []int{0, 1_000_000} {
			for _, batch := range []int{128, 1024} {
				b.Run(fmt.Sprintf("keys=%d/rows=%d/batch=%d", keys, rows, batch), func(b *testing.B) {
					benchIngest(b, keys, rows, batch)
				})
			}
		}
	}
}

func benchIngest(b *testing.B, keys, rows, batch int) {
	path := filepath.Join(b.TempDir(), "ledger.sqlite")
	if rows > 0 {
		dir := os.Getenv("SLUICE_BENCH_LEDGERS")
		if dir == "" {
			b.Skip("SLUICE_BENCH_LEDGERS is not set: no directory to build the million-row ledger in")
		}
		copyFile(b, benchBase(b, dir, keys, rows), path)
	}
	l := openTest(b, path, Options{})
	ctx := context.Background()
	c, err := newCommitter(ctx, l.db)
	if err != nil {
		b.Fatal(err)
	}
	defer c.close()
	// A server's committer has run for a while: its page cache is full
	// (and from then on pages are recycled, not allocated). Fill it by
	// reading the table through it. (An empty ledger has nothing to fill
	// it with: its runs include the cache's growth, up to 16 MiB.)
	var maxTTFT sql.NullInt64
	if err := c.conn.QueryRowContext(ctx, "SELECT max(ttft) FROM spend").Scan(&maxTTFT); err != nil {
		b.Fatal(err)
	}
	recs := make([]any, b.N)
	for i := range recs {
		recs[i] = ingestPending(b, int64(rows+i), rows, keys)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for len(recs) > 0 {
		n := min(batch, len(recs))
		if _, err := c.Write(ctx, recs[:n]); err != nil {
			b.Fatal(err)
		}
		recs = recs[n:]
	}
	if _, err := c.conn.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)"); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/record")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// ingestRecord is benchRecord(i) with a UUIDv7 request id, the i-th
// after a ledger's first rows: those are 100 ms apart and end where the
// day after benchRecord's StartedAt begins, the ones after them 1 ms
// apart from there on, as today's traffic follows a ledger's history.
func ingestRecord(i int64, rows, keys int) ledger.Record {
	r := record("")
	if keys > 1 {
		r = benchRecord(i)
	}
	r.RequestID = uuid.Must(uuid.NewV7()).String()
	today := r.StartedAt.Truncate(24 * time.Hour).Add(24 * time.Hour)
	if n := int64(rows); i < n {
		r.StartedAt = today.Add(-time.Duration(n-i) * 100 * time.Millisecond)
	} else {
		r.StartedAt = today.Add(time.Duration(i-n) * time.Millisecond)
	}
	r.FinishedAt = r.StartedAt.Add(time.Second)
	return r
}

func ingestPending(tb testing.TB, i int64, rows, keys int) any {
	p, err := (*sink)(nil).Prepare(ingestRecord(i, rows, keys))
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

var benchBases struct {
	sync.Mutex
	paths map[[2]int]string
}

// benchBase is the path of a ledger file in dir holding rows records
// (ingestRecord 0 to rows-1) of keys keys, built if dir does not hold it
// yet.
func benchBase(b *testing.B, dir string, keys, rows int) string {
	bb := &benchBases
	bb.Lock()
	defer bb.Unlock()
	if p, ok := bb.paths[[2]int{keys, rows}]; ok {
		return p
	}
	if bb.paths == nil {
		bb.paths = map[[2]int]string{}
	}
	path := filepath.Join(dir, fmt.Sprintf("ledger-history-keys%d-rows%d.sqlite", keys, rows))
	if _, err := os.Stat(path); err == nil {
		bb.paths[[2]int{keys, rows}] = path
		return path
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		b.Fatal(err)
	}
	tmp := path + ".building" // renamed once complete
	for _, f := range []string{tmp, tmp + "-wal", tmp + "-shm"} {
		_ = os.Remove(f) // left by a build that was stopped
	}
	ctx := context.Background()
	l, err := Open(ctx, tmp, Options{})
	if err != nil {
		b.Fatal(err)
	}
	c, err := newCommitter(ctx, l.db)
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]any, 0, 1024) // the ingester's largest transaction
	for i := range rows {
		batch = append(batch, ingestPending(b, int64(i), rows, keys))
		if len(batch) == cap(batch) || i == rows-1 {
			if _, err := c.Write(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	// Everything into the main file, so that a copy of it is the ledger.
	if _, err := c.conn.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		b.Fatal(err)
	}
	if err := c.close(); err != nil {
		b.Fatal(err)
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		b.Fatal(err)
	}
	bb.paths[[2]int{keys, rows}] = path
	return path
}

func copyFile(tb testing.TB, from, to string) {
	tb.Helper()
	src, err := os.Open(from)
	if err != nil {
		tb.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		tb.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		tb.Fatal(err)
	}
}
