package sqlite

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
)

// BenchmarkAppend measures durable appends per second (records/s), and
// the latency of one Append, for each MaxBatch with as many concurrent
// appenders as there are settling requests at once (at 10,000 req/s and
// ~2 ms per commit, about 20), aggregates included: the records are
// spread over 1,000 keys, 50 teams, 5 orgs and 4 models (benchRecord), so
// a batch touches about two aggregate rows per record, near the worst
// case of three. Its numbers chose DefaultMaxBatch: see bench/README.md.
func BenchmarkAppend(b *testing.B) {
	for _, appenders := range []int{1, 16, 64, 256, 1024} {
		for _, batch := range []int{1, 16, 128, 1024} {
			b.Run(fmt.Sprintf("appenders=%d/batch=%d", appenders, batch), func(b *testing.B) {
				benchAppend(b, Options{MaxBatch: batch}, appenders, benchRecord)
			})
		}
	}
}

// BenchmarkAppendOneRow is BenchmarkAppend saturated, with every record
// on one key, team, org and model in one bucket: a batch touches three
// aggregate rows however large it is, the aggregates' best case.
func BenchmarkAppendOneRow(b *testing.B) {
	for _, batch := range []int{128, 1024} {
		b.Run(fmt.Sprintf("appenders=256/batch=%d", batch), func(b *testing.B) {
			benchAppend(b, Options{MaxBatch: batch}, 256, func(i int64) ledger.Record {
				return record("req_" + strconv.FormatInt(i, 10))
			})
		})
	}
}

// BenchmarkAppendRate measures MaxWait: appends arrive at a fixed rate,
// each from its own goroutine, as settlements do (open loop: an arrival
// does not wait for the previous one), and it reports their latency and
// how many commits (WAL syncs) they took.
func BenchmarkAppendRate(b *testing.B) {
	for _, rate := range []int{1000, 5000, 20000} {
		for _, wait := range []time.Duration{0, 500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond} {
			b.Run(fmt.Sprintf("rate=%d/wait=%v", rate, wait), func(b *testing.B) {
				benchRate(b, Options{MaxWait: wait}, rate)
			})
		}
	}
}

func benchRate(b *testing.B, opts Options, rate int) {
	l := openTest(b, filepath.Join(b.TempDir(), "ledger.sqlite"), opts)
	start(b, l)
	ctx := b.Context()
	// A 1 ms tick launches rate/1000 appends.
	perTick := max(1, rate/1000)
	ticker := time.NewTicker(time.Duration(perTick) * time.Second / time.Duration(rate))
	defer ticker.Stop()
	lats := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		<-ticker.C
		for j := 0; j < perTick && i < b.N; j, i = j+1, i+1 {
			k := i
			wg.Go(func() {
				t0 := time.Now()
				if err := l.Append(ctx, benchRecord(int64(k))); err != nil {
					b.Error(err)
				}
				lats[k] = time.Since(t0)
			})
		}
	}
	wg.Wait()
	b.StopTimer()
	records, commits := l.Stats()
	b.ReportMetric(float64(commits)/b.Elapsed().Seconds(), "commits/s")
	if commits > 0 {
		b.ReportMetric(float64(records)/float64(commits), "records/commit")
	}
	reportLatency(b, lats)
}

func benchAppend(b *testing.B, opts Options, appenders int, rec func(i int64) ledger.Record) {
	l := openTest(b, filepath.Join(b.TempDir(), "ledger.sqlite"), opts)
	start(b, l)
	ctx := b.Context()
	var (
		seq  atomic.Int64
		mu   sync.Mutex
		lats []time.Duration
	)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	// RunParallel would start a multiple of GOMAXPROCS goroutines; the
	// appender count is the variable here, so start exactly that many.
	n := int64(b.N)
	var wg sync.WaitGroup
	for range appenders {
		wg.Go(func() {
			var mine []time.Duration
			for {
				i := seq.Add(1)
				if i > n {
					break
				}
				r := rec(i)
				t0 := time.Now()
				if err := l.Append(ctx, r); err != nil {
					b.Error(err)
					break
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	// With a spool, the records are in SQLite once a read saw them: the
	// ingester's work is counted too.
	if _, err := l.Records(ctx, ledger.Filter{Limit: 1}); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(n), "cpu-µs/record")
	records, commits := l.Stats()
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
	if commits > 0 {
		b.ReportMetric(float64(records)/float64(commits), "records/commit")
	}
	reportLatency(b, lats)
}

// cpuTime is the process's CPU time so far (user and system): the
// appenders', the committer's, the ingester's and the kernel's work for
// them.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAppendSpool compares committing each batch to SQLite (direct)
// with the spool, with and without a MaxWait, in CPU per record (the
// figure the whole service pays), at a moderate and a high concurrency.
func BenchmarkAppendSpool(b *testing.B) {
	for _, appenders := range []int{16, 256} {
		for _, m := range []struct {
			name string
			opts Options
		}{
			{"direct", Options{}},
			{"spool", Options{Spool: true}},
			{"spool-wait-1ms", Options{Spool: true, MaxWait: time.Millisecond}},
			{"spool-linger-1ms", Options{Spool: true, Linger: time.Millisecond}},
		} {
			b.Run(fmt.Sprintf("appenders=%d/%s", appenders, m.name), func(b *testing.B) {
				benchAppend(b, m.opts, appenders, benchRecord)
			})
		}
	}
}

// benchRecord is the i-th record of a benchmark: its key, team, org and
// model go round 1,000 keys, 50 teams, 5 orgs and 4 models, so
// consecutive records (a batch) share few aggregate rows.
func benchRecord(i int64) ledger.Record {
	r := record("req_" + strconv.FormatInt(i, 10))
	r.KeyID = "key_" + strconv.FormatInt(i%1000, 10)
	r.Team = "team_" + strconv.FormatInt(i%50, 10)
	r.Org = "org_" + strconv.FormatInt(i%5, 10)
	r.Model = [...]string{"gpt-4o", "gpt-4o-mini", "claude-sonnet", "claude-haiku"}[i%4]
	return r
}

// reportLatency reports the median and 99th percentile of lats.
func reportLatency(b *testing.B, lats []time.Duration) {
	if len(lats) == 0 {
		return
	}
	slices.Sort(lats)
	b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
}
