package admissiontest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/policies"
)

// testRefusedRequestIsCountedNowhere: a request ext_authz counted and
// admission refuses gives its request count back; a request that costs
// nothing passes a spent budget.
func testRefusedRequestIsCountedNowhere(t *testing.T, open opener) {
	l := open(t, nil)
	p := principal(policies.Limits{Requests: policies.RateLimits{PerMinute: 5}, Budgets: []policies.Budget{{MicroUSD: 10, Period: policies.PeriodDay}}}, policies.Limits{}, policies.Limits{})
	ctx := context.Background()
	authz := func() { // what ext_authz does before ext_proc
		if err := l.CountRequest(ctx, p, t0); err != nil {
			t.Fatalf("authz refused: %v", err)
		}
	}
	authz()
	if _, err := l.Admit(ctx, admission.Claim{Principal: p, CostPico: 10 * micro, At: t0}); err != nil {
		t.Fatal(err)
	}
	authz()
	if _, err := l.Admit(ctx, admission.Claim{Principal: p, CostPico: 1 * micro, At: t0}); err == nil {
		t.Fatal("the spent budget admitted more")
	}
	if rem := remainingRequests(t, l, p, t0); rem != 4 {
		t.Errorf("remaining requests %d, want 4: the refused request must give its count back", rem)
	}
	authz()
	if _, err := l.Admit(ctx, admission.Claim{Principal: p, CostPico: 0 * micro, At: t0}); err != nil {
		t.Errorf("a request that costs nothing was refused by a spent budget: %v", err)
	}
}

// remainingRequests is what p's request windows have left at at, as
// Admit reports it for a request ext_authz counted: it counts nothing
// there, and reserves nothing (the probe asks for no tokens and costs
// nothing; it is settled at once).
func remainingRequests(t *testing.T, b admission.Backend, p *keyring.Principal, at time.Time) int64 {
	t.Helper()
	g, err := b.Admit(t.Context(), admission.Claim{Principal: p, At: at})
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	b.Settle(t.Context(), g, admission.Actual{At: at})
	return g.Remaining.Requests
}

// testTokenRefusalGivesTheRequestBack: a request ext_authz counted and a
// token window refuses gives its request count back, as a budget refusal
// does; counted here (no ext_authz), it is counted nowhere either.
func testTokenRefusalGivesTheRequestBack(t *testing.T, open opener) {
	for _, countHere := range []bool{false, true} {
		l := open(t, nil)
		p := principal(policies.Limits{Requests: policies.RateLimits{PerMinute: 5}, Tokens: policies.TokenLimits{Total: policies.RateLimits{PerMinute: 10}}}, policies.Limits{}, policies.Limits{})
		if !countHere { // ext_authz
			if err := l.CountRequest(t.Context(), p, t0); err != nil {
				t.Fatalf("authz refused: %v", err)
			}
		}
		if _, err := l.Admit(t.Context(), admission.Claim{Principal: p, CountRequest: countHere, InputTokens: 11, At: t0}); err == nil {
			t.Fatal("11 tokens fitted a window of 10")
		}
		if rem := remainingRequests(t, l, p, t0); rem != 5 {
			t.Errorf("count here %v: remaining requests %d, want 5: the refused request must be counted nowhere", countHere, rem)
		}
	}
}

