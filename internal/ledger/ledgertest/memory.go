package ledgertest

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
)

var (
	_ ledger.Ledger = AppendFunc(nil)
	_ Backend       = (*Memory)(nil)
)

// AppendFunc is a ledger.Ledger whose Append calls the function: a fake
// for tests that want to see, delay or fail appends.
type AppendFunc func(ctx context.Context, r ledger.Record) error

// Append calls f.
func (f AppendFunc) Append(ctx context.Context, r ledger.Record) error { return f(ctx, r) }

// Memory is an in-memory ledger.Ledger, ledger.Reader and
// ledger.Aggregates for tests (it sums its aggregates from the records
// when asked): durable only as long as the process, but otherwise what
// the contract asks. The zero value is an empty ledger, safe for
// concurrent use.
type Memory struct {
	mu   sync.Mutex
	ids  map[string]bool
	recs []ledger.Record
}

// Append adds r unless its RequestID is already there.
func (m *Memory) Append(ctx context.Context, r ledger.Record) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ids[r.RequestID] {
		return nil
	}
	if m.ids == nil {
		m.ids = map[string]bool{}
	}
	m.ids[r.RequestID] = true
	r.StartedAt, r.FinishedAt = utc(r.StartedAt), utc(r.FinishedAt)
	m.recs = append(m.recs, r)
	return nil
}

// Records returns the records f selects, newest first.
func (m *Memory) Records(ctx context.Context, f ledger.Filter) ([]ledger.Record, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	recs := m.selected(f)
	slices.SortFunc(recs, func(a, b ledger.Record) int {
		return cmp.Or(b.StartedAt.Compare(a.StartedAt), cmp.Compare(a.RequestID, b.RequestID))
	})
	return truncate(recs, f.Limit), nil
}

// Totals sums the records f selects per group.
func (m *Memory) Totals(ctx context.Context, f ledger.Filter, by ledger.GroupBy) ([]ledger.Total, error) {
	if err := by.Validate(); err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sums := map[string]*ledger.Total{}
	var ts []ledger.Total
	for _, r := range m.selected(f) {
		g := group(r, by)
		if sums[g] == nil {
			sums[g] = &ledger.Total{Group: g}
		}
		add(sums[g], r)
	}
	for _, t := range sums {
		ts = append(ts, *t)
	}
	sortTotals(ts)
	return truncate(ts, f.Limit), nil
}

// Buckets sums the records per scope, id, model and bucket, from since's
// bucket on.
func (m *Memory) Buckets(ctx context.Context, since time.Time) ([]ledger.Aggregate, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return ExpectedBuckets(m.selected(ledger.Filter{}), since), nil
}

// Lifetime sums the records per scope, id and model.
func (m *Memory) Lifetime(ctx context.Context) ([]ledger.Aggregate, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return ExpectedLifetime(m.selected(ledger.Filter{})), nil
}

func (m *Memory) selected(f ledger.Filter) []ledger.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	var recs []ledger.Record
	for _, r := range m.recs {
		if selects(f, r) {
			recs = append(recs, r)
		}
	}
	return recs
}

func truncate[T any](s []T, limit int) []T {
	if limit > 0 && len(s) > limit {
		return s[:limit]
	}
	return s
}
