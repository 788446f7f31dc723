package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/tokens"
)

func buckets(t *testing.T, a ledger.Aggregates, since time.Time) []ledger.Aggregate {
	t.Helper()
	as, err := a.Buckets(t.Context(), since)
	if err != nil {
		t.Fatalf("Buckets(%v): %v", since, err)
	}
	return as
}

func lifetime(t *testing.T, a ledger.Aggregates) []ledger.Aggregate {
	t.Helper()
	as, err := a.Lifetime(t.Context())
	if err != nil {
		t.Fatalf("Lifetime: %v", err)
	}
	return as
}

// testAggregates checks the aggregates of a few records against sums
// written out by hand: bucket edges to the nanosecond, a time given in
// +5:45, a time before 1970, a record without an org and one without a
// key, an empty model, and a duplicate RequestID that must not count.
func testAggregates(t *testing.T, b Backend) {
	at := func(s string) time.Time {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			panic(err)
		}
		return t
	}
	rec := func(id, key, team, org, model, started string, cost, in, cached, out int64) ledger.Record {
		return ledger.Record{
			RequestID: id, KeyID: key, Team: team, Org: org, Model: model,
			CostPico: cost, Tokens: tokens.Counts{tokens.Input: in, tokens.CachedInput: cached, tokens.Output: out},
			StartedAt: at(started),
		}
	}
	// Costs in pico-dollars whose sums carry past a micro-dollar: k1's
	// 0.7 µ$ and 0.8 µ$ are exactly 1.5 µ$.
	appendAll(t, b,
		rec("r1", "k1", "t1", "o1", "m", "2025-03-01T12:14:59.999999999Z", 700_000, 10, 1, 5),
		// 12:15:00 UTC, given in Nepal's +5:45: the next bucket.
		rec("r2", "k1", "t1", "", "m", "2025-03-01T18:00:00+05:45", 800_000, 20, 2, 6),
		rec("r3", "k2", "t1", "o1", "", "2025-03-01T12:00:00Z", 400, 40, 0, 7),
		rec("r4", "", "t2", "o1", "m", "1969-12-31T23:59:59.5Z", 900_000, 80, 8, 0),
		// r1 again, otherwise different: the first record wins, and the
		// aggregates count it once.
		rec("r1", "k9", "t9", "o9", "m", "2025-03-01T13:00:00Z", 1600, 1, 1, 1),
	)
	utc := func(s string) time.Time { return at(s).UTC() }
	agg := func(scope ledger.Scope, id, model, bucket string, cost, in, cached, out, n int64) ledger.Aggregate {
		a := ledger.Aggregate{Scope: scope, ID: id, Model: model,
			Cost: money.FromPico(cost), InputTokens: in, CachedInputTokens: cached, OutputTokens: out, Requests: n}
		if bucket != "" {
			a.Bucket = utc(bucket)
		}
		return a
	}
	const (
		b1969 = "1969-12-31T23:45:00Z"
		b1200 = "2025-03-01T12:00:00Z"
		b1215 = "2025-03-01T12:15:00Z"
	)
	want := []ledger.Aggregate{
		agg(ledger.ScopeKey, "k1", "m", b1200, 700_000, 10, 1, 5, 1),
		agg(ledger.ScopeKey, "k1", "m", b1215, 800_000, 20, 2, 6, 1),
		agg(ledger.ScopeKey, "k2", "", b1200, 400, 40, 0, 7, 1),
		agg(ledger.ScopeOrg, "o1", "", b1200, 400, 40, 0, 7, 1),
		agg(ledger.ScopeOrg, "o1", "m", b1969, 900_000, 80, 8, 0, 1),
		agg(ledger.ScopeOrg, "o1", "m", b1200, 700_000, 10, 1, 5, 1),
		agg(ledger.ScopeTeam, "t1", "", b1200, 400, 40, 0, 7, 1),
		agg(ledger.ScopeTeam, "t1", "m", b1200, 700_000, 10, 1, 5, 1),
		agg(ledger.ScopeTeam, "t1", "m", b1215, 800_000, 20, 2, 6, 1),
		agg(ledger.ScopeTeam, "t2", "m", b1969, 900_000, 80, 8, 0, 1),
	}
	// The reference model agrees with the sums by hand.
	if diff := cmp.Diff(want, ExpectedBuckets(records(t, b, ledger.Filter{}), time.Time{})); diff != "" {
		t.Fatalf("the suite's own ExpectedBuckets is wrong (-want +got):\n%s", diff)
	}
	since := func(bucket string) []ledger.Aggregate {
		var as []ledger.Aggregate
		for _, a := range want {
			if !a.Bucket.Before(utc(bucket)) {
				as = append(as, a)
			}
		}
		return as
	}
	for _, tt := range []struct {
		name  string
		since time.Time
		want  []ledger.Aggregate
	}{
		{"zero: every bucket", time.Time{}, want},
		{"far past", at("1900-01-01T00:00:00Z"), want},
		{"bucket start", utc(b1200), since(b1200)},
		{"inside a bucket: it counts whole", at("2025-03-01T12:14:59.999999999Z"), since(b1200)},
		{"in another zone", at("2025-03-01T17:37:00+05:30"), since(b1200)}, // 12:07 UTC
		{"next bucket", utc(b1215), since(b1215)},
		{"before 1970", at("1969-12-31T23:59:00Z"), want},
		{"after everything", at("2025-03-01T12:30:00Z"), nil},
	} {
		if diff := cmp.Diff(tt.want, buckets(t, b, tt.since), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: Buckets(%v) (-want +got):\n%s", tt.name, tt.since, diff)
		}
	}
	wantLifetime := []ledger.Aggregate{
		agg(ledger.ScopeKey, "k1", "m", "", 1_500_000, 30, 3, 11, 2),
		agg(ledger.ScopeKey, "k2", "", "", 400, 40, 0, 7, 1),
		agg(ledger.ScopeOrg, "o1", "", "", 400, 40, 0, 7, 1),
		agg(ledger.ScopeOrg, "o1", "m", "", 1_600_000, 90, 9, 5, 2),
		agg(ledger.ScopeTeam, "t1", "", "", 400, 40, 0, 7, 1),
		agg(ledger.ScopeTeam, "t1", "m", "", 1_500_000, 30, 3, 11, 2),
		agg(ledger.ScopeTeam, "t2", "m", "", 900_000, 80, 8, 0, 1),
	}
	if diff := cmp.Diff(wantLifetime, lifetime(t, b)); diff != "" {
		t.Errorf("Lifetime (-want +got):\n%s", diff)
	}
}