// testRequestLimitsCountedHere: Admit counts the request limits ext_authz
// cannot count — an org's, and every per-model one — in each window
// (minute, hour, day), and leaves a key's and a team's own request limits
// to ext_authz (CountRequest): counting them here too would count one
// request twice.
func testRequestLimitsCountedHere(t *testing.T, open opener) {
	perModel := func(r policies.RateLimits) policies.Limits {
		return policies.Limits{Models: map[string]policies.Limits{"m": {Requests: r}}}
	}
	for _, tt := range []struct {
		name           string
		key, team, org policies.Limits
		// admitted is how many requests for model m, a second apart, are
		// admitted before the next is refused; 0: none is refused.
		admitted int
	}{
		{"key's own per minute: ext_authz's", policies.Limits{Requests: policies.RateLimits{PerMinute: 1}}, policies.Limits{}, policies.Limits{}, 0},
		{"team's own per day: ext_authz's", policies.Limits{}, policies.Limits{Requests: policies.RateLimits{PerDay: 1}}, policies.Limits{}, 0},
		{"org per minute", policies.Limits{}, policies.Limits{}, policies.Limits{Requests: policies.RateLimits{PerMinute: 2}}, 2},
		{"org per hour", policies.Limits{}, policies.Limits{}, policies.Limits{Requests: policies.RateLimits{PerHour: 2}}, 2},
		{"org per day", policies.Limits{}, policies.Limits{}, policies.Limits{Requests: policies.RateLimits{PerDay: 2}}, 2},
		{"key per model per minute", perModel(policies.RateLimits{PerMinute: 1}), policies.Limits{}, policies.Limits{}, 1},
		{"team per model per day", policies.Limits{}, perModel(policies.RateLimits{PerDay: 1}), policies.Limits{}, 1},
		{"org per model per hour", policies.Limits{}, policies.Limits{}, perModel(policies.RateLimits{PerHour: 3}), 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := open(t, nil)
			p := principal(tt.key, tt.team, tt.org)
			const tries = 5
			for i := range tries {
				// ext_authz counted the request (CountRequest false): only
				// what it cannot count is counted here.
				_, err := l.Admit(t.Context(), admission.Claim{Principal: p, Model: "m", At: t0.Add(time.Duration(i) * time.Second)})
				switch {
				case tt.admitted == 0 && err != nil:
					t.Fatalf("request %d refused: %v; nothing here limits it", i+1, err)
				case tt.admitted > 0 && i < tt.admitted && err != nil:
					t.Fatalf("request %d refused: %v; want %d admitted", i+1, err, tt.admitted)
				case tt.admitted > 0 && i == tt.admitted:
					if d := denialOf(t, err); d.Code != "rate_limited" {
						t.Fatalf("request %d: %+v, want rate_limited", i+1, d)
					}
					return
				}
			}
		})
	}
}

// testPerModelAndOrgLimits: a model's limits apply to that model only, on
// top of the scope's own; an org's request limit is counted here.
func testPerModelAndOrgLimits(t *testing.T, open opener) {
	l := open(t, nil)
	team := policies.Limits{Models: map[string]policies.Limits{"big": {Budgets: []policies.Budget{{MicroUSD: 10, Period: policies.PeriodDay}}}}}
	org := policies.Limits{Requests: policies.RateLimits{PerMinute: 3}}
	p := principal(policies.Limits{}, team, org)
	ctx := context.Background()
	if _, err := l.Admit(ctx, admission.Claim{Principal: p, Model: "big", CostPico: 10 * micro, At: t0}); err != nil {
		t.Fatal(err)
	}
	_, err := l.Admit(ctx, admission.Claim{Principal: p, Model: "big", CostPico: 1 * micro, At: t0})
	if d := denialOf(t, err); !strings.Contains(d.Message, "team t for model big") {
		t.Errorf("denial %+v", d)
	}
	if _, err := l.Admit(ctx, admission.Claim{Principal: p, Model: "small", CostPico: 1000 * micro, At: t0}); err != nil {
		t.Fatalf("another model is not limited by big's budget: %v", err)
	}
	// Two admitted so far (the refused one counted nothing): one more fits.
	if _, err := l.Admit(ctx, admission.Claim{Principal: p, Model: "small", At: t0}); err != nil {
		t.Fatalf("third request: %v", err)
	}
	_, err = l.Admit(ctx, admission.Claim{Principal: p, Model: "small", At: t0})
	if d := denialOf(t, err); d.Code != "rate_limited" || !strings.Contains(d.Message, "org o allows 3 requests per minute") {
		t.Errorf("fourth request: %+v", d)
	}
}
