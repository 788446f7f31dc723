package sqlite

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAppend measures durable appends per second, and the latency of
// one Append, for each MaxBatch with as many concurrent appenders as there
// are settling requests at once (at 10,000 req/s and ~2 ms per commit,
// about 20). Its numbers chose DefaultMaxBatch: see
// doc.go.
func BenchmarkAppend(b *testing.B) {
	for _, appenders := range []int{1, 16, 64, 256, 1024} {
		for _, batch := range []int{1, 16, 128, 1024} {
			b.Run(fmt.Sprintf("appenders=%d/batch=%d", appenders, batch), func(b *testing.B) {
				benchAppend(b, Options{MaxBatch: batch}, appenders)
			})
		}
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
				if err := l.Append(ctx, record("req_"+strconv.Itoa(k))); err != nil {
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

func benchAppend(b *testing.B, opts Options, appenders int) {
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
				r := record("req_" + strconv.FormatInt(i, 10))
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
	b.StopTimer()
	records, commits := l.Stats()
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
	if commits > 0 {
		b.ReportMetric(float64(records)/float64(commits), "records/commit")
	}
	reportLatency(b, lats)
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
