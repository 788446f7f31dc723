package sqlite

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/tokens"
)

// Records returns the records f selects, newest first (StartedAt
// descending, then RequestID ascending). Reads never wait for the
// committer: in WAL mode they see the last commit. With a spool, a read
// first waits until SQLite holds every record acknowledged before it
// began (see visible), so it sees them too.
func (l *Ledger) Records(ctx context.Context, f ledger.Filter) ([]ledger.Record, error) {
	if err := l.visible(ctx); err != nil {
		return nil, fmt.Errorf("ledger/sqlite: records: %w", err)
	}
	recs, err := l.records(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("ledger/sqlite: records: %w", err)
	}
	return recs, nil
}

func (l *Ledger) records(ctx context.Context, f ledger.Filter) ([]ledger.Record, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	q, args := recordsQuery(f)
	rows, err := l.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var recs []ledger.Record
	for rows.Next() {
		var (
			r                         ledger.Record
			started, finished, ttft   int64
			priced, estimated, stream bool
		)
		dest := [numColumns]any{&r.RequestID, &r.KeyID, &r.Team, &r.Org, &r.Endpoint, &r.Model, &r.Provider, &r.UpstreamModel,
			&priced, &r.Status, &r.Outcome, &estimated, &stream, &started, &finished, &ttft,
			&r.ClientRequestID, &r.ErrorType, &r.CostPico}
		for k := range r.Tokens {
			dest[numColumns-tokens.NumKinds+k] = &r.Tokens[k]
		}
		err := rows.Scan(dest[:]...)
		if err != nil {
			return nil, err
		}
		r.Priced, r.Estimated, r.Stream = priced, estimated, stream
		r.StartedAt, r.FinishedAt, r.TTFT = ledger.FromNanos(started), ledger.FromNanos(finished), time.Duration(ttft)
		recs = append(recs, r)
	}
	return recs, rows.Err()
}

// recordsQuery is Records' query and its arguments.
func recordsQuery(f ledger.Filter) (string, []any) {
	cond, args, byDay := where(f)
	order := ` ORDER BY started_at DESC, request_id ASC`
	if byDay {
		// The same order (dayExpr is monotonic in started_at), written so
		// that the day index yields it: newest first, and only the
		// request_id ties sorted, so a LIMIT stops the scan early.
		order = ` ORDER BY ` + dayExpr + ` DESC, started_at DESC, request_id ASC`
	}
	return `SELECT ` + columns + ` FROM spend` + cond + order + ` LIMIT ?`, append(args, limit(f))
}

// groupExprs are the SQL expressions of each GroupBy's Group. A day is
// started_at floored to a multiple of 86,400 s (the % is adjusted so that
// times before 1970 floor too), as a UTC date; a bucket is floored to
// 900 s likewise, as an RFC 3339 UTC time.
var groupExprs = map[ledger.GroupBy]string{
	ledger.ByKey:    `key_id`,
	ledger.ByTeam:   `team`,
	ledger.ByOrg:    `org`,
	ledger.ByModel:  `model`,
	ledger.ByDay:    `date((started_at - ((started_at % 86400000000000) + 86400000000000) % 86400000000000) / 1000000000, 'unixepoch')`,
	ledger.ByBucket: `strftime('%Y-%m-%dT%H:%M:%SZ', ` + bucketExpr + `, 'unixepoch')`,
	ledger.ByNone:   `''`,
}

// Totals sums the records f selects per group, sorted by cost descending,
// then by group. No record, no Total, also for ByNone.
func (l *Ledger) Totals(ctx context.Context, f ledger.Filter, by ledger.GroupBy) ([]ledger.Total, error) {
	if err := l.visible(ctx); err != nil {
		return nil, fmt.Errorf("ledger/sqlite: totals: %w", err)
	}
	ts, err := l.totals(ctx, f, by)
	if err != nil {
		return nil, fmt.Errorf("ledger/sqlite: totals by %s: %w", by, err)
	}
	return ts, nil
}

func (l *Ledger) totals(ctx context.Context, f ledger.Filter, by ledger.GroupBy) ([]ledger.Total, error) {
	if err := by.Validate(); err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	q, args := totalsQuery(f, by)
	rows, err := l.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ts []ledger.Total
	for rows.Next() {
		var (
			t            ledger.Total
			micros, pico int64
		)
		dest := [6 + tokens.NumKinds]any{&t.Group, &t.Requests, &micros, &pico, &t.Estimated, &t.Unpriced}
		for k := range t.Tokens {
			dest[6+k] = &t.Tokens[k]
		}
		err := rows.Scan(dest[:]...)
		if err != nil {
			return nil, err
		}
		t.Cost = money.FromParts(micros, pico)
		ts = append(ts, t)
	}
	return ts, rows.Err()
}

