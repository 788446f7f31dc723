// Package admission owns the decision to let a metered request start and
// the settling of what it actually used: Admit reserves, in one step, what
// a request may consume — requests, input/output/total tokens, dollars —
// against every limit that covers it (the key's, its team's and its org's,
// and their per-model limits), or refuses with an *apierr.Error (429 with
// apierr's rate_limited, tokens_rate_limited or insufficient_quota code,
// and RetryAfter when waiting helps); Settle replaces the reservation by
// the actual use. Money is counted exactly, in pico-dollars
// (internal/money): a budget, configured in micro-dollars, is exceeded by
// the exact sum of what its requests cost, never by rounded costs.
//
// Backend is the contract of an admission backend: CountRequest (the
// request-rate windows ext_authz counts before the body is read), Admit
// and Settle (ext_proc), Budgets (the admin API) and Run (releasing
// reservations never settled). Local is the in-process backend (sliding
// windows in limits.Counters, calendar and lifetime budgets in a table of
// its own, one lock for atomicity); internal/admission/redis is the
// fleet's, the same calls in one Redis round trip each, which counts
// what PlanClaim says a claim reserves and refuses as its Window and
// Budget refusals say, so the two cannot disagree. Failover puts each
// request's failure mode in front of a backend that can fail (Shared),
// with a Local as the open mode's fallback. Every backend must pass the
// contract suite in admissiontest. docs/limits.md gives the semantics.
//
// It must not parse bodies or talk to Envoy; extproc calls it.
package admission

import (
	"time"

	"github.com/sluicegw/sluice/internal/keyring"
)

// Claim is what a request asks to be admitted with.
type Claim struct {
	Principal *keyring.Principal
	Model     string
	// CountRequest is set when ext_authz did not count the request (it is
	// not in the filter chain): Admit counts it against the request-rate
	// limits.
	CountRequest bool
	// InputTokens is the request-phase estimate of the prompt;
	// MaxOutputTokens the most the reply may hold (the client's max_tokens,
	// else the model's cap). Both are reserved against token limits.
	InputTokens, MaxOutputTokens int64
	// CostPico is the worst-case cost in pico-dollars (those tokens at the
	// model's price, plus its per-request fee), reserved against budgets; 0
	// for an unpriced model. A saturated cost (math.MaxInt64, see
	// internal/sat) is more than any budget allows.
	CostPico int64
	At       time.Time
}

// Grant is an admitted claim, to be settled exactly once.
type Grant struct {
	Claim Claim
	// Remaining is what the covering limits have left after this
	// reservation, for the x-ratelimit-* response headers.
	Remaining Remaining
	id        uint64
	// fallback: admitted by a Failover's own Local while the shared
	// backend could not answer.
	fallback bool
}

// Actual is what an admitted request used, and when it ended.
type Actual struct {
	InputTokens, OutputTokens int64
	// CostPico is what it cost, in pico-dollars.
	CostPico int64
	At       time.Time
}
