package admissiontest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/policies"
)

// Config is what the suite makes a backend with.
type Config struct {
	// TimeZone places calendar budget periods (never nil).
	TimeZone *time.Location
	// Now is the suite's clock: the latest time it has passed to the
	// backend. A backend counts at the times its calls carry (Claim.At,
	// Actual.At, the at of CountRequest and Budgets), never at a wall
	// clock; Now is for a backend that needs a clock of its own as well
	// (to let its state expire, say).
	Now func() time.Time
}

// Factory returns a new, empty backend, isolated from every other it
// returned, made with cfg; it releases it when the test ends (t.Cleanup).
type Factory func(t *testing.T, cfg Config) admission.Backend

// opener is how a test of the suite makes a backend: in tz (nil: UTC).
type opener func(t *testing.T, tz *time.Location) admission.Backend

// Run runs the contract suite, one subtest per property; open makes each
// subtest's backends.
func Run(t *testing.T, open Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open opener)
	}{
		// Request-rate windows: CountRequest (ext_authz) and the ones
		// Admit counts.
		{"RequestWindowNeverAdmitsMoreThanItsLimit", testRequestWindowNeverAdmitsMoreThanItsLimit},
		{"CountRequestAllOrNothing", testCountRequestAllOrNothing},
		{"CountRequestRefusal", testCountRequestRefusal},
		{"RefusedRequestIsCountedNowhere", testRefusedRequestIsCountedNowhere},
		{"TokenRefusalGivesTheRequestBack", testTokenRefusalGivesTheRequestBack},
		{"RequestLimitsCountedHere", testRequestLimitsCountedHere},
		{"PerModelAndOrgLimits", testPerModelAndOrgLimits},
		// Token windows, reservations and settling.
		{"InputAndOutputWindowsApart", testInputAndOutputWindowsApart},
		{"TokenLimitRetryAfter", testTokenLimitRetryAfter},
		{"WholeLimitIsNotImpossible", testWholeLimitIsNotImpossible},
		{"DenialsSayWhenToRetry", testDenialsSayWhenToRetry},
		{"DeniedRequestReservesNothing", testDeniedRequestReservesNothing},
		{"PerModelRefusalReservesNothing", testPerModelRefusalReservesNothing},
		{"SettleReleasesTheDifference", testSettleReleasesTheDifference},
		{"SettleTwice", testSettleTwice},
		{"SettleAfterTheWindowMoved", testSettleAfterTheWindowMoved},
		{"RemainingHeaders", testRemainingHeaders},
		{"RemainingIsTheTightest", testRemainingIsTheTightest},
		{"RemainingTiesAndRollingBudgets", testRemainingTiesAndRollingBudgets},
		{"SaturatedAmounts", testSaturatedAmounts},
		// Budgets.
		{"BudgetPeriods", testBudgetPeriods},
		{"BudgetPeriodNeverGoesBack", testBudgetPeriodNeverGoesBack},
		{"SettleInThePeriodItStarted", testSettleInThePeriodItStarted},
		{"BudgetsReport", testBudgetsReport},
		{"BudgetsCountExactly", testBudgetsCountExactly},
		{"BudgetsBeyondAnInt64OfPico", testBudgetsBeyondAnInt64OfPico},
		// Concurrency.
		{"ConcurrentCountRequests", testConcurrentCountRequests},
		{"ConcurrentAdmits", testConcurrentAdmits},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, func(t *testing.T, tz *time.Location) admission.Backend {
				if tz == nil {
					tz = time.UTC
				}
				c := &clock{}
				b := open(t, Config{TimeZone: tz, Now: c.Now})
				if b == nil {
					t.Fatal("the factory returned no backend")
				}
				return &clocked{b: b, c: c}
			})
		})
	}
}

// clock is the suite's clock: the latest time a call carried.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) saw(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at.After(c.now) {
		c.now = at
	}
}

// clocked is a backend whose calls move the suite's clock.
type clocked struct {
	b admission.Backend
	c *clock
}

var _ admission.Backend = (*clocked)(nil)

func (b *clocked) CountRequest(ctx context.Context, p *keyring.Principal, at time.Time) error {
	b.c.saw(at)
	return b.b.CountRequest(ctx, p, at)
}

func (b *clocked) Admit(ctx context.Context, c admission.Claim) (admission.Grant, error) {
	b.c.saw(c.At)
	return b.b.Admit(ctx, c)
}

func (b *clocked) Settle(ctx context.Context, g admission.Grant, a admission.Actual) {
	b.c.saw(a.At)
	b.b.Settle(ctx, g, a)
}

func (b *clocked) Budgets(p *keyring.Principal, at time.Time) []admission.BudgetStatus {
	b.c.saw(at)
	return b.b.Budgets(p, at)
}

func (b *clocked) Run(ctx context.Context, ttl time.Duration, now func() time.Time) error {
	return b.b.Run(ctx, ttl, now)
}

// t0 is a Monday noon, UTC: the suite's times are offsets from it.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// principal is key key_a of team t in org o, with those limits.
func principal(key, team, org policies.Limits) *keyring.Principal {
	return &keyring.Principal{KeyID: "key_a", Team: "t", Org: "o", KeyLimits: key, TeamLimits: team, OrgLimits: org}
}

func denialOf(t *testing.T, err error) *apierr.Error {
	t.Helper()
	var d *apierr.Error
	if !errors.As(err, &d) {
		t.Fatalf("error %v, want an *apierr.Error", err)
	}
	return d
}

// micro is a micro-dollar in pico-dollars, what claims and settlements
// count: budgets are configured in micro-dollars.
const micro = money.PicoPerMicro

// mu is n micro-dollars as a sum.
func mu(n int64) money.Sum { return money.FromMicros(n) }
