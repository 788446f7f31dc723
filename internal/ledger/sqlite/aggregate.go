package sqlite

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/tokens"
)

var _ ledger.Aggregates = (*Ledger)(nil)

// errOverflow is the error of a record whose sums would take an aggregate
// beyond what it holds (more than 9.2 × 10¹² dollars, or int64 tokens):
// such a record cannot be counted, so it is not stored either.
var errOverflow = errors.New("sum would overflow int64")

// aggKey identifies an aggregate row.
type aggKey struct {
	scope     ledger.Scope
	id, model string
	bucket    int64 // Unix seconds
}

// sums are the counters of an aggregate row.
type sums struct {
	cost                                 money.Sum
	input, cachedInput, output, requests int64
}

// plus is s + o, and false if a sum overflows. Every value is
// non-negative (Record.Validate), so only the upper bound can be crossed.
func (s sums) plus(o sums) (sums, bool) {
	add := func(a, b int64) (int64, bool) { return a + b, a <= math.MaxInt64-b }
	var ok [5]bool
	s.cost, ok[0] = s.cost.Plus(o.cost)
	s.input, ok[1] = add(s.input, o.input)
	s.cachedInput, ok[2] = add(s.cachedInput, o.cachedInput)
	s.output, ok[3] = add(s.output, o.output)
	s.requests, ok[4] = add(s.requests, o.requests)
	return s, ok == [5]bool{true, true, true, true, true}
}

// aggInput is what one record adds to its aggregates.
type aggInput struct {
	key, team, org, model string
	bucket                int64 // Unix seconds
	sums
}

// aggregateOf is what r adds to its aggregates: its counts, in the bucket
// of its StartedAt (see ledger.Aggregate for why not FinishedAt).
func aggregateOf(r ledger.Record) aggInput {
	return aggInput{
		key: r.KeyID, team: r.Team, org: r.Org, model: r.Model,
		bucket: ledger.BucketOf(r.StartedAt).Unix(),
		sums: sums{
			cost: money.FromPico(r.CostPico), input: r.Tokens[tokens.Input], cachedInput: r.Tokens[tokens.CachedInput],
			output: r.Tokens[tokens.Output], requests: 1,
		},
	}
}

// The queries of Buckets and Lifetime: rows in aggColumns' order, with a
// NULL bucket for none. Buckets reads a range of spend_agg's primary key
// (led by the bucket) and sorts in Go; Lifetime reads spend_life, one row
// per scope, id and model, in its primary key's order.
const (
	allBucketsQuery = `SELECT ` + aggColumns + ` FROM spend_agg`
	bucketsQuery    = allBucketsQuery + ` WHERE bucket >= ?`
	lifetimeQuery   = `SELECT scope, id, model, NULL,
		cost_micros, cost_pico, input_tokens, cached_input_tokens, output_tokens, requests
		FROM spend_life ORDER BY scope, id, model`
)

// Buckets returns the aggregates of every bucket from the one that holds
// since on (all of them if since is zero), sorted by scope, id, model and
// bucket. Like every read, it sees the last commit and never waits for
// the committer (with a spool, it waits for the ingester: see Records).
func (l *Ledger) Buckets(ctx context.Context, since time.Time) ([]ledger.Aggregate, error) {
	if err := l.visible(ctx); err != nil {
		return nil, fmt.Errorf("ledger/sqlite: buckets: %w", err)
	}
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
		return nil, fmt.Errorf("ledger/sqlite: buckets: %w", err)
	}
	slices.SortFunc(as, func(a, b ledger.Aggregate) int {
		return cmp.Or(cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.ID, b.ID), cmp.Compare(a.Model, b.Model),
			a.Bucket.Compare(b.Bucket))
	})
	return as, nil
}

// Lifetime returns every scope, id and model's sums over all buckets,
// sorted by scope, id and model; Bucket is zero: spend_life's rows, which
// the committer adds to in the transaction that adds to the buckets'.
func (l *Ledger) Lifetime(ctx context.Context) ([]ledger.Aggregate, error) {
	if err := l.visible(ctx); err != nil {
		return nil, fmt.Errorf("ledger/sqlite: lifetime: %w", err)
	}
	as, err := l.aggregates(ctx, lifetimeQuery)
	if err != nil {
		return nil, fmt.Errorf("ledger/sqlite: lifetime: %w", err)
	}
	return as, nil
}

// aggregates runs one of the queries above.
func (l *Ledger) aggregates(ctx context.Context, query string, args ...any) ([]ledger.Aggregate, error) {
	rows, err := l.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var as []ledger.Aggregate
	for rows.Next() {
		var (
			a            ledger.Aggregate
			bucket       *int64
			micros, pico int64
		)
		if err := rows.Scan(&a.Scope, &a.ID, &a.Model, &bucket,
			&micros, &pico, &a.InputTokens, &a.CachedInputTokens, &a.OutputTokens, &a.Requests); err != nil {
			return nil, err
		}
		a.Cost = money.FromParts(micros, pico)
		if bucket != nil {
			a.Bucket = time.Unix(*bucket, 0).UTC()
		}
		as = append(as, a)
	}
	return as, rows.Err()
}
