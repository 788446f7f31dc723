package admission

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/policies"
)

// TestSaturatedCostInTheSpendIndex: a use settled at math.MaxInt64
// pico-dollars (a provider reporting an absurd usage) is recorded in the
// spend index as that, not wrapped to a negative sum that would let a
// budget rebuilt from it admit everything. The contract suite
// (admissiontest's SaturatedAmounts) covers the budgets and windows.
func TestSaturatedCostInTheSpendIndex(t *testing.T) {
	const huge = math.MaxInt64
	for _, b := range []policies.Budget{
		{MicroUSD: 1_000_000, Period: policies.PeriodDay},
		{MicroUSD: 1_000_000, Period: policies.PeriodLifetime},
		{MicroUSD: 1_000_000, Period: policies.PeriodRolling, Window: time.Hour},
	} {
		t.Run(b.Period, func(t *testing.T) {
			idx := NewSpendIndex(nil, nil)
			l := NewLocal(limits.New(limits.Options{}), LocalOptions{Spent: idx.Spent, Record: idx.Add})
			p := principal(policies.Limits{Budgets: []policies.Budget{b}}, policies.Limits{}, policies.Limits{})
			ctx := context.Background()
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
			if s := idx.Spent("key", "key_a", "", time.Time{}); s != money.FromPico(huge) {
				t.Errorf("spend index lifetime sum %v, want the saturated cost, %d p$", s, int64(huge))
			}
		})
	}
}
