package admission

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/policies"
)

// TestRequestLimitsCountedHere: Admit counts the request limits ext_authz
// cannot count — an org's, and every per-model one — in each window
// (minute, hour, day), and leaves a key's and a team's own request limits
// to ext_authz (they reach Admit as the principal's Requests): counting
// them here too would count one request twice.
func TestRequestLimitsCountedHere(t *testing.T) {
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
			l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
			p := principal(tt.key, tt.team, tt.org)
			const tries = 5
			for i := range tries {
				// ext_authz counted the request (CountRequest false): only
				// what it cannot count is counted here.
				_, err := l.Admit(t.Context(), Claim{Principal: p, Model: "m", At: t0.Add(time.Duration(i) * time.Second)})
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

// TestCounterKeyAllocatesOnce: counterKey sizes its builder exactly, so
// building a key is one allocation whatever its parts (it runs for every
// limit of every admission).
func TestCounterKeyAllocatesOnce(t *testing.T) {
	for _, s := range []scope{{kind: "key", id: "key_a"}, {kind: "team", id: "t", model: "gpt-4o-mini-2024-07-18"}} {
		if n := testing.AllocsPerRun(100, func() { _ = counterKey(&s, "tokens", "input", "1h") }); n != 1 {
			t.Errorf("counterKey(%+v) allocates %v times, want 1", s, n)
		}
	}
}

// TestExpiredHoldIsDroppedADayLater: a reservation ExpireBefore released
// stays held (reserving nothing) so that a late end is still charged;
// only when it started more than a day before a later cutoff is it
// forgotten, and a settle after that charges nothing.
func TestExpiredHoldIsDroppedADayLater(t *testing.T) {
	for _, tt := range []struct {
		name         string
		secondCutoff time.Time // of the second ExpireBefore
		charged      int64     // by the late settle
	}{
		{"an hour after its start", t0.Add(time.Hour), 100},
		{"exactly a day after its start", t0.Add(24 * time.Hour), 100},
		{"more than a day after its start", t0.Add(24*time.Hour + time.Nanosecond), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
			p := principal(policies.Limits{Budgets: []policies.Budget{{MicroUSD: 1000, Period: policies.PeriodLifetime}}}, policies.Limits{}, policies.Limits{})
			g, err := l.Admit(t.Context(), Claim{Principal: p, CostPico: 100 * micro, At: t0})
			if err != nil {
				t.Fatal(err)
			}
			if n := l.ExpireBefore(t0.Add(time.Hour), t0.Add(time.Second)); n != 1 {
				t.Fatalf("expired %d, want 1", n)
			}
			if n := l.ExpireBefore(tt.secondCutoff, tt.secondCutoff); n != 0 {
				t.Fatalf("an expired hold expired again (%d)", n)
			}
			l.Settle(t.Context(), g, Actual{CostPico: 100 * micro, At: tt.secondCutoff})
			if st := l.budgets[budgetScope{"key", "key_a", ""}]["lifetime"]; st.spent != mu(tt.charged) || !st.reserved.IsZero() {
				t.Errorf("after a late settle: %+v, want %d spent and nothing reserved", st, tt.charged)
			}
		})
	}
}

// TestWholeLimitIsNotImpossible: a request that asks for exactly a
// limit's whole size fits an empty period, so its refusal after some use
// says when to retry; one asking for more than the limit can never fit
// and says so, without a retry-after.
func TestWholeLimitIsNotImpossible(t *testing.T) {
	daily := policies.Limits{Budgets: []policies.Budget{{MicroUSD: 10, Period: policies.PeriodDay}}}
	rolling := policies.Limits{Budgets: []policies.Budget{{MicroUSD: 10, Period: policies.PeriodRolling, Window: time.Hour}}}
	window := policies.Limits{Tokens: policies.TokenLimits{Output: policies.RateLimits{PerMinute: 10}}}
	for _, tt := range []struct {
		name   string
		limits policies.Limits
		first  Claim // admitted first
		then   Claim // refused
		code   string
		retry  bool
		phrase string // in the refusal's message
	}{
		{"daily budget, whole", daily, Claim{CostPico: 1 * micro}, Claim{CostPico: 10 * micro}, "insufficient_quota", true, "resets at"},
		{"daily budget, more", daily, Claim{CostPico: 1 * micro}, Claim{CostPico: 11 * micro}, "insufficient_quota", false, "allows at all"},
		{"rolling budget, whole", rolling, Claim{CostPico: 1 * micro}, Claim{CostPico: 10 * micro}, "insufficient_quota", true, "has no room"},
		{"rolling budget, more", rolling, Claim{CostPico: 1 * micro}, Claim{CostPico: 11 * micro}, "insufficient_quota", false, "allows at all"},
		{"token window, whole", window, Claim{MaxOutputTokens: 1}, Claim{MaxOutputTokens: 10}, "tokens_rate_limited", true, "token limit reached"},
		{"token window, more", window, Claim{MaxOutputTokens: 1}, Claim{MaxOutputTokens: 11}, "tokens_rate_limited", false, "at all"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
			p := principal(policies.Limits{}, tt.limits, policies.Limits{})
			c := tt.first
			c.Principal, c.At = p, t0
			if _, err := l.Admit(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			c = tt.then
			c.Principal, c.At = p, t0.Add(time.Second)
			_, err := l.Admit(t.Context(), c)
			d := denialOf(t, err)
			if d.Code != tt.code || (d.RetryAfter > 0) != tt.retry || !strings.Contains(d.Message, tt.phrase) {
				t.Errorf("refusal %s %q, retry-after %v; want %s mentioning %q, with a retry-after: %v", d.Code, d.Message, d.RetryAfter, tt.code, tt.phrase, tt.retry)
			}
		})
	}
}

// Equivalent mutants gremlins leaves alive in this package (no test can
// tell them from the code as written):
//   - local.go, Admit: "left <= 0 || cost > left" with "left < 0": cost is
//     positive there, so at left == 0 "cost > left" refuses anyway.
//   - local.go, Admit: "l.nextID++" as "l.nextID--": grant ids only need
//     to be distinct, and counting down from 0 gives distinct ids too.
//   - local.go, Remaining.budget: "left < r.Budget" as "left <=
//     r.Budget": on a tie of what is left, either budget is the tightest;
//     which one's size the headers show is not specified. (For requests
//     and tokens a tie goes to the limit that resets later.)
