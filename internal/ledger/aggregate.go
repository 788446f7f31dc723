package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicegw/sluice/internal/money"
)

// BucketWidth is the width of the aggregates' time buckets. Every calendar
// period in every time zone in use today — days, weeks and months in UTC,
// in +5:30 (India), +5:45 (Nepal), +12:45 (Chatham), across daylight-saving
// changes — starts on a multiple of 15 minutes from the Unix epoch, so the
// buckets of a period add up to exactly that period.
const BucketWidth = 15 * time.Minute

// BucketOf is the start of the bucket that holds t: t floored to a
// multiple of BucketWidth since the Unix epoch, in UTC. Times before 1970
// floor too (towards the past).
func BucketOf(t time.Time) time.Time {
	const w = int64(BucketWidth / time.Second)
	s := t.Unix() // already floored to the second
	s -= ((s % w) + w) % w
	return time.Unix(s, 0).UTC()
}

// Scope is whom an Aggregate sums the spend of.
type Scope string

// The scopes, and which field of Record names the principal in each.
const (
	ScopeKey  Scope = "key"  // Record.KeyID
	ScopeTeam Scope = "team" // Record.Team
	ScopeOrg  Scope = "org"  // Record.Org
)

// Scopes lists every Scope.
func Scopes() []Scope { return []Scope{ScopeKey, ScopeTeam, ScopeOrg} }

// ID is the field of r that names the principal of scope s ("" if r has
// none there, or s is unknown).
func (s Scope) ID(r Record) string {
	switch s {
	case ScopeKey:
		return r.KeyID
	case ScopeTeam:
		return r.Team
	case ScopeOrg:
		return r.Org
	}
	return ""
}

// Validate reports an unknown Scope.
func (s Scope) Validate() error {
	switch s {
	case ScopeKey, ScopeTeam, ScopeOrg:
		return nil
	}
	return fmt.Errorf("unknown scope %q (want key, team or org): %w", string(s), ErrInvalid)
}

// Aggregate is what one principal spent on one model: in one bucket
// (Aggregates.Buckets) or ever (Aggregates.Lifetime).
//
// A record counts in three aggregates, one per scope — its key's, its
// team's and its org's — each in the bucket of its StartedAt and under its
// Model; a scope whose id is empty in the record (no org, say) is skipped.
// StartedAt, not FinishedAt, because a request is admitted, and its
// reservation made, in the period it started: a stream that begins at
// 23:59 and ends at 00:01 is charged to the day it began, by the budget
// that admitted it and by the aggregates a restart rebuilds that budget
// from. It is also the time Filter and the Totals go by, so the
// aggregates of a period equal the Totals of the records of that period.
type Aggregate struct {
	Scope Scope
	// ID is the key's id, the team's or the org's name; never empty.
	ID string
	// Model is Record.Model; it may be empty.
	Model string
	// Bucket is the start of the bucket, in UTC (see BucketOf); zero in
	// Lifetime's sums.
	Bucket time.Time

	// Cost is the exact sum of the records' CostPico.
	Cost                                         money.Sum
	InputTokens, CachedInputTokens, OutputTokens int64
	Requests                                     int64
}

// Aggregates reads the per-bucket sums that a ledger keeps beside its
// records, written in the same transaction as the records they count: a
// record is in the aggregates exactly when it is in the ledger, so a crash
// never leaves them apart. They are what a budget tracker rebuilds its
// state from at start-up, in two queries:
//
//   - spent in the current period of every budget: Buckets(ctx, since) with
//     since the earliest start among the budgets' current periods (or
//     rolling windows), then, per budget, the sum of the rows of its scope,
//     id (and model, for a per-model budget) whose Bucket is at or after
//     its own period's start;
//   - spent ever, for lifetime budgets: Lifetime(ctx).
//
// Summing a principal's rows over Model gives its spend on every model.
type Aggregates interface {
	// Buckets returns every aggregate whose bucket starts at or after
	// BucketOf(since) — the bucket that holds since counts whole, so a
	// rolling window that starts inside a bucket over-counts by at most
	// one bucket, never under-counts — sorted by Scope, ID, Model (as
	// strings: key before org before team), then Bucket. A zero since
	// returns every bucket.
	Buckets(ctx context.Context, since time.Time) ([]Aggregate, error)
	// Lifetime returns, per scope, id and model, the sum of every bucket,
	// with Bucket zero, sorted by Scope, ID, then Model.
	Lifetime(ctx context.Context) ([]Aggregate, error)
}
