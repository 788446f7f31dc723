package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/tokens"
)

// Records returns the records f selects, newest first (StartedAt
// descending, then RequestID ascending). It reads what is committed: a
// record still in the spool in front of the ledger is not there yet.
func (l *DB) Records(ctx context.Context, f ledger.Filter) ([]ledger.Record, error) {
	recs, err := l.records(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("postgres ledger: records: %w", err)
	}
	return recs, nil
}

func (l *DB) records(ctx context.Context, f ledger.Filter) ([]ledger.Record, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q, args := recordsQuery(f)
	rows, err := l.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Record, error) {
		var (
			r                             ledger.Record
			status, started, finished, tt int64
		)
		dest := make([]any, 0, numColumns)
		dest = append(dest, &r.RequestID, &r.ClientRequestID, &r.KeyID, &r.Team, &r.Org, &r.Endpoint, &r.Model,
			&r.Provider, &r.UpstreamModel, &r.Priced, &status, &r.Outcome, &r.ErrorType, &r.Estimated, &r.Stream,
			&started, &finished, &tt, &r.CostPico)
		for k := range r.Tokens {
			dest = append(dest, &r.Tokens[k])
		}
		if err := row.Scan(dest...); err != nil {
			return r, err
		}
		r.Status, r.TTFT = int(status), time.Duration(tt)
		r.StartedAt, r.FinishedAt = ledger.FromNanos(started), ledger.FromNanos(finished)
		return r, nil
	})
}

// recordsQuery is Records' query and its arguments. The order is what
// ledger.Reader promises; a filter on a column reads that column's index
// (led by it, then started_at) backwards in each partition the range
// keeps, so a LIMIT stops early.
func recordsQuery(f ledger.Filter) (string, []any) {
	cond, args := where(f)
	args = append(args, limit(f))
	return `SELECT ` + columnList("") + ` FROM ledger_records` + cond +
		` ORDER BY started_at DESC, request_id ASC LIMIT $` + strconv.Itoa(len(args)), args
}

// groupExprs are the SQL expressions of each GroupBy's group: a column,
// an empty string for none, and for a day or a bucket its start in Unix seconds,
// floored (before 1970 too), which Totals formats. A year of a ledger has
// four digits (1677 to 2262), so the numbers order as their formats do.
var groupExprs = map[ledger.GroupBy]string{
	ledger.ByKey:    `key_id`,
	ledger.ByTeam:   `team`,
	ledger.ByOrg:    `org`,
	ledger.ByModel:  `model`,
	ledger.ByDay:    `(started_at / 86400000000000 - (started_at % 86400000000000 < 0)::int) * 86400`,
	ledger.ByBucket: `(started_at / 900000000000 - (started_at % 900000000000 < 0)::int) * 900`,
	ledger.ByNone:   `''`,
}

// Totals sums the records f selects per group, sorted by cost descending,
// then by group. No record, no Total, also for ByNone.
func (l *DB) Totals(ctx context.Context, f ledger.Filter, by ledger.GroupBy) ([]ledger.Total, error) {
	ts, err := l.totals(ctx, f, by)
	if err != nil {
		return nil, fmt.Errorf("postgres ledger: totals by %s: %w", by, err)
	}
	return ts, nil
}

func (l *DB) totals(ctx context.Context, f ledger.Filter, by ledger.GroupBy) ([]ledger.Total, error) {
	if err := by.Validate(); err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q, args := totalsQuery(f, by)
	rows, err := l.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Total, error) {
		var (
			t            ledger.Total
			group        any
			micros, pico int64
		)
		dest := make([]any, 0, 6+tokens.NumKinds)
		dest = append(dest, &group, &t.Requests, &micros, &pico, &t.Estimated, &t.Unpriced)
		for k := range t.Tokens {
			dest = append(dest, &t.Tokens[k])
		}
		if err := row.Scan(dest...); err != nil {
			return t, err
		}
		t.Cost = money.FromParts(micros, pico)
		switch g := group.(type) {
		case string:
			t.Group = g
		case int64:
			switch by {
			case ledger.ByDay:
				t.Group = time.Unix(g, 0).UTC().Format(time.DateOnly)
			default:
				t.Group = time.Unix(g, 0).UTC().Format(time.RFC3339)
			}
		default:
			return t, fmt.Errorf("group of type %T", group)
		}
		return t, nil
	})
}

