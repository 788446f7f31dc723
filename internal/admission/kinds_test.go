package admission

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/policies"
)

// TestInputAndOutputWindowsApart: an input-token window counts input
// only and an output-token window output only, at admission and at
// settle: a settle that swapped the two (or an admission that reserved
// one as the other) leaves the wrong window full.
func TestInputAndOutputWindowsApart(t *testing.T) {
	ctx := t.Context()
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	p := principal(policies.Limits{Tokens: policies.TokenLimits{
		Input:  policies.RateLimits{PerMinute: 100},
		Output: policies.RateLimits{PerMinute: 50},
	}}, policies.Limits{}, policies.Limits{})

	// Reserved as what it is: 100 input fit the input window although
	// the output window is smaller; 51 output do not.
	if _, err := l.Admit(ctx, Claim{Principal: p, InputTokens: 101, At: t0}); err == nil || !strings.Contains(err.Error(), "input tokens") {
		t.Fatalf("101 input tokens on an input window of 100: %v, want a refusal by the input window", err)
	}
	if _, err := l.Admit(ctx, Claim{Principal: p, MaxOutputTokens: 51, At: t0}); err == nil || !strings.Contains(err.Error(), "output tokens") {
		t.Fatalf("51 output tokens on an output window of 50: %v, want a refusal by the output window", err)
	}
	g, err := l.Admit(ctx, Claim{Principal: p, InputTokens: 60, MaxOutputTokens: 10, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	// The request used 30 input tokens and 5 output ones.
	l.Settle(ctx, g, Actual{InputTokens: 30, OutputTokens: 5, At: t0.Add(time.Second)})
	at := t0.Add(2 * time.Second)
	if _, err := l.Admit(ctx, Claim{Principal: p, InputTokens: 71, At: at}); err == nil || !strings.Contains(err.Error(), "input tokens") {
		t.Errorf("71 input tokens after 30 used of 100: %v, want a refusal by the input window", err)
	}
	if _, err := l.Admit(ctx, Claim{Principal: p, MaxOutputTokens: 46, At: at}); err == nil || !strings.Contains(err.Error(), "output tokens") {
		t.Errorf("46 output tokens after 5 used of 50: %v, want a refusal by the output window", err)
	}
	if _, err := l.Admit(ctx, Claim{Principal: p, InputTokens: 70, MaxOutputTokens: 45, At: at}); err != nil {
		t.Errorf("exactly what is left of each window: %v", err)
	}
}

// TestTokenRefusalGivesTheRequestBack: a request ext_authz counted and a
// token window refuses gives its request count back, as a budget refusal
// does; counted here (no ext_authz), it is counted nowhere either.
func TestTokenRefusalGivesTheRequestBack(t *testing.T) {
	for _, countHere := range []bool{false, true} {
		counters := limits.New(limits.Options{})
		l := NewLocal(counters, LocalOptions{})
		p := principal(policies.Limits{Tokens: policies.TokenLimits{Total: policies.RateLimits{PerMinute: 10}}}, policies.Limits{}, policies.Limits{})
		p.Requests = []limits.Demand{{Key: "key/key_a/requests/1m", Period: time.Minute, Limit: 5, Amount: 1}}
		if !countHere && !counters.Admit(t0, p.Requests).Admitted { // ext_authz
			t.Fatal("authz refused")
		}
		if _, err := l.Admit(t.Context(), Claim{Principal: p, CountRequest: countHere, InputTokens: 11, At: t0}); err == nil {
			t.Fatal("11 tokens fitted a window of 10")
		}
		probe := []limits.Demand{{Key: "key/key_a/requests/1m", Period: time.Minute, Limit: 5}}
		if rem := counters.Admit(t0, probe).Remaining[0]; rem != 5 {
			t.Errorf("count here %v: remaining requests %d, want 5: the refused request must be counted nowhere", countHere, rem)
		}
	}
}

// TestRemainingIsTheTightest: the x-ratelimit-* numbers are the tightest
// limit of each kind, whichever order the limits come in.
func TestRemainingIsTheTightest(t *testing.T) {
	type want struct{ reqLimit, req, tokLimit, tok, budLimit, bud int64 }
	for _, tt := range []struct {
		name string
		key  policies.Limits
		reqs []limits.Demand
		want want
	}{
		{"tight last", policies.Limits{
			Tokens:  policies.TokenLimits{Total: policies.RateLimits{PerMinute: 1000, PerHour: 100}},
			Budgets: []policies.Budget{{MicroUSD: 10_000, Period: policies.PeriodLifetime}, {MicroUSD: 500, Period: policies.PeriodDay}},
		}, []limits.Demand{
			{Key: "r/1m", Period: time.Minute, Limit: 10, Amount: 1},
			{Key: "r/1h", Period: time.Hour, Limit: 3, Amount: 1},
		}, want{3, 2, 100, 40, 500, 400}},
		{"tight first", policies.Limits{
			Tokens:  policies.TokenLimits{Total: policies.RateLimits{PerMinute: 100, PerHour: 1000}},
			Budgets: []policies.Budget{{MicroUSD: 500, Period: policies.PeriodDay}, {MicroUSD: 10_000, Period: policies.PeriodLifetime}},
		}, []limits.Demand{
			{Key: "r/1m", Period: time.Minute, Limit: 3, Amount: 1},
			{Key: "r/1h", Period: time.Hour, Limit: 10, Amount: 1},
		}, want{3, 2, 100, 40, 500, 400}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
			p := principal(tt.key, policies.Limits{}, policies.Limits{})
			p.Requests = tt.reqs
			g, err := l.Admit(t.Context(), Claim{Principal: p, CountRequest: true, InputTokens: 20, MaxOutputTokens: 40, CostPico: 100 * micro, At: t0})
			if err != nil {
				t.Fatal(err)
			}
			r := g.Remaining
			if got := (want{r.RequestsLimit, r.Requests, r.TokensLimit, r.Tokens, r.BudgetLimit, r.Budget}); got != tt.want {
				t.Errorf("remaining %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestExpiryCutoffIsExclusive: ExpireBefore releases reservations made
// before the cutoff; one made exactly at it stays, one a nanosecond
// earlier goes.
func TestExpiryCutoffIsExclusive(t *testing.T) {
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	p := principal(policies.Limits{Budgets: []policies.Budget{{MicroUSD: 100, Period: policies.PeriodDay}}}, policies.Limits{}, policies.Limits{})
	if _, err := l.Admit(t.Context(), Claim{Principal: p, CostPico: 10 * micro, At: t0}); err != nil {
		t.Fatal(err)
	}
	if n := l.ExpireBefore(t0.Add(time.Hour), t0); n != 0 || l.Held() != 1 {
		t.Fatalf("a reservation made at the cutoff: expired %d, held %d; want it kept", n, l.Held())
	}
	if n := l.ExpireBefore(t0.Add(time.Hour), t0.Add(time.Nanosecond)); n != 1 || l.Held() != 0 {
		t.Fatalf("a reservation made before the cutoff: expired %d, held %d; want it released", n, l.Held())
	}
}

// TestSpendIsRecordedAtTheStart: a request that starts before midnight
// and ends after it is recorded in the day it started, where the ledger
// counts it; the new day's budget starts from nothing.
func TestSpendIsRecordedAtTheStart(t *testing.T) {
	idx := NewSpendIndex(nil, nil)
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{Spent: idx.Spent, Record: idx.Add})
	p := principal(policies.Limits{Budgets: []policies.Budget{{MicroUSD: 100, Period: policies.PeriodDay}}}, policies.Limits{}, policies.Limits{})
	midnight := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	g, err := l.Admit(t.Context(), Claim{Principal: p, CostPico: 80 * micro, At: midnight.Add(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	l.Settle(t.Context(), g, Actual{CostPico: 80 * micro, At: midnight.Add(time.Hour)})
	for _, kind := range []string{"key", "team", "org"} {
		id := map[string]string{"key": "key_a", "team": "t", "org": "o"}[kind]
		if got := idx.Spent(kind, id, "", midnight); !got.IsZero() {
			t.Errorf("%s spent since midnight %d, want 0: the request started the day before", kind, got)
		}
		if got := idx.Spent(kind, id, "", midnight.AddDate(0, 0, -1)); got != mu(80) {
			t.Errorf("%s spent since the day before %d, want 80", kind, got)
		}
	}
}

// TestDenialsSayWhenToRetry: every refusal a wait can cure carries
// RetryAfter (the retry-after header): a request rate, a token window, a
// rolling budget, a calendar budget; one no wait can cure does not.
func TestDenialsSayWhenToRetry(t *testing.T) {
	for _, tt := range []struct {
		name  string
		org   policies.Limits
		claim Claim
		code  string
		retry bool
	}{
		{"org request rate", policies.Limits{Requests: policies.RateLimits{PerMinute: 1}}, Claim{}, "rate_limited", true},
		{"token window", policies.Limits{Tokens: policies.TokenLimits{Output: policies.RateLimits{PerMinute: 10}}}, Claim{MaxOutputTokens: 6}, "tokens_rate_limited", true},
		{"rolling budget", policies.Limits{Budgets: []policies.Budget{{MicroUSD: 10, Period: policies.PeriodRolling, Window: time.Hour}}}, Claim{CostPico: 6 * micro}, "insufficient_quota", true},
		{"daily budget", policies.Limits{Budgets: []policies.Budget{{MicroUSD: 10, Period: policies.PeriodDay}}}, Claim{CostPico: 6 * micro}, "insufficient_quota", true},
		{"lifetime budget", policies.Limits{Budgets: []policies.Budget{{MicroUSD: 10, Period: policies.PeriodLifetime}}}, Claim{CostPico: 6 * micro}, "insufficient_quota", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
			c := tt.claim
			c.Principal, c.At = principal(policies.Limits{}, policies.Limits{}, tt.org), t0
			if _, err := l.Admit(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			c.At = t0.Add(time.Second)
			_, err := l.Admit(t.Context(), c)
			d := denialOf(t, err)
			if d.Code != tt.code || (d.RetryAfter > 0) != tt.retry || d.RetryAfterSeconds() < 0 {
				t.Errorf("denial %s retry-after %v (%ds); want %s with a retry-after: %v", d.Code, d.RetryAfter, d.RetryAfterSeconds(), tt.code, tt.retry)
			}
		})
	}
}
