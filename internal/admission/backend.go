package admission

import (
	"context"
	"time"

	"github.com/sluicegw/sluice/internal/keyring"
)

// Backend is an admission backend: the one contract ext_authz, ext_proc,
// the admin API and serve hold it to. Local is the in-process one; a
// backend shared by a fleet of gateways implements the same calls, each
// in one round trip, with the same answers. A backend must pass the
// contract suite internal/admission/admissiontest, which pins down these
// semantics to the nanosecond and the pico-dollar; docs/limits.md states
// them in words.
type Backend interface {
	// CountRequest counts one request of p at at against the request-rate
	// windows of its key and its team (p.KeyLimits.Requests and
	// p.TeamLimits.Requests, per minute, hour and day): in every window, or,
	// when one of them is full, in none. A refusal is an *apierr.Error:
	// 429 rate_limited naming the binding window, RetryAfter when all of
	// them have room again. Any other error means the limits could not be
	// checked. ext_authz calls it before the body is read; Admit counts the
	// request limits it cannot know (an org's, per-model ones).
	CountRequest(ctx context.Context, p *keyring.Principal, at time.Time) error
	// Admit reserves, atomically, what c may use against every limit that
	// covers it — the key's, its team's and its org's, and their limits
	// for c.Model: request and token windows, rolling, calendar and
	// lifetime budgets — or reserves nothing and refuses with an
	// *apierr.Error (429 rate_limited, tokens_rate_limited or
	// insufficient_quota, RetryAfter when waiting helps). When it refuses a
	// request CountRequest counted (c.CountRequest false), it gives that
	// count back: a refused request is counted nowhere. Any other error
	// means the limits could not be checked.
	Admit(ctx context.Context, c Claim) (Grant, error)
	// Settle replaces g's reservation by what the request used, in the
	// window bucket and the budget period the reservation went to (a use
	// above the reservation is counted at a.At). A grant is settled once;
	// settling it again changes nothing.
	Settle(ctx context.Context, g Grant, a Actual)
	// Budgets reports every budget that covers p's requests, for any
	// model, as it stands at at, without reserving anything.
	Budgets(p *keyring.Principal, at time.Time) []BudgetStatus
	// Run releases, until ctx ends, the reservations of requests not
	// settled within ttl of their admission (requests whose end the
	// gateway never saw); now is the clock.
	Run(ctx context.Context, ttl time.Duration, now func() time.Time) error
}

var _ Backend = (*Local)(nil)
