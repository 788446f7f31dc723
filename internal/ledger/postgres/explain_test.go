package postgres

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicegw/sluice/internal/ledger"
)

// explainEnv runs TestExplain when set to 1. It loads ten million rows
// (minutes), so it is never run by default.
const explainEnv = "SLUICE_PG_EXPLAIN"

// TestExplain loads 10,000,000 records spread evenly over the last twelve
// months, 1,000 keys in 100 teams in 10 orgs, five models, and the
// aggregates they make, straight into the tables with INSERT … SELECT
// FROM generate_series (not through Insert), then prints EXPLAIN (ANALYZE,
// BUFFERS) of each report as Records, Totals, Buckets and Lifetime run
// it: the plans in doc.go, "Reports at scale". The aggregates go in in
// bucket order, as Insert writes them over time, so that a recent range
// of ledger_buckets sits together at the end of its heap.
//
//	SLUICE_PG_EXPLAIN=1 go test -run TestExplain -v -timeout 1h ./internal/ledger/postgres
func TestExplain(t *testing.T) {
	if os.Getenv(explainEnv) != "1" {
		t.Skip("set " + explainEnv + "=1 to load ten million records and explain the reports")
	}
	const n = 10_000_000
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	url := newDatabase(t)
	l := openTest(t, url)
	now := time.Now().UTC()
	first := monthOf(now).start.AddDate(-1, 0, 0)
	var ms []month
	for m := monthOf(first); !m.start.After(now); m = m.next() {
		ms = append(ms, m)
	}
	if err := l.ensure(ctx, ms); err != nil {
		t.Fatal(err)
	}
	lo, hi := first.UnixNano(), now.UnixNano()
	step := (hi - lo) / n
	start := time.Now()
	exec := func(what, sql string, args ...any) {
		t.Helper()
		s := time.Now()
		if _, err := l.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s: %v", what, time.Since(s).Round(time.Second))
	}
	// Key k is in team k % 100, in org k % 10; record i's key is spread
	// by a prime stride so that every key has records every day.
	exec("load records", `INSERT INTO ledger_records (`+columnList("")+`)
		SELECT 'req_' || lpad(i::text, 9, '0'), '', 'key_' || lpad(k::text, 4, '0'), 'team_' || (k % 100), 'org_' || (k % 10),
			'chat_completions', m, 'p', m, true, 200, 'ok', '', i % 7 = 0, i % 2 = 0,
			$1::bigint + i * $2::bigint, $1::bigint + i * $2::bigint + 1500000000, 300000000, (i * 7919 % 5000) * 1000000,
			1000 + i % 500, i % 300, 0, 200 + i % 100, 0, 0, 0, 0
		FROM generate_series(0, $3::bigint - 1) AS i,
			LATERAL (SELECT (i * 7919) % 1000 AS k) AS kk,
			LATERAL (SELECT (ARRAY['gpt-4o', 'gpt-4o-mini', 'claude-sonnet', 'claude-haiku', 'llama'])[1 + (i % 5)] AS m) AS mm`,
		lo, step, n)
	exec("build buckets", `INSERT INTO ledger_buckets (bucket, scope, id, model, cost_pico, input_tokens, cached_input_tokens, output_tokens, requests)
		SELECT (r.started_at / 900000000000) * 900, s.scope, s.id, r.model, sum(r.cost_pico), sum(r.input_tokens),
			sum(r.cached_input_tokens), sum(r.output_tokens), count(*)
		FROM ledger_records r CROSS JOIN LATERAL (VALUES ('key', r.key_id), ('team', r.team), ('org', r.org)) AS s(scope, id)
		GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`)
	exec("build lifetime", `INSERT INTO ledger_life (scope, id, model, cost_pico, input_tokens, cached_input_tokens, output_tokens, requests)
		SELECT scope, id, model, sum(cost_pico), sum(input_tokens), sum(cached_input_tokens), sum(output_tokens), sum(requests)
		FROM ledger_buckets GROUP BY 1, 2, 3`)
	exec("vacuum analyze", `VACUUM ANALYZE`)
	t.Logf("loaded in %v", time.Since(start).Round(time.Second))

	var size string
	if err := l.pool.QueryRow(ctx, `SELECT pg_size_pretty(pg_database_size(current_database()))`).Scan(&size); err != nil {
		t.Fatal(err)
	}
	t.Logf("database size: %s", size)

	day := now.Truncate(24 * time.Hour).Add(-24 * time.Hour)
	lastMonth := monthOf(now).start.AddDate(0, -1, 0)
	byKey := ledger.Filter{KeyID: "key_0042", Since: day, Until: day.Add(24 * time.Hour)}
	byTeam := ledger.Filter{Since: lastMonth, Until: lastMonth.AddDate(0, 1, 0)}
	byModel := ledger.Filter{Since: now.AddDate(0, 0, -7)}
	keyMonth := ledger.Filter{KeyID: "key_0042", Since: lastMonth, Until: lastMonth.AddDate(0, 1, 0)}
	reports := []struct {
		name string
		sql  string
		args []any
	}{
		{"Records, one key over a day", "", nil},
		{"Totals by team over a month", "", nil},
		{"Totals by model over the last 7 days", "", nil},
		{"Totals by model of one key over a month", "", nil},
		{"Buckets since a day ago", bucketsQuery, []any{ledger.BucketOf(now.Add(-24 * time.Hour)).Unix()}},
		{"Lifetime", lifetimeQuery, nil},
	}
	reports[0].sql, reports[0].args = recordsQuery(byKey)
	reports[1].sql, reports[1].args = totalsQuery(byTeam, ledger.ByTeam)
	reports[2].sql, reports[2].args = totalsQuery(byModel, ledger.ByModel)
	reports[3].sql, reports[3].args = totalsQuery(keyMonth, ledger.ByModel)
	var out strings.Builder
	for _, r := range reports {
		// Twice: the first run reads from disk what the second finds in
		// shared buffers; the second is the steady state.
		var plan []string
		for range 2 {
			rows, err := l.pool.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) `+r.sql, r.args...)
			if err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			if plan, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
		}
		fmt.Fprintf(&out, "\n%s %v\n%s\n", r.name, r.args, strings.Join(plan, "\n"))
	}
	t.Log(out.String())
}
