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
// benchmark can show what the ledger's size does to the cost of a request
// (the records are spread over 1,000 keys and the 30 days before now, in
// request_id and started_at order, as a server appends them). It writes
// with SQL in transactions of a million rows: Append would take an hour
// for ten million.
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
	start := time.Now().Add(-time.Duration(span)).UnixNano()
	const chunk = 1_000_000
	began := time.Now()
	for done := int64(0); done < *n; done += chunk {
		k := min(chunk, *n-done)
		first := have + done
		_, err := db.ExecContext(ctx, `
WITH RECURSIVE seq(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1 + ?2 - 1)
INSERT INTO spend (request_id, key_id, team, org, endpoint, model, provider, upstream_model,
	input_tokens, cached_input_tokens, cache_creation_tokens, output_tokens, reasoning_tokens,
	priced, status, outcome, estimated, stream, started_at, finished_at, ttft, client_request_id, error_type,
	cost_pico, cache_creation_1h_tokens, audio_input_tokens, audio_output_tokens)
SELECT printf('prefill-%012d', i), 'k' || (i % 1000), 'team-' || (i % 50), 'bench', 'chat_completions',
	'gpt-4o-mini', 'openai', 'gpt-4o-mini', 120, 0, 0, 40, 0, 1, 200, 'ok', 0, 0,
	?3 + i * ?4, ?3 + i * ?4 + 500000000, 100000000, '', '', 42000000, 0, 0, 0
FROM seq`, first, k, start, span/(have+*n))
		if err != nil {
			return fmt.Errorf("prefill rows %d–%d: %w", first, first+k, err)
		}
		fmt.Fprintf(stderr, "prefill: %d of %d records (%s)\n", done+k, *n, time.Since(began).Round(time.Second))
	}
	return nil
}