// costParts are an exact numeric sum of pico-dollars as money.FromParts
// takes it: whole micro-dollars (saturated at an int64, $9.2 trillion)
// and the pico-dollars beyond them.
func costParts(sum string) string {
	return `least(div(` + sum + `, 1000000), 9223372036854775807)::bigint, mod(` + sum + `, 1000000)::bigint`
}

// totalsQuery is Totals' query and its arguments. The cost is summed as
// numeric, PostgreSQL's sum of a bigint, so it is exact however large,
// and the groups are ordered by it. HAVING keeps ByNone's one group out
// when no record matches.
func totalsQuery(f ledger.Filter, by ledger.GroupBy) (string, []any) {
	cond, args := where(f)
	args = append(args, limit(f))
	sums := make([]string, tokens.NumKinds)
	for k, c := range tokenColumns() {
		sums[k] = `sum(` + c + `)::bigint`
	}
	return `SELECT ` + groupExprs[by] + ` AS grp, count(*), ` + costParts(`sum(cost_pico)`) + `,
		count(*) FILTER (WHERE estimated), count(*) FILTER (WHERE NOT priced), ` + strings.Join(sums, ", ") + `
		FROM ledger_records` + cond + ` GROUP BY grp HAVING count(*) > 0
		ORDER BY sum(cost_pico) DESC, grp ASC LIMIT $` + strconv.Itoa(len(args)), args
}

