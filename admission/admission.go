// Package admission owns the decision to let a metered request start and
// the settling of what it actually used: Admit reserves, in one step, what
// a request may consume against every limit that covers it; Settle replaces
// the reservation by the actual use. Local is the in-process implementation;
// today it counts requests (for callers ext_authz did not count), and token
// and dollar budgets plug into the same two calls (issue 6), so admission
// stays one round trip to a counter backend.
//
// It must not parse bodies or talk to Envoy; extproc calls it.
package admission

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicegw/sluice/keyring"
	"github.com/sluicegw/sluice/limits"
)

// Claim is what a request asks to be admitted with.
type Claim struct {
	Principal *keyring.Principal
	Model     string
	// CountRequest is set when ext_authz did not count the request (it is
	// not in the filter chain): Admit counts it against the request-rate
	// limits.
	CountRequest bool
	// InputTokens is the request-phase estimate; MaxOutputTokens the
	// client's cap (-1: none). Reserved by token limits (issue 6).
	InputTokens, MaxOutputTokens int64
	At                           time.Time
}

// Grant is an admitted claim, to be settled.
type Grant struct {
	Claim Claim
}

// Actual is what an admitted request used.
type Actual struct {
	InputTokens, OutputTokens, CostMicros int64
}

// Denial is a refusal: the status and error a client gets.
type Denial struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
}

func (d *Denial) Error() string { return d.Message }

// Local admits against in-process counters.
type Local struct {
	counters *limits.Counters
}

// NewLocal returns a Local counting in counters (share them with authz so
// that one limit is one counter).
func NewLocal(counters *limits.Counters) *Local { return &Local{counters: counters} }

// Admit admits c or returns a *Denial.
func (l *Local) Admit(_ context.Context, c Claim) (Grant, error) {
	if c.CountRequest && len(c.Principal.Requests) > 0 {
		var buf [8]int64
		d := l.counters.AdmitInto(c.At, c.Principal.Requests, buf[:0])
		if !d.Admitted {
			dm := c.Principal.Requests[d.Denied]
			return Grant{}, &Denial{
				Status: 429, Code: "rate_limited", RetryAfter: d.RetryAfter,
				Message: fmt.Sprintf("rate limit reached: %s allows %d requests per %s; retry in %ds",
					limits.Describe(dm.Key), dm.Limit, limits.PeriodName(dm.Period), ceilSeconds(d.RetryAfter)),
			}
		}
	}
	return Grant{Claim: c}, nil
}

// Settle records what an admitted request used. Request counts are not
// refunded, so there is nothing to release yet; token and dollar
// reservations (issue 6) are released or adjusted here.
func (l *Local) Settle(_ context.Context, _ Grant, _ Actual) {}

func ceilSeconds(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}
