package admissiontest

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/policies"
)

// testInputAndOutputWindowsApart: an input-token window counts input
// only and an output-token window output only, at admission and at
// settle: a settle that swapped the two (or an admission that reserved
// one as the other) leaves the wrong window full.
func testInputAndOutputWindowsApart(t *testing.T, open opener) {
	ctx := t.Context()
	l := open(t, nil)
	p := principal(policies.Limits{Tokens: policies.TokenLimits{
		Input:  policies.RateLimits{PerMinute: 100},
		Output: policies.RateLimits{PerMinute: 50},
	}}, policies.Limits{}, policies.Limits{})

	// Reserved as what it is: 100 input fit the input window although
	// the output window is smaller; 51 output do not.
	if _, err := l.Admit(ctx, admission.Claim{Principal: p, InputTokens: 101, At: t0}); err == nil || !strings.Contains(err.Error(), "input tokens") {
		t.Fatalf("101 input tokens on an input window of 100: %v, want a refusal by the input window", err)
	}
	if _, err := l.Admit(ctx, admission.Claim{Principal: p, MaxOutputTokens: 51, At: t0}); err == nil || !strings.Contains(err.Error(), "output tokens") {
		t.Fatalf("51 output tokens on an output window of 50: %v, want a refusal by the output window", err)
	}
	g, err := l.Admit(ctx, admission.Claim{Principal: p, InputTokens: 60, MaxOutputTokens: 10, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	// The request used 30 input tokens and 5 output ones.
	l.Settle(ctx, g, admission.Actual{InputTokens: 30, OutputTokens: 5, At: t0.Add(time.Second)})
	at := t0.Add(2 * time.Second)
	if _, err := l.Admit(ctx, admission.Claim{Principal: p, InputTokens: 71, At: at}); err == nil || !strings.Contains(err.Error(), "input tokens") {
		t.Errorf("71 input tokens after 30 used of 100: %v, want a refusal by the input window", err)
	}
	if _, err := l.Admit(ctx, admission.Claim{Principal: p, MaxOutputTokens: 46, At: at}); err == nil || !strings.Contains(err.Error(), "output tokens") {
		t.Errorf("46 output tokens after 5 used of 50: %v, want a refusal by the output window", err)
	}
	if _, err := l.Admit(ctx, admission.Claim{Principal: p, InputTokens: 70, MaxOutputTokens: 45, At: at}); err != nil {
		t.Errorf("exactly what is left of each window: %v", err)
	}
}

func testTokenLimitRetryAfter(t *testing.T, open opener) {
	l := open(t, nil)
	p := principal(policies.Limits{Tokens: policies.TokenLimits{Total: policies.RateLimits{PerMinute: 100}}}, policies.Limits{}, policies.Limits{})
	ctx := context.Background()
	if _, err := l.Admit(ctx, admission.Claim{Principal: p, InputTokens: 40, MaxOutputTokens: 40, At: t0}); err != nil {
		t.Fatal(err)
	}
	_, err := l.Admit(ctx, admission.Claim{Principal: p, InputTokens: 40, MaxOutputTokens: 40, At: t0.Add(10 * time.Second)})
	d := denialOf(t, err)
	if d.Status != 429 || d.Code != "tokens_rate_limited" || d.RetryAfter <= 49*time.Second || d.RetryAfter > 51*time.Second {
		t.Errorf("denial %+v; want 429 with retry-after about 50s (when the first reservation leaves the minute)", d)
	}
}

// testWholeLimitIsNotImpossible: a request that asks for exactly a
// limit's whole size fits an empty period, so its refusal after some use
// says when to retry; one asking for more than the limit can never fit
// and says so, without a retry-after.
func testWholeLimitIsNotImpossible(t *testing.T, open opener) {
	daily := policies.Limits{Budgets: []policies.Budget{{MicroUSD: 10, Period: policies.PeriodDay}}}
	rolling := policies.Limits{Budgets: []policies.Budget{{MicroUSD: 10, Period: policies.PeriodRolling, Window: time.Hour}}}
	window := policies.Limits{Tokens: policies.TokenLimits{Output: policies.RateLimits{PerMinute: 10}}}
	for _, tt := range []struct {
		name   string
		limits policies.Limits
		first  admission.Claim // admitted first
		then   admission.Claim // refused
		code   string
		retry  bool
		phrase string // in the refusal's message
	}{
		{"daily budget, whole", daily, admission.Claim{CostPico: 1 * micro}, admission.Claim{CostPico: 10 * micro}, "insufficient_quota", true, "resets at"},
		{"daily budget, more", daily, admission.Claim{CostPico: 1 * micro}, admission.Claim{CostPico: 11 * micro}, "insufficient_quota", false, "allows at all"},
		{"rolling budget, whole", rolling, admission.Claim{CostPico: 1 * micro}, admission.Claim{CostPico: 10 * micro}, "insufficient_quota", true, "has no room"},
		{"rolling budget, more", rolling, admission.Claim{CostPico: 1 * micro}, admission.Claim{CostPico: 11 * micro}, "insufficient_quota", false, "allows at all"},
		{"token window, whole", window, admission.Claim{MaxOutputTokens: 1}, admission.Claim{MaxOutputTokens: 10}, "tokens_rate_limited", true, "token limit reached"},
		{"token window, more", window, admission.Claim{MaxOutputTokens: 1}, admission.Claim{MaxOutputTokens: 11}, "tokens_rate_limited", false, "at all"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := open(t, nil)
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

// testDenialsSayWhenToRetry: every refusal a wait can cure carries
// RetryAfter (the retry-after header): a request rate, a token window, a
// rolling budget, a calendar budget; one no wait can cure does not.
func testDenialsSayWhenToRetry(t *testing.T, open opener) {
	for _, tt := range []struct {
		name  string
		org   policies.Limits
		claim admission.Claim
		code  string
		retry bool
	}{
		{"org request rate", policies.Limits{Requests: policies.RateLimits{PerMinute: 1}}, admission.Claim{}, "rate_limited", true},
		{"token window", policies.Limits{Tokens: policies.TokenLimits{Output: policies.RateLimits{PerMinute: 10}}}, admission.Claim{MaxOutputTokens: 6}, "tokens_rate_limited", true},
		{"rolling budget", policies.Limits{Budgets: []policies.Budget{{MicroUSD: 10, Period: policies.PeriodRolling, Window: time.Hour}}}, admission.Claim{CostPico: 6 * micro}, "insufficient_quota", true},
		{"daily budget", policies.Limits{Budgets: []policies.Budget{{MicroUSD: 10, Period: policies.PeriodDay}}}, admission.Claim{CostPico: 6 * micro}, "insufficient_quota", true},
		{"lifetime budget", policies.Limits{Budgets: []policies.Budget{{MicroUSD: 10, Period: policies.PeriodLifetime}}}, admission.Claim{CostPico: 6 * micro}, "insufficient_quota", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := open(t, nil)
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

// testDeniedRequestReservesNothing: one limit refusing leaves every other
// covering limit untouched.
func testDeniedRequestReservesNothing(t *testing.T, open opener) {
	l := open(t, nil)
	p := principal(
		policies.Limits{Tokens: policies.TokenLimits{Input: policies.RateLimits{PerMinute: 100}}},
		policies.Limits{Budgets: []policies.Budget{{MicroUSD: 50, Period: policies.PeriodDay}}},
		policies.Limits{Tokens: policies.TokenLimits{Output: policies.RateLimits{PerHour: 10}}},
	)
	ctx := context.Background()
	_, err := l.Admit(ctx, admission.Claim{Principal: p, InputTokens: 50, MaxOutputTokens: 20, CostPico: 10 * micro, At: t0})
	d := denialOf(t, err)
	if d.Code != "tokens_rate_limited" || !strings.Contains(d.Message, "org o") || !strings.Contains(d.Message, "at all") {
		t.Fatalf("denial %+v; want the org's output-token limit, impossible", d)
	}
	// Nothing was reserved: the full key window and budget are there.
	g, err := l.Admit(ctx, admission.Claim{Principal: p, InputTokens: 100, MaxOutputTokens: 10, CostPico: 50 * micro, At: t0})
	if err != nil {
		t.Fatalf("the refused request reserved something: %v", err)
	}
	if g.Remaining.Budget != 0 {
		t.Errorf("remaining budget %d", g.Remaining.Budget)
	}
}

// testSettleReleasesTheDifference: a reservation is the worst case; what
// was not used comes back at settle, and a use above it is charged.
func testSettleReleasesTheDifference(t *testing.T, open opener) {
	l := open(t, nil)
	p := principal(policies.Limits{
		Tokens:  policies.TokenLimits{Total: policies.RateLimits{PerMinute: 1000}},
		Budgets: []policies.Budget{{MicroUSD: 1000, Period: policies.PeriodLifetime}},
	}, policies.Limits{}, policies.Limits{})
	ctx := context.Background()
	g, err := l.Admit(ctx, admission.Claim{Principal: p, InputTokens: 100, MaxOutputTokens: 800, CostPico: 900 * micro, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	if g.Remaining.Tokens != 100 || g.Remaining.Budget != 100 {
		t.Errorf("remaining after the reservation: %+v", g.Remaining)
	}
	// While it is held, a second worst case does not fit.
	if _, err := l.Admit(ctx, admission.Claim{Principal: p, InputTokens: 100, MaxOutputTokens: 800, CostPico: 900 * micro, At: t0.Add(time.Second)}); err == nil {
		t.Fatal("a second reservation fitted while the first is held")
	}
	l.Settle(ctx, g, admission.Actual{InputTokens: 100, OutputTokens: 50, CostPico: 150 * micro, At: t0.Add(2 * time.Second)})
	l.Settle(ctx, g, admission.Actual{InputTokens: 100, OutputTokens: 50, CostPico: 150 * micro, At: t0.Add(2 * time.Second)}) // twice: no effect
	g2, err := l.Admit(ctx, admission.Claim{Principal: p, InputTokens: 100, MaxOutputTokens: 700, CostPico: 800 * micro, At: t0.Add(3 * time.Second)})
	if err != nil {
		t.Fatalf("after settling 150 of 900, 800 more must fit: %v", err)
	}
	if g2.Remaining.Tokens != 1000-150-800 || g2.Remaining.Budget != 1000-150-800 {
		t.Errorf("remaining %+v", g2.Remaining)
	}
	// The provider reported more than was reserved: it is charged.
	l.Settle(ctx, g2, admission.Actual{InputTokens: 100, OutputTokens: 760, CostPico: 860 * micro, At: t0.Add(4 * time.Second)})
	d := denialOf(t, func() error {
		_, err := l.Admit(ctx, admission.Claim{Principal: p, InputTokens: 1, CostPico: 1 * micro, At: t0.Add(5 * time.Second)})
		return err
	}())
	if d.Code != "insufficient_quota" || !strings.Contains(d.Message, "lifetime budget of key key_a") {
		t.Errorf("denial %+v", d)
	}
}

// testRemainingHeaders: each kind of limit that covers a request gets a
// complete OpenAI-style set — limit, remaining and reset (OpenAI's
// duration notation) from one limit, the tightest of any token kind — and
// a kind no limit covers gets none.
func testRemainingHeaders(t *testing.T, open opener) {
	l := open(t, nil)
	p := principal(policies.Limits{Requests: policies.RateLimits{PerMinute: 10}}, policies.Limits{Tokens: policies.TokenLimits{Input: policies.RateLimits{PerMinute: 100}}},
		policies.Limits{Tokens: policies.TokenLimits{Output: policies.RateLimits{PerHour: 1000}}})
	at := t0.Add(500 * time.Millisecond)
	g, err := l.Admit(t.Context(), admission.Claim{Principal: p, CountRequest: true, InputTokens: 20, MaxOutputTokens: 40, At: at})
	if err != nil {
		t.Fatal(err)
	}
	// 1 s buckets for a minute: the request's bucket [t0, t0+1s) leaves
	// the window at t0+61s, 60.5 s after it; the input window (80 left)
	// is tighter than the output one (960 left, 1 min buckets).
	want := []string{
		"x-ratelimit-limit-requests: 10", "x-ratelimit-remaining-requests: 9", "x-ratelimit-reset-requests: 1m0.5s",
		"x-ratelimit-limit-tokens: 100", "x-ratelimit-remaining-tokens: 80", "x-ratelimit-reset-tokens: 1m0.5s",
	}
	if got := g.Remaining.Headers(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("headers\n %v\nwant\n %v", got, want)
	}

	// No request limit, two token windows with as much left: the one that
	// resets later is shown, with its own size.
	p = principal(policies.Limits{Tokens: policies.TokenLimits{Total: policies.RateLimits{PerMinute: 60, PerHour: 60}}}, policies.Limits{}, policies.Limits{})
	g, err = l.Admit(t.Context(), admission.Claim{Principal: p, InputTokens: 10, MaxOutputTokens: 10, At: at})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"x-ratelimit-limit-tokens: 60", "x-ratelimit-remaining-tokens: 40", "x-ratelimit-reset-tokens: 1h0m59.5s"}
	if got := g.Remaining.Headers(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("headers\n %v\nwant\n %v", got, want)
	}

	// Nothing covers the request: no headers at all.
	g, err = l.Admit(t.Context(), admission.Claim{Principal: principal(policies.Limits{}, policies.Limits{}, policies.Limits{}), InputTokens: 10, At: at})
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Remaining.Headers(); len(got) != 0 {
		t.Errorf("headers %v, want none", got)
	}
}

// testRemainingIsTheTightest: the x-ratelimit-* numbers are the tightest
// limit of each kind, whichever order the limits come in.
func testRemainingIsTheTightest(t *testing.T, open opener) {
	type want struct{ reqLimit, req, tokLimit, tok, budLimit, bud int64 }
	for _, tt := range []struct {
		name string
		key  policies.Limits
		reqs policies.RateLimits // the key's request limits
		want want
	}{
		{"tight last", policies.Limits{
			Tokens:  policies.TokenLimits{Total: policies.RateLimits{PerMinute: 1000, PerHour: 100}},
			Budgets: []policies.Budget{{MicroUSD: 10_000, Period: policies.PeriodLifetime}, {MicroUSD: 500, Period: policies.PeriodDay}},
		}, policies.RateLimits{PerMinute: 10, PerHour: 3}, want{3, 2, 100, 40, 500, 400}},
		{"tight first", policies.Limits{
			Tokens:  policies.TokenLimits{Total: policies.RateLimits{PerMinute: 100, PerHour: 1000}},
			Budgets: []policies.Budget{{MicroUSD: 500, Period: policies.PeriodDay}, {MicroUSD: 10_000, Period: policies.PeriodLifetime}},
		}, policies.RateLimits{PerMinute: 3, PerHour: 10}, want{3, 2, 100, 40, 500, 400}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := open(t, nil)
			p := principal(tt.key, policies.Limits{}, policies.Limits{})
			p.KeyLimits.Requests = tt.reqs
			g, err := l.Admit(t.Context(), admission.Claim{Principal: p, CountRequest: true, InputTokens: 20, MaxOutputTokens: 40, CostPico: 100 * micro, At: t0})
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

// testRemainingTiesAndRollingBudgets: where two windows have as much left,
// Remaining names the one that resets later (what a client must wait
// for), whichever scope comes first; a rolling budget's remaining room is
// in micro-dollars, as its limit.
func testRemainingTiesAndRollingBudgets(t *testing.T, open opener) {
	l := open(t, nil)
	key := policies.Limits{
		Requests: policies.RateLimits{PerHour: 2},
		Tokens:   policies.TokenLimits{Total: policies.RateLimits{PerHour: 100}},
		Budgets:  []policies.Budget{{MicroUSD: 500, Period: policies.PeriodRolling, Window: time.Hour}},
	}
	team := policies.Limits{
		Requests: policies.RateLimits{PerMinute: 2},
		Tokens:   policies.TokenLimits{Total: policies.RateLimits{PerMinute: 100}},
	}
	p := principal(key, team, policies.Limits{})
	g, err := l.Admit(t.Context(), admission.Claim{Principal: p, CountRequest: true, InputTokens: 20, MaxOutputTokens: 40, CostPico: 100 * micro, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	r := g.Remaining
	if r.RequestsLimit != 2 || r.Requests != 1 || r.RequestsReset < 30*time.Minute {
		t.Errorf("requests: limit %d, %d left, reset in %v; want the key's hour: 2, 1, about an hour", r.RequestsLimit, r.Requests, r.RequestsReset)
	}
	if r.TokensLimit != 100 || r.Tokens != 40 || r.TokensReset < 30*time.Minute {
		t.Errorf("tokens: limit %d, %d left, reset in %v; want the key's hour: 100, 40, about an hour", r.TokensLimit, r.Tokens, r.TokensReset)
	}
	if r.BudgetLimit != 500 || r.Budget != 400 {
		t.Errorf("rolling budget: limit %d, %d left; want 500 and 400 micro-dollars", r.BudgetLimit, r.Budget)
	}
}

// testSaturatedAmounts: a claim or a settled use at math.MaxInt64 (what
// saturating arithmetic gives a cost or a count that does not fit) is
// refused as more than a limit allows at all, and charged without
// wrapping budgets or windows to negative numbers that would admit
// everything afterwards.
func testSaturatedAmounts(t *testing.T, open opener) {
	const huge = math.MaxInt64
	budgets := []struct {
		name string
		b    policies.Budget
	}{
		{"daily", policies.Budget{MicroUSD: 1_000_000, Period: policies.PeriodDay}},
		{"lifetime", policies.Budget{MicroUSD: 1_000_000, Period: policies.PeriodLifetime}},
		{"rolling", policies.Budget{MicroUSD: 1_000_000, Period: policies.PeriodRolling, Window: time.Hour}},
	}
	for _, tc := range budgets {
		t.Run(tc.name, func(t *testing.T) {
			l := open(t, nil)
			p := principal(policies.Limits{Budgets: []policies.Budget{tc.b}}, policies.Limits{}, policies.Limits{})
			ctx := context.Background()

			// A worst case that saturated: refused, 429 insufficient_quota.
			_, err := l.Admit(ctx, admission.Claim{Principal: p, Model: "m", InputTokens: huge, MaxOutputTokens: huge, CostPico: huge, At: t0})
			if d := denialOf(t, err); d.Status != 429 || d.Code != "insufficient_quota" || d.RetryAfter != 0 ||
				!strings.Contains(d.Message, "at all") || !strings.Contains(d.Message, "$9223372036854.775807") {
				t.Fatalf("saturated claim: %d %s %q retry %v, want 429 insufficient_quota, no retry, the whole amount, \"at all\"", d.Status, d.Code, d.Message, d.RetryAfter)
			}

			// Two requests admitted cheaply, each settled at a saturated
			// cost (a provider reporting an absurd usage).
			for i := range 2 {
				g, err := l.Admit(ctx, admission.Claim{Principal: p, Model: "m", InputTokens: 1, MaxOutputTokens: 1, CostPico: 1 * micro, At: t0.Add(time.Duration(i) * time.Second)})
				if err != nil {
					if i == 0 {
						t.Fatalf("first cheap request: %v", err)
					}
					break // the first settle already spent the budget
				}
				l.Settle(ctx, g, admission.Actual{InputTokens: huge, OutputTokens: huge, CostPico: huge, At: t0.Add(2 * time.Second)})
			}
			if _, err := l.Admit(ctx, admission.Claim{Principal: p, Model: "m", InputTokens: 1, MaxOutputTokens: 1, CostPico: 1 * micro, At: t0.Add(3 * time.Second)}); err == nil {
				t.Fatal("a budget charged a saturated cost admitted another request")
			}
			for _, bs := range l.Budgets(p, t0.Add(3*time.Second)) {
				if bs.Spent.Cmp(mu(tc.b.MicroUSD)) < 0 || !bs.Remaining.IsZero() || !bs.Reserved.IsZero() {
					t.Errorf("budget %+v: want all spent, nothing reserved or remaining", bs)
				}
			}
		})
	}

	// A token limit: the saturated total (input + output) is impossible.
	l := open(t, nil)
	p := principal(policies.Limits{Tokens: policies.TokenLimits{Total: policies.RateLimits{PerMinute: 1000}}}, policies.Limits{}, policies.Limits{})
	_, err := l.Admit(context.Background(), admission.Claim{Principal: p, Model: "m", InputTokens: huge, MaxOutputTokens: huge, At: t0})
	if d := denialOf(t, err); d.Status != 429 || d.Code != "tokens_rate_limited" || d.RetryAfter != 0 || !strings.Contains(d.Message, "9223372036854775807") {
		t.Fatalf("input + output tokens overflowing: %d %s %q retry %v, want 429 tokens_rate_limited, no retry, the saturated amount", d.Status, d.Code, d.Message, d.RetryAfter)
	}
}
