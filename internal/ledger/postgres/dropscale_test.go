package postgres

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
)

// dropEnv names how many records TestDropAtScale loads into the month it
// drops; unset, the test is skipped (it is a measurement, not a check
// make test runs).
const dropEnv = "SLUICE_PG_DROP_ROWS"

// TestDropAtScale measures retention at scale: a month of n records (and
// their request ids) is dropped while a writer inserts into the current
// month, and the test reports how long the drop took and the writer's
// slowest insert meanwhile.
//
//	SLUICE_PG_DROP_ROWS=1000000 go test -run TestDropAtScale -v -timeout 1h ./internal/ledger/postgres
func TestDropAtScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(dropEnv))
	if n <= 0 {
		t.Skip("set " + dropEnv + " to the records of the month to drop")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	l := openTest(t, newDatabase(t))
	old := monthOf(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	if err := l.ensure(ctx, []month{old}); err != nil {
		t.Fatal(err)
	}
	step := (old.next().start.UnixNano() - old.start.UnixNano()) / int64(n)
	load := time.Now()
	for _, q := range []string{
		`INSERT INTO ledger_records (` + columnList("") + `)
		SELECT 'old_' || lpad(i::text, 9, '0'), '', 'key_' || (i % 1000), 'team_' || (i % 100), 'org_' || (i % 10),
			'chat_completions', 'm', 'p', 'm', true, 200, 'ok', '', false, false,
			$1::bigint + i * $2::bigint, $1::bigint + i * $2::bigint + 1, 0, 1000, 10, 0, 0, 10, 0, 0, 0, 0
		FROM generate_series(0, $3::bigint - 1) AS i`,
		`INSERT INTO ledger_ids (request_id, started_at) SELECT request_id, started_at FROM ledger_records`,
		`VACUUM ANALYZE`,
	} {
		if _, err := l.pool.Exec(ctx, q, argsFor(q, old.start.UnixNano(), step, n)...); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("loaded %d records into %s in %v", n, old.name(), time.Since(load).Round(time.Second))

	var (
		mu      sync.Mutex
		slowest time.Duration
		inserts int
	)
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; wctx.Err() == nil; i++ {
			recs := make([]ledger.Record, 100)
			for j := range recs {
				recs[j] = record(fmt.Sprintf("new_%d_%d", i, j), j, time.Now().UTC(), 1000)
			}
			s := time.Now()
			if _, err := l.Insert(wctx, recs); err != nil && wctx.Err() == nil {
				t.Error(err)
				return
			}
			mu.Lock()
			slowest = max(slowest, time.Since(s))
			inserts++
			mu.Unlock()
		}
	})
	time.Sleep(200 * time.Millisecond) // the writer's own pace first
	mu.Lock()
	before := slowest
	slowest = 0
	mu.Unlock()
	start := time.Now()
	dropped, err := l.DropBefore(ctx, old.next().start)
	took := time.Since(start)
	stop()
	wg.Wait()
	if err != nil || len(dropped) != 1 {
		t.Fatalf("DropBefore = %v, %v", dropped, err)
	}
	t.Logf("dropped %s (%d records and ids) in %v; the writer's slowest insert of 100 records: %v during the drop, %v before (%d inserts)",
		old.name(), n, took.Round(time.Millisecond), slowest.Round(time.Millisecond), before.Round(time.Millisecond), inserts)
}

// argsFor gives the loading statements their arguments: the first takes
// three, the others none.
func argsFor(q string, lo, step int64, n int) []any {
	if strings.HasPrefix(q, "INSERT INTO ledger_records") {
		return []any{lo, step, n}
	}
	return nil
}
