package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/tokens"
)

// columnTypes are the SQL array types Insert binds recordColumns as.
var columnTypes = append([]string{
	"text", "text", "text", "text", "text", "text", "text", "text", "text",
	"boolean", "bigint", "text", "text", "boolean", "boolean", "bigint", "bigint", "bigint", "bigint",
}, slices.Repeat([]string{"bigint"}, tokens.NumKinds)...)

// insertSQL stores a batch and counts it, in one statement: each column
// of the batch is an array parameter, unnested into rows.
//
//   - input drops the records of a range retention dropped (ledger_dropped):
//     their month is gone, with the ids that would have found them
//     duplicates, so storing one again would count it twice in the
//     lifetime sums.
//   - claimed takes each request_id in ledger_ids, for the first record
//     of the batch that has it (DISTINCT ON … ord), or for none if it is
//     there already: the first record of a RequestID wins, whatever its
//     started_at, as ledger.Ledger promises. A concurrent Insert of the
//     same id waits for this one's commit and then skips it. The ids go
//     in in their order, so two Inserts that share ids take them in the
//     same order and never deadlock.
//   - inserted stores the records that claimed their id, on the records'
//     own unique key (request_id, started_at) too, which also skips a
//     second copy of a record later in the same batch.
//   - sums, buckets and life add exactly the rows inserted returns to the
//     aggregates, each row once per statement (ON CONFLICT DO UPDATE may
//     touch a row only once), in primary-key order, so that concurrent
//     Inserts lock the rows they share in the same order and never
//     deadlock over them. A token sum past an int64 fails the statement
//     (22003) rather than wrap.
//
// The bucket is started_at's, floored to 900 s (ledger.BucketOf), computed
// without an intermediate that could leave an int64 at either end of the
// storable range.
var insertSQL = func() string {
	params := make([]string, len(recordColumns))
	for i, typ := range columnTypes {
		params[i] = "$" + strconv.Itoa(i+1) + "::" + typ + "[]"
	}
	const sums = `input_tokens, cached_input_tokens, output_tokens, requests`
	return `WITH input AS (
	SELECT * FROM unnest(` + strings.Join(params, ", ") + `) WITH ORDINALITY AS u(` + columnList("") + `, ord)
	WHERE NOT EXISTS (SELECT 1 FROM ledger_dropped d WHERE u.started_at BETWEEN d.lo AND d.last)
), claimed AS (
	INSERT INTO ledger_ids (request_id, started_at)
	SELECT DISTINCT ON (request_id) request_id, started_at FROM input ORDER BY request_id, ord
	ON CONFLICT (request_id) DO NOTHING
	RETURNING request_id, started_at
), inserted AS (
	INSERT INTO ledger_records (` + columnList("") + `)
	SELECT ` + columnList("u.") + ` FROM input u JOIN claimed c USING (request_id, started_at) ORDER BY u.ord
	ON CONFLICT (request_id, started_at) DO NOTHING
	RETURNING key_id, team, org, model, started_at, cost_pico, input_tokens, cached_input_tokens, output_tokens
), sums AS (
	SELECT (i.started_at / 900000000000 - (i.started_at % 900000000000 < 0)::int) * 900 AS bucket,
		s.scope, s.id, i.model,
		sum(i.cost_pico) AS cost_pico, sum(i.input_tokens) AS input_tokens, sum(i.cached_input_tokens) AS cached_input_tokens,
		sum(i.output_tokens) AS output_tokens, count(*) AS requests
	FROM inserted i CROSS JOIN LATERAL (VALUES ('key', i.key_id), ('team', i.team), ('org', i.org)) AS s(scope, id)
	WHERE s.id <> ''
	GROUP BY 1, 2, 3, 4
), buckets AS (
	INSERT INTO ledger_buckets AS a (bucket, scope, id, model, cost_pico, ` + sums + `)
	SELECT bucket, scope, id, model, cost_pico, ` + sums + ` FROM sums ORDER BY bucket, scope, id, model
	ON CONFLICT (bucket, scope, id, model) DO UPDATE SET ` + addSums + `
), life AS (
	INSERT INTO ledger_life AS a (scope, id, model, cost_pico, ` + sums + `)
	SELECT scope, id, model, sum(cost_pico), sum(input_tokens), sum(cached_input_tokens), sum(output_tokens), sum(requests)
	FROM sums GROUP BY scope, id, model ORDER BY scope, id, model
	ON CONFLICT (scope, id, model) DO UPDATE SET ` + addSums + `
)
SELECT count(*) FROM inserted`
}()

