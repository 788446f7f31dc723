package admission

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/policies"
)

// TestSaturatedAmounts: a claim or a settled use at math.MaxInt64 (what
// saturating arithmetic gives a cost or a count that does not fit) is
// refused as more than a limit allows at all, and charged without
// wrapping budgets, windows or the spend index to negative numbers that
// would admit everything afterwards.
func TestSaturatedAmounts(t *testing.T) {
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
			idx := NewSpendIndex(nil, nil)
			l := NewLocal(limits.New(limits.Options{}), LocalOptions{Spent: idx.Spent, Record: idx.Add})
			p := principal(policies.Limits{Budgets: []policies.Budget{tc.b}}, policies.Limits{}, policies.Limits{})
			ctx := context.Background()

			// A worst case that saturated: refused, 429 insufficient_quota.
			_, err := l.Admit(ctx, Claim{Principal: p, Model: "m", InputTokens: huge, MaxOutputTokens: huge, CostPico: huge, At: t0})
			if d := denialOf(t, err); d.Status != 429 || d.Code != "insufficient_quota" || d.RetryAfter != 0 ||
				!strings.Contains(d.Message, "at all") || !strings.Contains(d.Message, "$9223372036854.775807") {
				t.Fatalf("saturated claim: %d %s %q retry %v, want 429 insufficient_quota, no retry, the whole amount, \"at all\"", d.Status, d.Code, d.Message, d.RetryAfter)
			}

			// Two requests admitted cheaply, each settled at a saturated
			// cost (a provider reporting an absurd usage).
			for i := range 2 {
				g, err := l.Admit(ctx, Claim{Principal: p, Model: "m", InputTokens: 1, MaxOutputTokens: 1, CostPico: 1 * micro, At: t0.Add(time.Duration(i) * time.Second)})
				if err != nil {
					if i == 0 {
						t.Fatalf("first cheap request: %v", err)
					}
					break // the first settle already spent the budget
				}
				l.Settle(ctx, g, Actual{InputTokens: huge, OutputTokens: huge, CostPico: huge, At: t0.Add(2 * time.Second)})
			}
			if _, err := l.Admit(ctx, Claim{Principal: p, Model: "m", InputTokens: 1, MaxOutputTokens: 1, CostPico: 1 * micro, At: t0.Add(3 * time.Second)}); err == nil {
				t.Fatal("a budget charged a saturated cost admitted another request")
			}
			for _, bs := range l.Budgets(p, t0.Add(3*time.Second)) {
				if bs.Spent.Cmp(mu(tc.b.MicroUSD)) < 0 || !bs.Remaining.IsZero() || !bs.Reserved.IsZero() {
					t.Errorf("budget %+v: want all spent, nothing reserved or remaining", bs)
				}
			}
			if s := idx.Spent("key", "key_a", "", time.Time{}); s != money.FromPico(huge) {
				t.Errorf("spend index lifetime sum %v, want the saturated cost, %d p$", s, int64(huge))
			}
		})
	}

	// A token limit: the saturated total (input + output) is impossible.
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	p := principal(policies.Limits{Tokens: policies.TokenLimits{Total: policies.RateLimits{PerMinute: 1000}}}, policies.Limits{}, policies.Limits{})
	_, err := l.Admit(context.Background(), Claim{Principal: p, Model: "m", InputTokens: huge, MaxOutputTokens: huge, At: t0})
	if d := denialOf(t, err); d.Status != 429 || d.Code != "tokens_rate_limited" || d.RetryAfter != 0 || !strings.Contains(d.Message, "9223372036854775807") {
		t.Fatalf("input + output tokens overflowing: %d %s %q retry %v, want 429 tokens_rate_limited, no retry, the saturated amount", d.Status, d.Code, d.Message, d.RetryAfter)
	}
}
