package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Record is the spend record of one request, written once when the request
// settles.
type Record struct {
	// RequestID is the request's x-request-id. It identifies the record:
	// appending a second record with the same RequestID is a no-op that
	// succeeds (the first record wins), so a caller may retry an Append
	// whose outcome it does not know.
	RequestID string
	// KeyID, Team and Org are the principal that made the request; never
	// the key itself.
	KeyID, Team, Org string
	// Endpoint is the API endpoint's stable name (llmapi.Endpoint.String):
	// "chat_completions", "messages", …
	Endpoint string
	// Model is the model the client asked for; Provider and UpstreamModel
	// are where Sluice sent it after alias resolution.
	Model, Provider, UpstreamModel string

	InputTokens, CachedInputTokens, CacheCreationTokens, OutputTokens, ReasoningTokens int64

	// CostMicros is the cost in integer micro-dollars.
	CostMicros int64
	// Priced reports that the model had a price; CostMicros is 0 if not.
	Priced bool
	// Status is the HTTP status the client got, 0 if the stream was reset
	// before response headers.
	Status int
	// Outcome is "ok", "upstream_error", "cancelled", "unparsed" or
	// "rejected".
	Outcome string
	// Estimated reports that some token counts were computed by Sluice
	// because the provider did not report them.
	Estimated bool
	Stream    bool

	// StartedAt and FinishedAt are when the request arrived and settled;
	// StartedAt is required, and is the time Filter, ByDay, ByBucket and
	// the aggregates go by.
	// Backends keep them to the nanosecond and return them in UTC.
	StartedAt, FinishedAt time.Time
	// TTFT is the time to the first response byte, 0 if there was none.
	TTFT time.Duration
}

// ErrInvalid is wrapped by the errors of values a Ledger or Reader refuses
// before touching storage: a Record without RequestID or StartedAt, a
// negative count, an unknown GroupBy, a negative Limit.
var ErrInvalid = errors.New("invalid")

// ErrClosed is returned by Append once the ledger no longer accepts
// records (its committer has stopped, or it was closed).
var ErrClosed = errors.New("ledger closed")

// Validate reports the first reason r cannot be a spend record: an empty
// RequestID, a zero StartedAt (every report is by time), or a negative
// token count, cost or TTFT. Spend is never negative, and a negative value
// would silently lower every total it is summed into.
func (r Record) Validate() error {
	if r.RequestID == "" {
		return fmt.Errorf("empty request id: %w", ErrInvalid)
	}
	if r.StartedAt.IsZero() {
		return fmt.Errorf("request %s: zero started_at: %w", r.RequestID, ErrInvalid)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"input_tokens", r.InputTokens},
		{"cached_input_tokens", r.CachedInputTokens},
		{"cache_creation_tokens", r.CacheCreationTokens},
		{"output_tokens", r.OutputTokens},
		{"reasoning_tokens", r.ReasoningTokens},
		{"cost_micros", r.CostMicros},
		{"ttft", int64(r.TTFT)},
	} {
		if f.v < 0 {
			return fmt.Errorf("request %s: %s %d is negative: %w", r.RequestID, f.name, f.v, ErrInvalid)
		}
	}
	return nil
}

// Ledger makes spend records durable.
type Ledger interface {
	// Append returns nil once r is durable: committed, and synced to disk,
	// so that neither a crash of the process nor of the machine loses it.
	// A record whose RequestID is already in the ledger is not written
	// again and Append returns nil: the first record wins.
	//
	// If Append returns an error, r may still be written later; a caller
	// that wants it may Append it again, which is safe because of the
	// RequestID rule above. In particular, if ctx ends while Append waits,
	// it returns an error wrapping ctx.Err() and r may or may not be
	// committed (a backend may commit it afterwards). If ctx is already
	// done when Append is called, Append returns its error and writes
	// nothing. An invalid record (see Record.Validate) is refused with an
	// error wrapping ErrInvalid and is never written.
	//
	// Append is safe for concurrent use; concurrent Appends are what group
	// commit batches.
	Append(ctx context.Context, r Record) error
}

// Filter selects records. Zero fields select everything.
type Filter struct {
	// Since (inclusive) and Until (exclusive) bound StartedAt; a zero time
	// leaves that side open.
	Since, Until time.Time
	// KeyID, Team, Org and Model, when not empty, must equal the record's.
	KeyID, Team, Org, Model string
	// Limit, when positive, caps how many records Records returns, or how
	// many groups Totals returns (the first ones in their order). 0 means
	// no limit; negative is invalid.
	Limit int
}

// Validate reports a Filter no Reader accepts: a negative Limit, or Until
// before Since.
func (f Filter) Validate() error {
	if f.Limit < 0 {
		return fmt.Errorf("limit %d is negative: %w", f.Limit, ErrInvalid)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return fmt.Errorf("until %s is before since %s: %w",
			f.Until.Format(time.RFC3339Nano), f.Since.Format(time.RFC3339Nano), ErrInvalid)
	}
	return nil
}

// GroupBy is what Totals sums over.
type GroupBy string

// The groupings, and what Total.Group holds for each.
const (
	ByKey   GroupBy = "key"   // Record.KeyID
	ByTeam  GroupBy = "team"  // Record.Team
	ByOrg   GroupBy = "org"   // Record.Org
	ByModel GroupBy = "model" // Record.Model
	ByDay   GroupBy = "day"   // the UTC date of StartedAt, "2006-01-02"
	// ByBucket groups by the BucketWidth bucket of StartedAt (BucketOf),
	// its start in UTC as RFC 3339: "2006-01-02T15:04:05Z". Calendar
	// periods in any time zone are unions of these buckets: sluice spend
	// folds them into days, weeks and months in the zone asked for.
	ByBucket GroupBy = "bucket"
	ByNone   GroupBy = "none" // "": one total over every record
)

// GroupBys lists every valid GroupBy.
func GroupBys() []GroupBy {
	return []GroupBy{ByKey, ByTeam, ByOrg, ByModel, ByDay, ByBucket, ByNone}
}

// Validate reports an unknown GroupBy.
func (g GroupBy) Validate() error {
	switch g {
	case ByKey, ByTeam, ByOrg, ByModel, ByDay, ByBucket, ByNone:
		return nil
	}
	return fmt.Errorf("unknown group by %q (want key, team, org, model, day, bucket or none): %w", string(g), ErrInvalid)
}

// Total sums the records of one group.
type Total struct {
	Group    string
	Requests int64

	InputTokens, CachedInputTokens, CacheCreationTokens, OutputTokens, ReasoningTokens int64

	CostMicros int64
	// Estimated counts the records with Estimated set.
	Estimated int64
	// Unpriced counts the records with Priced unset.
	Unpriced int64
}

// Reader reports on the records of a ledger.
type Reader interface {
	// Records returns the records f selects, newest first: by StartedAt
	// descending, then by RequestID ascending.
	Records(ctx context.Context, f Filter) ([]Record, error)
	// Totals sums the records f selects, one Total per group that has
	// records (none if no record matches, also for ByNone), sorted by
	// CostMicros descending, then by Group ascending.
	Totals(ctx context.Context, f Filter, by GroupBy) ([]Total, error)
}