// addSums adds an aggregate row's new sums (excluded) to the row (a).
const addSums = `cost_pico = a.cost_pico + excluded.cost_pico,
		input_tokens = a.input_tokens + excluded.input_tokens,
		cached_input_tokens = a.cached_input_tokens + excluded.cached_input_tokens,
		output_tokens = a.output_tokens + excluded.output_tokens,
		requests = a.requests + excluded.requests`

// Insert stores recs and adds them to the aggregates, in one transaction
// with synchronous_commit on: when it returns nil, the records are durable
// on the server (and on its synchronous standbys, if it has any), whatever
// the database's or the session's default, so the spool may forget them.
// A record whose RequestID is stored already — earlier, or earlier in
// recs — is skipped and not counted again; so is a record in a month
// retention dropped.
//
// bad is -1 unless one record is to blame: then bad is its index and err
// says why, nothing is stored, and the caller should drop that record and
// insert the rest again. A record is to blame when it is invalid
// (ledger.Record.Validate, or a time outside what a ledger stores: Unix
// nanoseconds, 1678 to 2262, not the epoch; err wraps ledger.ErrInvalid),
// or when PostgreSQL refuses it for its values: text that is not UTF-8 or
// holds a NUL, a key too long to index, sums that would overflow an
// aggregate. Any other error (the connection, a timeout, a deadlock, ctx)
// has bad -1 and nothing stored: the whole batch may be retried.
//
// A record in a month with no partition yet makes one, and the batch is
// tried once more.
func (l *DB) Insert(ctx context.Context, recs []ledger.Record) (bad int, err error) {
	if err := ctx.Err(); err != nil {
		return -1, fmt.Errorf("postgres ledger: insert: %w", err)
	}
	for i, r := range recs {
		if err := validate(r); err != nil {
			return i, fmt.Errorf("postgres ledger: insert: record %d: %w", i, err)
		}
	}
	if len(recs) == 0 {
		return -1, nil
	}
	args := encode(recs)
	err = l.insert(ctx, args)
	if noPartition(err) {
		if err = l.ensure(ctx, monthsOf(recs)); err == nil {
			err = l.insert(ctx, args)
		}
		if noPartition(err) {
			// A month's table exists but is not attached (an operator
			// detached it to archive it): its records cannot be placed,
			// and retrying would hold every record behind them.
			if i, ok := l.unplaceable(ctx, recs); ok {
				return i, fmt.Errorf("postgres ledger: insert: record %d (%s): %w", i, recs[i].RequestID, errNoPartition)
			}
		}
	}
	switch {
	case err == nil:
		l.noteLate(recs)
		return -1, nil
	case refused(err):
		bad, err := l.findBad(ctx, recs)
		if bad < 0 && err == nil {
			l.noteLate(recs)
		}
		return bad, err
	}
	return -1, fmt.Errorf("postgres ledger: insert: %w", err)
}

// insert runs insertSQL in a transaction of its own. SET LOCAL and the
// statement go in one round trip.
func (l *DB) insert(ctx context.Context, args []any) error {
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return err
	}
	err = func() error {
		b := &pgx.Batch{}
		b.Queue(`SET LOCAL synchronous_commit = on`)
		b.Queue(insertSQL, args...)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if l.inTx != nil {
			return l.inTx(ctx, tx)
		}
		return nil
	}()
	if err != nil {
		return errors.Join(err, rollback(ctx, tx))
	}
	return tx.Commit(ctx)
}

