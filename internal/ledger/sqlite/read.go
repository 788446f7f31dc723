package sqlite

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/money"
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
	cond, args := where(f)
	rows, err := l.db.QueryContext(ctx, `SELECT `+columns+` FROM spend`+cond+
		` ORDER BY started_at DESC, request_id ASC LIMIT ?`, append(args, limit(f))...)
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
		err := rows.Scan(&r.RequestID, &r.KeyID, &r.Team, &r.Org, &r.Endpoint, &r.Model, &r.Provider, &r.UpstreamModel,
			&r.InputTokens, &r.CachedInputTokens, &r.CacheCreationTokens, &r.OutputTokens, &r.ReasoningTokens,
			&priced, &r.Status, &r.Outcome, &estimated, &stream, &started, &finished, &ttft,
			&r.ClientRequestID, &r.ErrorType,
			&r.CostPico, &r.CacheCreation1hTokens, &r.AudioInputTokens, &r.AudioOutputTokens)
		if err != nil {
			return nil, err
		}
		r.Priced, r.Estimated, r.Stream = priced, estimated, stream
		r.StartedAt, r.FinishedAt, r.TTFT = utc(started), utc(finished), time.Duration(ttft)
		recs = append(recs, r)
	}
	return recs, rows.Err()
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
	cond, args := where(f)
	// GROUP BY even for ByNone: grouping no rows yields no row, where a
	// bare aggregate would yield one of NULLs. The cost is summed in two
	// parts, whole micro-dollars and the pico-dollars beyond them, and
	// put together exactly in Go: a plain sum of cost_pico would overflow
	// (and SQLite's sum raises "integer overflow") once a group's total
	// passes $9.2M, where the micro-dollars hold $9.2 trillion and the
	// remainders, each below 10⁶, 9.2 × 10¹² records. The order is by the
	// exact total: its whole micro-dollars, then the pico-dollars left.
	rows, err := l.db.QueryContext(ctx, `SELECT `+groupExprs[by]+` AS grp, count(*),
		sum(input_tokens), sum(cached_input_tokens), sum(cache_creation_tokens), sum(output_tokens), sum(reasoning_tokens),
		sum(cache_creation_1h_tokens), sum(audio_input_tokens), sum(audio_output_tokens),
		sum(cost_pico / 1000000) AS micros, sum(cost_pico % 1000000) AS pico, sum(estimated), sum(1 - priced)
		FROM spend`+cond+` GROUP BY grp
		ORDER BY micros + pico / 1000000 DESC, pico % 1000000 DESC, grp ASC LIMIT ?`, append(args, limit(f))...)
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
		err := rows.Scan(&t.Group, &t.Requests,
			&t.InputTokens, &t.CachedInputTokens, &t.CacheCreationTokens, &t.OutputTokens, &t.ReasoningTokens,
			&t.CacheCreation1hTokens, &t.AudioInputTokens, &t.AudioOutputTokens,
			&micros, &pico, &t.Estimated, &t.Unpriced)
		if err != nil {
			return nil, err
		}
		t.Cost = money.FromParts(micros, pico)
		ts = append(ts, t)
	}
	return ts, rows.Err()
}

// where is the WHERE clause (with a leading space, or empty) selecting
// f's records, and its arguments.
func where(f ledger.Filter) (string, []any) {
	var conds []string
	var args []any
	if !f.Since.IsZero() {
		conds = append(conds, `started_at >= ?`)
		args = append(args, bound(f.Since))
	}
	if !f.Until.IsZero() {
		conds = append(conds, `started_at < ?`)
		args = append(args, bound(f.Until))
	}
	for _, eq := range []struct{ col, v string }{
		{"key_id", f.KeyID}, {"team", f.Team}, {"org", f.Org}, {"model", f.Model},
	} {
		if eq.v != "" {
			conds = append(conds, eq.col+` = ?`)
			args = append(args, eq.v)
		}
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// bound is t in Unix nanoseconds, clamped to what an int64 holds, so that
// a filter bound beyond the storable years still compares right.
func bound(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// limit is f.Limit as SQL's LIMIT, where -1 means none.
func limit(f ledger.Filter) int {
	if f.Limit == 0 {
		return -1
	}
	return f.Limit
}
