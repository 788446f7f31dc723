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

	"github.com/sluicegw/sluice/internal/ledger/spool"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/internal/testenv/pgtest"
)

// TestDatabaseDownMidLoad: PostgreSQL crashes (pg_ctl stop -m immediate)
// while eight writers append. Appends go on being acknowledged — the
// spool holds them — and the backlog grows; PostgreSQL comes back, the
// ingester drains the spool, and the ledger holds every acknowledged
// record once, its aggregates their sums.
func TestDatabaseDownMidLoad(t *testing.T) {
	srv := pgtest.Own(t)
	url := srv.Database(t)
	if _, _, err := Migrate(context.Background(), url, testenv.Quiet()); err != nil {
		t.Fatal(err)
	}
	var reports atomic.Int64
	l := openSpooled(t, url, spool.Options{
		Path:    filepath.Join(t.TempDir(), "ledger-spool"),
		OnError: func(error) { reports.Add(1) },
	})

	var (
		mu       sync.Mutex
		acked    []string
		canceled = map[string]bool{} // an Append the test's end cut short: it may still be committed
		failed   []error
	)
	ctx, stop := context.WithCancel(testctx.Deadline(t))
	defer stop()
	started := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				r := record(fmt.Sprintf("req_%d_%06d", g, i), g*10+i%10, started.Add(time.Duration(i)*time.Millisecond), int64(1000+i))
				if err := l.Append(ctx, r); err != nil {
					mu.Lock()
					if ctx.Err() == nil {
						failed = append(failed, err)
					} else {
						canceled[r.RequestID] = true
					}
					mu.Unlock()
					return
				}
				mu.Lock()
				acked = append(acked, r.RequestID)
				mu.Unlock()
				time.Sleep(time.Millisecond) // a request's pace, not a spin
			}
		})
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	testctx.Wait(t, "200 records acknowledged with PostgreSQL up", func() bool { return count() >= 200 })
	if err := srv.Halt(); err != nil {
		t.Fatal(err)
	}
	down := count()
	testctx.Wait(t, "500 more records acknowledged with PostgreSQL down, and a backlog", func() bool {
		return count() >= down+500 && l.Backlog() > 0
	})
	backlog := l.Backlog()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	testctx.Wait(t, "200 more records acknowledged after PostgreSQL returned", func() bool { return count() >= down+700 })
	stop()
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d Appends failed (first: %v); want every one acknowledged by the spool", len(failed), failed[0])
	}
	testctx.Wait(t, "the spool drained into PostgreSQL", func() bool { return l.Backlog() == 0 })

	s := stateOf(t, l.DB())
	got := make([]string, len(s.Records))
	for i, r := range s.Records {
		got[i] = r.RequestID
	}
	slices.Sort(got)
	slices.Sort(acked)
	inLedger := map[string]bool{}
	for _, id := range got {
		inLedger[id] = true
	}
	for _, id := range acked {
		if !inLedger[id] {
			t.Fatalf("acknowledged %s is not in the ledger", id)
		}
		delete(inLedger, id)
	}
	for id := range inLedger {
		if !canceled[id] {
			t.Fatalf("the ledger holds %s, which was never appended", id)
		}
	}
	checkAggregates(t, s)
	if reports.Load() == 0 {
		t.Error("the failed ingestions while PostgreSQL was down were not reported")
	}
	t.Logf("%d records acknowledged, %d while PostgreSQL was down (backlog %d at its peak seen); all in the ledger once", len(acked), len(acked)-down, backlog)
	if l.Dropped() != 0 {
		t.Errorf("%d records dropped; want none", l.Dropped())
	}
}
