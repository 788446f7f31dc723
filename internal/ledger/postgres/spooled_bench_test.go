package postgres

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/spool"
)

// BenchmarkSpooled is the ledger serve runs, end to end: 64 goroutines
// Append records (1,000 keys, 100 teams, 10 orgs, 5 models) as settled
// requests do, each Append acknowledged once the spool's fdatasync holds
// it, while the ingester moves them into PostgreSQL behind. It reports
// the acknowledged records a second, the Appends' latency, the records a
// second into PostgreSQL (all of them, counted from the first Append to
// the spool drained), and checks that every record is there once. The
// server syncs its commits (fsync on).
//
//	go test -run '^$' -bench BenchmarkSpooled -benchtime 100000x ./internal/ledger/postgres
func BenchmarkSpooled(b *testing.B) {
	url := durableDatabase(b)
	l, err := Open(context.Background(), url, Options{Spool: spool.Options{Path: filepath.Join(b.TempDir(), "spool"), Linger: time.Millisecond}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			b.Error(err)
		}
		l.Close()
	}()
	models := []string{"gpt-4o", "gpt-4o-mini", "claude-sonnet", "claude-haiku", "llama"}
	start := time.Now().UTC().Add(-time.Hour)
	var next atomic.Int64
	lat := make([][]time.Duration, 64)
	b.ResetTimer()
	began := time.Now()
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for {
				n := next.Add(1) - 1
				if n >= int64(b.N) {
					return
				}
				k := int(n % 1000)
				r := record(fmt.Sprintf("req_%09d", n), k, start.Add(time.Duration(n)*time.Microsecond), (n%5000)*1_000_000)
				r.Team, r.Org, r.Model = fmt.Sprintf("team_%d", k%100), fmt.Sprintf("org_%d", k%10), models[n%5]
				s := time.Now()
				if err := l.Append(ctx, r); err != nil {
					b.Error(err)
					return
				}
				lat[g] = append(lat[g], time.Since(s))
			}
		})
	}
	wg.Wait()
	acked := time.Since(began)
	for l.Backlog() > 0 {
		time.Sleep(time.Millisecond)
	}
	drained := time.Since(began)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/acked.Seconds(), "acked/s")
	b.ReportMetric(float64(b.N)/drained.Seconds(), "into-pg/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	recs, err := l.DB().Records(context.Background(), ledger.Filter{})
	if err != nil || len(recs) != b.N {
		b.Fatalf("the ledger holds %d records, %v; want every one of %d", len(recs), err, b.N)
	}
}
