package sqlite

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/internal/tokens"
)

// fill writes n records of key (its team and org named after it), each
// costing cost pico-dollars, one millisecond apart from start, with the
// aggregates they make: the bulk of a ledger, written in one statement
// each so that a test of millions of records stays fast. The rows are
// what Append writes; the aggregate rows are summed exactly, whole
// micro-dollars and remainders apart, and so are the lifetime rows.
func fill(t *testing.T, l *Ledger, key string, n, cost int64, start time.Time) {
	t.Helper()
	ctx := t.Context()
	conn, err := l.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A larger page cache than the default 2 MiB, for the indexes being
	// built.
	if _, err := conn.ExecContext(ctx, `PRAGMA cache_size = -16384`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `
		WITH RECURSIVE i(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM i WHERE n + 1 < ?1)
		INSERT INTO spend (`+columns+`)
		SELECT ?2 || printf('_%07d', n), ?2, ?2, ?2, 'embeddings', 'm', 'openai', 'm',
			1, 200, 'ok', 0, 0, ?3 + n * 1000000, ?3 + n * 1000000, 0,
			'', '', ?4, 7`+strings.Repeat(", 0", tokens.NumKinds-1)+`
		FROM i`, n, key, start.UnixNano(), cost); err != nil {
		t.Fatal(err)
	}
	for _, scope := range []string{"key", "team", "org"} {
		if _, err := conn.ExecContext(ctx, `
			INSERT INTO spend_agg (`+aggColumns+`)
			SELECT ?1, ?2, model, `+bucketExpr+` AS b,
				sum(cost_pico / 1000000) + sum(cost_pico % 1000000) / 1000000, sum(cost_pico % 1000000) % 1000000,
				sum(input_tokens), sum(cached_input_tokens), sum(output_tokens), count(*)
			FROM spend WHERE key_id = ?2 GROUP BY model, b`, scope, key); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, `
			INSERT INTO spend_life (scope, id, model, cost_micros, cost_pico, input_tokens, cached_input_tokens, output_tokens, requests)
			SELECT scope, id, model, sum(cost_micros) + sum(cost_pico) / 1000000, sum(cost_pico) % 1000000,
				sum(input_tokens), sum(cached_input_tokens), sum(output_tokens), sum(requests)
			FROM spend_agg WHERE scope = ?1 AND id = ?2 GROUP BY scope, id, model`, scope, key); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMillionRecordsExact reads exact totals over millions of records
// from SQL sums that must not overflow: a million records of 0.14 µ$ (7
// tokens of an embedding model at $0.02 per 1M, 140,000 p$ each) and one
// of 1 p$, appended, come to exactly 140,000,000,001 p$ (about $0.14),
// where charging each request a whole micro-dollar would have made it $1;
// and a thousand records of the largest cost a record holds (math.MaxInt64
// p$, $9.2M) come to exactly $9.2 billion, which a plain SQL sum of
// pico-dollars would have refused at the second record.
// The Totals, the Buckets and Lifetime all say so, and the record
// appended after the bulk carries its pico-dollar into the aggregates.
func TestMillionRecordsExact(t *testing.T) {
	// Enough records of $9.2M to pass $9.2M many times over; fewer than
	// the tiny ones, whose number is the point (a hundred times fewer
	// under the race detector, which has nothing to check in one
	// goroutine's bulk inserts and would make them last minutes).
	n, hugeN := int64(1_000_000), int64(1_000)
	if testenv.Race {
		n = 10_000
	}
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
	base := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	fill(t, l, "tiny", n, 140_000, base)
	fill(t, l, "huge", hugeN, math.MaxInt64, base)
	start(t, l)
	last := record("tiny_last")
	last.KeyID, last.Team, last.Org, last.Model, last.CostPico = "tiny", "tiny", "tiny", "m", 1
	last.StartedAt = base.Add(time.Hour)
	if err := l.Append(testctx.Deadline(t), last); err != nil {
		t.Fatal(err)
	}

	tiny := money.FromParts(0, 140_000*n+1)
	huge := money.FromParts(0, math.MaxInt64).Add(money.FromParts(math.MaxInt64/money.PicoPerMicro*(hugeN-1), math.MaxInt64%money.PicoPerMicro*(hugeN-1)))
	if (!testenv.Race && tiny.PicoString() != "140000000001") || huge.PicoString() != "9223372036854775807000" {
		t.Fatalf("the test's own sums are %s and %s p$", tiny.PicoString(), huge.PicoString())
	}
	ts, err := l.Totals(t.Context(), ledger.Filter{}, ledger.ByKey)
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.Total{
		{Group: "huge", Requests: hugeN, Tokens: tokens.Counts{tokens.Input: 7 * hugeN}, Cost: huge},
		{Group: "tiny", Requests: n + 1, Tokens: tokens.Counts{tokens.Input: 7*n + last.Tokens[tokens.Input], tokens.Output: last.Tokens[tokens.Output]}, Cost: tiny},
	}
	if diff := cmp.Diff(want, ts); diff != "" {
		t.Errorf("Totals by key (-want +got):\n%s", diff)
	}
	if len(ts) == 2 && ts[1].Cost.MicrosUp() != 140_000*n/money.PicoPerMicro+1 {
		t.Errorf("tiny's total rounded up to µ$ = %d; want %d", ts[1].Cost.MicrosUp(), 140_000*n/money.PicoPerMicro+1)
	}
	life, err := l.Lifetime(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	buckets, err := l.Buckets(t.Context(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, scope := range ledger.Scopes() {
		for id, want := range map[string]money.Sum{"tiny": tiny, "huge": huge} {
			var inLife, inBuckets money.Sum
			for _, a := range life {
				if a.Scope == scope && a.ID == id {
					inLife = inLife.Add(a.Cost)
				}
			}
			for _, a := range buckets {
				if a.Scope == scope && a.ID == id {
					inBuckets = inBuckets.Add(a.Cost)
				}
			}
			if inLife != want || inBuckets != want {
				t.Errorf("%s %s: Lifetime %s p$, Buckets %s p$; want %s", scope, id, inLife.PicoString(), inBuckets.PicoString(), want.PicoString())
			}
		}
	}
}