// findBad inserts recs one statement each, in one transaction, after the
// batch's statement was refused for a value: the first record refused is
// the one to blame, and nothing is kept. If none is (the refusal was the
// batch's, such as a sum of two records that overflows, and it holds no
// longer), the transaction stores them all and commits, which is what the
// batch was for.
func (l *DB) findBad(ctx context.Context, recs []ledger.Record) (int, error) {
	if err := l.ensure(ctx, monthsOf(recs)); err != nil {
		return -1, fmt.Errorf("postgres ledger: insert: %w", err)
	}
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return -1, fmt.Errorf("postgres ledger: insert: %w", err)
	}
	bad, err := func() (int, error) {
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = on`); err != nil {
			return -1, err
		}
		for i := range recs {
			if _, err := tx.Exec(ctx, insertSQL, encode(recs[i:i+1])...); err != nil {
				if refused(err) {
					return i, fmt.Errorf("record %d (%s) refused: %w", i, recs[i].RequestID, err)
				}
				return -1, err
			}
		}
		if l.inTx != nil {
			return -1, l.inTx(ctx, tx)
		}
		return -1, nil
	}()
	if bad >= 0 || err != nil {
		return bad, fmt.Errorf("postgres ledger: insert: %w", errors.Join(err, rollback(ctx, tx)))
	}
	if err := tx.Commit(ctx); err != nil {
		return -1, fmt.Errorf("postgres ledger: insert: %w", err)
	}
	return -1, nil
}

// errNoPartition is the fault of a record whose month has a table that is
// not attached to ledger_records.
var errNoPartition = errors.New("its month's partition is not attached to ledger_records (detached to be archived?): the record cannot be stored")

// unplaceable is the index of the first record of recs whose month has
// no attached partition.
func (l *DB) unplaceable(ctx context.Context, recs []ledger.Record) (int, bool) {
	rows, err := l.pool.Query(ctx, `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'ledger_records'::regclass`)
	if err != nil {
		return -1, false
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return -1, false
	}
	for i, r := range recs {
		if !slices.Contains(names, monthOf(r.StartedAt).name()) {
			return i, true
		}
	}
	return -1, false
}

// noPartition reports PostgreSQL's refusal of a row for which
// ledger_records has no partition.
func noPartition(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514" && strings.Contains(pgErr.Message, "no partition of relation")
}

// refused reports an error that a value of the statement caused: a data
// exception (class 22: a value out of range, text that is not UTF-8), an
// integrity constraint (class 23) other than a missing partition, or a
// program limit (class 54: an index entry too large).
func refused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || noPartition(err) {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "54":
		return true
	}
	return false
}

func monthsOf(recs []ledger.Record) []month {
	ms := make([]month, len(recs))
	for i, r := range recs {
		ms[i] = monthOf(r.StartedAt)
	}
	return ms
}

// validate is r.Validate, and its times storable.
func validate(r ledger.Record) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if _, err := ledger.Nanos("started_at", r.StartedAt); err != nil {
		return err
	}
	_, err := ledger.Nanos("finished_at", r.FinishedAt)
	return err
}

// unixNanos is t as a ledger stores it: Unix nanoseconds, 0 for the zero
// time. Only ledger.Nanos tells whether it is storable.
func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// encode is recs as insertSQL's arguments, a slice per column in
// recordColumns' order. The records are valid (validate).
func encode(recs []ledger.Record) []any {
	n := len(recs)
	var (
		strs  [11][]string
		bools [3][]bool
		ints  [5 + tokens.NumKinds][]int64
	)
	for i := range strs {
		strs[i] = make([]string, n)
	}
	for i := range bools {
		bools[i] = make([]bool, n)
	}
	for i := range ints {
		ints[i] = make([]int64, n)
	}
	for i, r := range recs {
		for j, s := range [...]string{r.RequestID, r.ClientRequestID, r.KeyID, r.Team, r.Org, r.Endpoint, r.Model,
			r.Provider, r.UpstreamModel, r.Outcome, r.ErrorType} {
			strs[j][i] = s
		}
		bools[0][i], bools[1][i], bools[2][i] = r.Priced, r.Estimated, r.Stream
		ints[0][i], ints[1][i], ints[2][i] = int64(r.Status), unixNanos(r.StartedAt), unixNanos(r.FinishedAt)
		ints[3][i], ints[4][i] = int64(r.TTFT), r.CostPico
		for k, c := range r.Tokens {
			ints[5+k][i] = c
		}
	}
	args := []any{strs[0], strs[1], strs[2], strs[3], strs[4], strs[5], strs[6], strs[7], strs[8],
		bools[0], ints[0], strs[9], strs[10], bools[1], bools[2], ints[1], ints[2], ints[3], ints[4]}
	for k := range tokens.NumKinds {
		args = append(args, ints[5+k])
	}
	return args
}