// where is the WHERE clause (with a leading space, or empty) selecting
// f's records, and its arguments ($1 on). Bounds beyond what a ledger
// stores select all of that side or nothing; the others are constants on
// started_at, the partition key, so that PostgreSQL reads only the
// partitions the range touches.
func where(f ledger.Filter) (string, []any) {
	var (
		conds []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if !f.Since.IsZero() {
		switch {
		case f.Since.After(lastStorable):
			return " WHERE false", nil
		case f.Since.After(firstStorable):
			conds = append(conds, `started_at >= `+arg(f.Since.UnixNano()))
		}
	}
	if !f.Until.IsZero() {
		switch {
		case !f.Until.After(firstStorable):
			return " WHERE false", nil
		case !f.Until.After(lastStorable):
			conds = append(conds, `started_at < `+arg(f.Until.UnixNano()))
		}
	}
	for _, eq := range []struct{ col, v string }{
		{"key_id", f.KeyID}, {"team", f.Team}, {"org", f.Org}, {"model", f.Model},
	} {
		if eq.v != "" {
			conds = append(conds, eq.col+` = `+arg(eq.v))
		}
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// limit is f.Limit as SQL's LIMIT, where NULL means none.
func limit(f ledger.Filter) *int64 {
	if f.Limit == 0 {
		return nil
	}
	n := int64(f.Limit)
	return &n
}

// aggColumns are what Buckets and Lifetime read of an aggregate row, a
// NULL bucket for a lifetime sum.
var aggColumns = `scope, id, model, %s, ` + costParts("cost_pico") + `,
	input_tokens, cached_input_tokens, output_tokens, requests`

// The queries of Buckets and Lifetime. Buckets reads a range of
// ledger_buckets' primary key, led by the bucket, and sorts in Go;
// Lifetime reads ledger_life in its primary key's order.
var (
	allBucketsQuery = `SELECT ` + fmt.Sprintf(aggColumns, "bucket") + ` FROM ledger_buckets`
	bucketsQuery    = allBucketsQuery + ` WHERE bucket >= $1`
	lifetimeQuery   = `SELECT ` + fmt.Sprintf(aggColumns, "NULL::bigint") + ` FROM ledger_life ORDER BY scope, id, model`
)

// Buckets returns the aggregates of every bucket from the one that holds
// since on (all of them if since is zero), sorted by scope, id, model and
// bucket. It reads what is committed.
func (l *DB) Buckets(ctx context.Context, since time.Time) ([]ledger.Aggregate, error) {
	var (
		as  []ledger.Aggregate
		err error
	)
	if since.IsZero() {
		as, err = l.aggregates(ctx, allBucketsQuery)
	} else {
		as, err = l.aggregates(ctx, bucketsQuery, ledger.BucketOf(since).Unix())
	}
	if err != nil {
		return nil, fmt.Errorf("postgres ledger: buckets: %w", err)
	}
	slices.SortFunc(as, func(a, b ledger.Aggregate) int {
		return cmp.Or(cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.ID, b.ID), cmp.Compare(a.Model, b.Model),
			a.Bucket.Compare(b.Bucket))
	})
	return as, nil
}

// Lifetime returns every scope, id and model's sums over all buckets,
// sorted by scope, id and model; Bucket is zero. Retention does not lower
// them: they are kept in ledger_life, not summed from the buckets.
func (l *DB) Lifetime(ctx context.Context) ([]ledger.Aggregate, error) {
	as, err := l.aggregates(ctx, lifetimeQuery)
	if err != nil {
		return nil, fmt.Errorf("postgres ledger: lifetime: %w", err)
	}
	return as, nil
}

// Spent is what scope (key, team or org) id spent on model ("" for every
// model) from the 15-minute bucket that holds since on, or over its
// lifetime for a zero since, exact, as committed: one scope's buckets,
// read through ledger_buckets_scope. Admission over Redis starts a budget
// period Redis lacks from it.
func (l *DB) Spent(ctx context.Context, scope, id, model string, since time.Time) (money.Sum, error) {
	q, args := spentBucketsQuery, []any{scope, id, model, ledger.BucketOf(since).Unix()}
	if since.IsZero() {
		q, args = spentLifeQuery, args[:3]
	}
	var micros, pico int64
	if err := l.pool.QueryRow(ctx, q, args...).Scan(&micros, &pico); err != nil {
		return money.Sum{}, fmt.Errorf("postgres ledger: what %s %s spent: %w", scope, id, err)
	}
	return money.FromParts(micros, pico), nil
}

// SpentBuckets is what scope id spent on model ("" for every model) in
// each 15-minute bucket from the one that holds since on, oldest first:
// where a rolling budget's window starts when Redis lost it.
func (l *DB) SpentBuckets(ctx context.Context, scope, id, model string, since time.Time) ([]ledger.Aggregate, error) {
	rows, err := l.pool.Query(ctx, spentByBucketQuery, scope, id, model, ledger.BucketOf(since).Unix())
	if err != nil {
		return nil, fmt.Errorf("postgres ledger: what %s %s spent by bucket: %w", scope, id, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Aggregate, error) {
		var bucket, micros, pico int64
		if err := row.Scan(&bucket, &micros, &pico); err != nil {
			return ledger.Aggregate{}, err
		}
		return ledger.Aggregate{Scope: ledger.Scope(scope), ID: id, Model: model, Bucket: time.Unix(bucket, 0).UTC(), Cost: money.FromParts(micros, pico)}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres ledger: what %s %s spent by bucket: %w", scope, id, err)
	}
	return out, nil
}

var (
	spentByBucketQuery = `SELECT bucket, ` + costParts("sum(cost_pico)") + ` FROM ledger_buckets
		WHERE scope = $1 AND id = $2 AND ($3 = '' OR model = $3) AND bucket >= $4 GROUP BY bucket ORDER BY bucket`
	spentBucketsQuery = `SELECT ` + costParts("coalesce(sum(cost_pico), 0)") + ` FROM ledger_buckets
		WHERE scope = $1 AND id = $2 AND ($3 = '' OR model = $3) AND bucket >= $4`
	spentLifeQuery = `SELECT ` + costParts("coalesce(sum(cost_pico), 0)") + ` FROM ledger_life
		WHERE scope = $1 AND id = $2 AND ($3 = '' OR model = $3)`
)

// aggregates runs one of the queries above.
func (l *DB) aggregates(ctx context.Context, query string, args ...any) ([]ledger.Aggregate, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows, err := l.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Aggregate, error) {
		var (
			a            ledger.Aggregate
			bucket       *int64
			micros, pico int64
		)
		if err := row.Scan(&a.Scope, &a.ID, &a.Model, &bucket,
			&micros, &pico, &a.InputTokens, &a.CachedInputTokens, &a.OutputTokens, &a.Requests); err != nil {
			return a, err
		}
		a.Cost = money.FromParts(micros, pico)
		if bucket != nil {
			a.Bucket = time.Unix(*bucket, 0).UTC()
		}
		return a, nil
	})
}
