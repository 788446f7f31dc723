package load

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"time"

	ledgersqlite "github.com/sluicegw/sluice/internal/ledger/sqlite"
)

// runPrefill fills a ledger file with synthetic spend records, so that the
// benchmark can show what the ledger's history does to the cost of a
// request: the records are spread over 1,000 keys and the 30 days before
// today (UTC), in request_id and started_at order, as a server appends
// them, with request ids shaped as Sluice's UUIDv7s of their time, so
// that they sort before the ids the benchmark's requests get. Today is
// left to the benchmark's own requests, so that a run on a prefilled
// ledger and one on an empty ledger differ only in the history. It
// writes with SQL in transactions of a million rows: Append would take an
// hour for ten million.
func runPrefill(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("prefill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("ledger", "", "the ledger `file` (created if missing)")
	n := fs.Int64("records", 0, "records to add")
	if err := fs.Parse(args); err != nil {
		return ErrUsage
	}
	if *path == "" || *n <= 0 {
		fmt.Fprintln(stderr, "prefill: --ledger FILE and --records N (> 0) are required")
		return ErrUsage
	}
	l, err := ledgersqlite.Open(ctx, *path, ledgersqlite.Options{}) // creates and migrates the schema
	if err != nil {
		return err
	}
	if err := l.Close(); err != nil {
		return err
	}
	db, err := sql.Open("sqlite", "file:"+*path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		return err
	}
	defer db.Close()
	var have int64
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM spend`).Scan(&have); err != nil {
		return err
	}
	const span = int64(30 * 24 * time.Hour)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	start := today.Add(-time.Duration(span)).UnixNano()
	const chunk = 1_000_000
	began := time.Now()
	for done := int64(0); done < *n; done += chunk {
		k := min(chunk, *n-done)
		first := have + done
		if err := prefillChunk(ctx, db, first, k, start, span/(have+*n)); err != nil {
			return fmt.Errorf("prefill rows %d–%d: %w", first, first+k, err)
		}
		fmt.Fprintf(stderr, "prefill: %d of %d records (%s)\n", done+k, *n, time.Since(began).Round(time.Second))
	}
	return nil
}

// prefillChunk inserts the records first to first+k-1, step ns apart
// from start, and adds them to the aggregates as the ledger's committer
// would (the bucket and lifetime rows of their key, team and org), in one
// transaction.
func prefillChunk(ctx context.Context, db *sql.DB, first, k, start, step int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	var before int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(rowid), 0) FROM spend`).Scan(&before); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `
WITH RECURSIVE seq(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1 + ?2 - 1)
INSERT INTO spend (request_id, key_id, team, org, endpoint, model, provider, upstream_model,
	input_tokens, cached_input_tokens, cache_creation_tokens, output_tokens, reasoning_tokens,
	priced, status, outcome, estimated, stream, started_at, finished_at, ttft, client_request_id, error_type,
	cost_pico, cache_creation_1h_tokens, audio_input_tokens, audio_output_tokens)
SELECT printf('%08x-%04x-7000-8000-%012x', (?3 + i * ?4) / 1000000 >> 16, (?3 + i * ?4) / 1000000 & 65535, i), 'k' || (i % 1000), 'team-' || (i % 50), 'bench', 'chat_completions',
	'gpt-4o-mini', 'openai', 'gpt-4o-mini', 120, 0, 0, 40, 0, 1, 200, 'ok', 0, 0,
	?3 + i * ?4, ?3 + i * ?4 + 500000000, 100000000, '', '', 42000000, 0, 0, 0
FROM seq`, first, k, start, step)
	if err != nil {
		return err
	}
	// The chunk's sums per scope, id, model and 15-minute bucket (floored,
	// as ledger.BucketOf), and per scope, id and model for the lifetime,
	// added to the rows already there.
	for _, a := range []struct {
		table  string
		bucket bool
	}{{"spend_agg", true}, {"spend_life", false}} {
		if _, err := tx.ExecContext(ctx, addChunkSums(a.table, a.bucket), before); err != nil {
			return fmt.Errorf("%s: %w", a.table, err)
		}
	}
	return tx.Commit()
}

// addChunkSums is the statement that adds the sums of the records after
// rowid ?1 to table's rows, keyed by scope, id and model, and by the
// bucket too (spend_agg) or not (spend_life): the cost in whole
// micro-dollars and the pico-dollars beyond them.
func addChunkSums(table string, byBucket bool) string {
	bucket, sel, key := "", "scope, id, model", "scope, id, model"
	if byBucket {
		bucket, sel, key = ", bucket", "scope, id, model, bucket", "bucket, scope, id, model"
	}
	return `
WITH r AS (
	SELECT key_id, team, org, model, cost_pico, input_tokens, cached_input_tokens, output_tokens,
		(started_at - ((started_at % 900000000000) + 900000000000) % 900000000000) / 1000000000 AS bucket
	FROM spend WHERE rowid > ?1
), s AS (
	SELECT 'key' AS scope, key_id AS id, model` + bucket + `, cost_pico, input_tokens, cached_input_tokens, output_tokens FROM r
	UNION ALL SELECT 'team', team, model` + bucket + `, cost_pico, input_tokens, cached_input_tokens, output_tokens FROM r
	UNION ALL SELECT 'org', org, model` + bucket + `, cost_pico, input_tokens, cached_input_tokens, output_tokens FROM r
)
INSERT INTO ` + table + ` (` + sel + `, cost_micros, cost_pico, input_tokens, cached_input_tokens, output_tokens, requests)
SELECT ` + sel + `,
	sum(cost_pico / 1000000) + sum(cost_pico % 1000000) / 1000000, sum(cost_pico % 1000000) % 1000000,
	sum(input_tokens), sum(cached_input_tokens), sum(output_tokens), count(*)
FROM s WHERE true GROUP BY ` + sel + `
ON CONFLICT (` + key + `) DO UPDATE SET
	cost_micros = cost_micros + excluded.cost_micros + (cost_pico + excluded.cost_pico) / 1000000,
	cost_pico = (cost_pico + excluded.cost_pico) % 1000000,
	input_tokens = input_tokens + excluded.input_tokens,
	cached_input_tokens = cached_input_tokens + excluded.cached_input_tokens,
	output_tokens = output_tokens + excluded.output_tokens,
	requests = requests + excluded.requests`
}