// totalsQuery is Totals' query and its arguments. GROUP BY even for
// ByNone: grouping no rows yields no row, where a bare aggregate would
// yield one of NULLs. The cost is summed in two parts, whole
// micro-dollars and the pico-dollars beyond them, and put together
// exactly in Go: a plain sum of cost_pico would overflow (and SQLite's
// sum raises "integer overflow") once a group's total passes $9.2M, where
// the micro-dollars hold $9.2 trillion and the remainders, each below
// 10⁶, 9.2 × 10¹² records. The order is by the exact total: its whole
// micro-dollars, then the pico-dollars left.
func totalsQuery(f ledger.Filter, by ledger.GroupBy) (string, []any) {
	cond, args, _ := where(f)
	return `SELECT ` + groupExprs[by] + ` AS grp, count(*),
		sum(cost_pico / 1000000) AS micros, sum(cost_pico % 1000000) AS pico, sum(estimated), sum(1 - priced),
		` + sumTokens + `
		FROM spend` + cond + ` GROUP BY grp
		ORDER BY micros + pico / 1000000 DESC, pico % 1000000 DESC, grp ASC LIMIT ?`, append(args, limit(f))
}

// sumTokens sums each token column, in tokens.Kind's order.
var sumTokens = tokenColumns("sum(%s)")

// where is the WHERE clause (with a leading space, or empty) selecting
// f's records, its arguments, and whether it selects by a column that a
// day index serves (key_id, team, org, model). Then it also names the
// days to read: those that hold a record, from Since's day to Until's,
// found by a loose scan of a day index (each the least day above the one
// before, one lookup), so that the query costs a range scan per day with
// records, however wide the filter's range; the started_at conditions
// still decide which records are in.
func where(f ledger.Filter) (string, []any, bool) {
	var conds []string
	var args []any
	// lo and hi are the first and last instants selected, in what a
	// ledger stores: a bound past either end of it selects all of that
	// side or nothing.
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if !f.Since.IsZero() {
		switch {
		case f.Since.After(lastStorable):
			return " WHERE 0", nil, false
		case f.Since.After(firstStorable):
			lo = f.Since.UnixNano()
			conds = append(conds, `started_at >= ?`)
			args = append(args, lo)
		}
	}
	if !f.Until.IsZero() {
		switch {
		case !f.Until.After(firstStorable):
			return " WHERE 0", nil, false
		case !f.Until.After(lastStorable):
			hi = f.Until.UnixNano() - 1
			conds = append(conds, `started_at < ?`)
			args = append(args, hi+1)
		}
	}
	byDay := false
	for _, eq := range []struct{ col, v string }{
		{"key_id", f.KeyID}, {"team", f.Team}, {"org", f.Org}, {"model", f.Model},
	} {
		if eq.v != "" {
			conds = append(conds, eq.col+` = ?`)
			args = append(args, eq.v)
			byDay = true
		}
	}
	if byDay {
		// In an empty ledger, or past the last day, min is NULL, the
		// recursion stops, and no day matches NULL.
		conds = append(conds, dayExpr+` IN (WITH RECURSIVE day(d) AS (
			SELECT min(`+dayExpr+`) FROM spend WHERE `+dayExpr+` >= ? / 86400000000000
			UNION ALL
			SELECT (SELECT min(`+dayExpr+`) FROM spend WHERE `+dayExpr+` > d) FROM day WHERE d < ? / 86400000000000)
		SELECT d FROM day)`)
		args = append(args, lo, hi)
	}
	if len(conds) == 0 {
		return "", nil, false
	}
	return " WHERE " + strings.Join(conds, " AND "), args, byDay
}

// firstStorable and lastStorable are the earliest and latest StartedAt a
// ledger stores (Unix nanoseconds in an int64).
var (
	firstStorable = time.Unix(0, math.MinInt64)
	lastStorable  = time.Unix(0, math.MaxInt64)
)

// limit is f.Limit as SQL's LIMIT, where -1 means none.
func limit(f ledger.Filter) int {
	if f.Limit == 0 {
		return -1
	}
	return f.Limit
}
