package ledgertest

import (
	"cmp"
	"slices"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/tokens"
)

// The reference semantics of Filter and GroupBy, written plainly: Memory
// implements them, and the suite sums its expected Totals with add.

// selects reports whether f selects r.
func selects(f ledger.Filter, r ledger.Record) bool {
	switch {
	case !f.Since.IsZero() && r.StartedAt.Before(f.Since),
		!f.Until.IsZero() && !r.StartedAt.Before(f.Until),
		f.KeyID != "" && r.KeyID != f.KeyID,
		f.Team != "" && r.Team != f.Team,
		f.Org != "" && r.Org != f.Org,
		f.Model != "" && r.Model != f.Model:
		return false
	}
	return true
}

// group is r's group under by.
func group(r ledger.Record, by ledger.GroupBy) string {
	switch by {
	case ledger.ByKey:
		return r.KeyID
	case ledger.ByTeam:
		return r.Team
	case ledger.ByOrg:
		return r.Org
	case ledger.ByModel:
		return r.Model
	case ledger.ByDay:
		return r.StartedAt.UTC().Format(time.DateOnly)
	case ledger.ByBucket:
		return ledger.BucketOf(r.StartedAt).Format(time.RFC3339)
	}
	return ""
}

// add counts r into t.
func add(t *ledger.Total, r ledger.Record) {
	t.Requests++
	t.Tokens.Add(r.Tokens)
	t.Cost = t.Cost.AddPico(r.CostPico)
	if r.Estimated {
		t.Estimated++
	}
	if !r.Priced {
		t.Unpriced++
	}
}

// sortTotals puts ts in Reader.Totals' order.
func sortTotals(ts []ledger.Total) {
	slices.SortFunc(ts, func(a, b ledger.Total) int {
		return cmp.Or(b.Cost.Cmp(a.Cost), cmp.Compare(a.Group, b.Group))
	})
}

// utc is t in UTC, the zero time left alone.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

// ExpectedBuckets is what ledger.Aggregates.Buckets(ctx, since) must
// return for a ledger holding recs (each RequestID once), written plainly:
// each record counted under its key, team and org (an empty one skipped),
// its Model, and the bucket of its StartedAt.
func ExpectedBuckets(recs []ledger.Record, since time.Time) []ledger.Aggregate {
	type key struct {
		scope     ledger.Scope
		id, model string
		bucket    time.Time
	}
	sums := map[key]*ledger.Aggregate{}
	for _, r := range recs {
		b := ledger.BucketOf(r.StartedAt)
		if !since.IsZero() && b.Before(ledger.BucketOf(since)) {
			continue
		}
		for _, s := range ledger.Scopes() {
			id := s.ID(r)
			if id == "" {
				continue
			}
			k := key{s, id, r.Model, b}
			if sums[k] == nil {
				sums[k] = &ledger.Aggregate{Scope: s, ID: id, Model: r.Model, Bucket: b}
			}
			addAggregate(sums[k], ledger.Aggregate{
				Cost: money.FromPico(r.CostPico), InputTokens: r.Tokens[tokens.Input], CachedInputTokens: r.Tokens[tokens.CachedInput],
				OutputTokens: r.Tokens[tokens.Output], Requests: 1,
			})
		}
	}
	var as []ledger.Aggregate
	for _, a := range sums {
		as = append(as, *a)
	}
	sortAggregates(as)
	return as
}

// ExpectedLifetime is what ledger.Aggregates.Lifetime must return for a
// ledger holding recs.
func ExpectedLifetime(recs []ledger.Record) []ledger.Aggregate {
	var as []ledger.Aggregate
	for _, a := range ExpectedBuckets(recs, time.Time{}) {
		a.Bucket = time.Time{}
		if n := len(as); n > 0 && as[n-1].Scope == a.Scope && as[n-1].ID == a.ID && as[n-1].Model == a.Model {
			addAggregate(&as[n-1], a)
			continue
		}
		as = append(as, a)
	}
	return as
}

func addAggregate(a *ledger.Aggregate, b ledger.Aggregate) {
	a.Cost = a.Cost.Add(b.Cost)
	a.InputTokens += b.InputTokens
	a.CachedInputTokens += b.CachedInputTokens
	a.OutputTokens += b.OutputTokens
	a.Requests += b.Requests
}

// sortAggregates puts as in ledger.Aggregates' order.
func sortAggregates(as []ledger.Aggregate) {
	slices.SortFunc(as, func(a, b ledger.Aggregate) int {
		return cmp.Or(cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.ID, b.ID), cmp.Compare(a.Model, b.Model),
			a.Bucket.Compare(b.Bucket))
	})
}