// testAggregatesMatchRecords is the property: whatever records are
// appended, concurrently (so that a backend batches them), with duplicate
// RequestIDs among them, the aggregates equal the sums of the records the
// ledger kept, for every since, and Lifetime and Totals agree with them.
// The records are random, from a fixed seed: keys in teams in orgs, some
// of those empty, several models (one empty), times over three days
// (some on bucket edges, some before 1970) given in several zones.
func testAggregatesMatchRecords(t *testing.T, b Backend) {
	const n, appenders = 1500, 16
	rng := rand.New(rand.NewPCG(6, 15))
	base := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	zones := []*time.Location{time.UTC, time.FixedZone("+5:30", 5*3600+1800),
		time.FixedZone("+5:45", 5*3600+2700), time.FixedZone("-3:30", -(3*3600 + 1800))}
	models := []string{"gpt-4o", "gpt-4o", "claude-sonnet", "モデル", ""}
	randTime := func() time.Time {
		var at time.Time
		switch p := rng.IntN(100); {
		case p < 10: // on a bucket edge, or a nanosecond before one
			at = base.Add(time.Duration(rng.IntN(3*96)) * ledger.BucketWidth)
			if p < 5 {
				at = at.Add(-time.Nanosecond)
			}
		case p < 13: // the last hour of 1969
			at = time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(time.Hour))))
		default:
			at = base.Add(time.Duration(rng.Int64N(int64(72 * time.Hour))))
		}
		if at.UnixNano() == 0 {
			at = at.Add(time.Nanosecond) // the epoch itself is not storable
		}
		return at.In(zones[rng.IntN(len(zones))])
	}
	recs := make([]ledger.Record, n)
	for i := range recs {
		k := rng.IntN(13)
		r := ledger.Record{
			RequestID: fmt.Sprintf("req_%04d", i),
			KeyID:     fmt.Sprintf("key_%02d", k),
			Team:      fmt.Sprintf("team_%d", k%5),
			Org:       fmt.Sprintf("org_%d", k%5%3),
			Model:     models[rng.IntN(len(models))],
			StartedAt: randTime(),
		}
		switch k {
		case 12:
			r.KeyID = ""
		case 11:
			r.Team = ""
		}
		if k%5 == 4 {
			r.Org = ""
		}
		if rng.IntN(10) > 0 {
			r.Tokens[tokens.Input] = rng.Int64N(100_000)
			r.Tokens[tokens.CachedInput] = rng.Int64N(r.Tokens[tokens.Input] + 1)
			r.Tokens[tokens.Output] = rng.Int64N(10_000)
			r.CostPico = rng.Int64N(5_000_000_000_000) // up to $5, to the pico-dollar
		}
		r.FinishedAt = r.StartedAt.Add(time.Duration(rng.Int64N(int64(time.Minute))))
		if i > 0 && rng.IntN(10) == 0 {
			// A duplicate of an earlier RequestID with other values:
			// whichever the ledger keeps, it counts once.
			r.RequestID = recs[rng.IntN(i)].RequestID
		}
		recs[i] = r
	}

	ctx, cancel := context.WithTimeout(t.Context(), appendTimeout)
	defer cancel()
	next := make(chan ledger.Record)
	errs := make([]error, appenders)
	var wg sync.WaitGroup
	for g := range appenders {
		wg.Go(func() {
			for r := range next {
				if err := b.Append(ctx, r); err != nil && errs[g] == nil {
					errs[g] = err
				}
			}
		})
	}
	for _, r := range recs {
		next <- r
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	kept := records(t, b, ledger.Filter{})
	unique := map[string]bool{}
	for _, r := range recs {
		unique[r.RequestID] = true
	}
	if len(kept) != len(unique) {
		t.Fatalf("%d records kept; want %d (one per RequestID)", len(kept), len(unique))
	}
	all := ExpectedBuckets(kept, time.Time{})
	if diff := cmp.Diff(all, buckets(t, b, time.Time{})); diff != "" {
		t.Errorf("Buckets(zero) are not the sums of the records (-want +got):\n%s", diff)
	}
	for _, since := range []time.Time{
		base,
		base.Add(7*time.Minute + 30*time.Second), // inside a bucket
		base.Add(36 * time.Hour).In(zones[2]),
		kept[len(kept)/3].StartedAt,
		time.Date(1969, 12, 31, 23, 30, 0, 0, time.UTC),
		base.Add(100 * time.Hour),
	} {
		if diff := cmp.Diff(ExpectedBuckets(kept, since), buckets(t, b, since), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("Buckets(%v) are not the sums of the records (-want +got):\n%s", since, diff)
		}
	}
	life := lifetime(t, b)
	if diff := cmp.Diff(ExpectedLifetime(kept), life); diff != "" {
		t.Errorf("Lifetime is not the sum of the records (-want +got):\n%s", diff)
	}
	// The aggregates of a key agree with the Totals of its records.
	perKey := map[string]ledger.Total{}
	for _, a := range life {
		if a.Scope != ledger.ScopeKey {
			continue
		}
		s := perKey[a.ID]
		s.Group, s.Requests, s.Cost = a.ID, s.Requests+a.Requests, s.Cost.Add(a.Cost)
		s.Tokens[tokens.Input] += a.InputTokens
		s.Tokens[tokens.CachedInput] += a.CachedInputTokens
		s.Tokens[tokens.Output] += a.OutputTokens
		perKey[a.ID] = s
	}
	for _, tot := range totals(t, b, ledger.Filter{}, ledger.ByKey) {
		if tot.Group == "" {
			continue // records without a key are in no key's aggregates
		}
		got := perKey[tot.Group]
		want := ledger.Total{Group: tot.Group, Requests: tot.Requests, Cost: tot.Cost,
			Tokens: tokens.Counts{tokens.Input: tot.Tokens[tokens.Input], tokens.CachedInput: tot.Tokens[tokens.CachedInput], tokens.Output: tot.Tokens[tokens.Output]}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("key %s: Lifetime summed over models differs from Totals (-totals +lifetime):\n%s", tot.Group, diff)
		}
	}
}
