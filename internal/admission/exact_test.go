package admission

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/policies"
)

// TestBudgetsCountExactly: a budget is exceeded by the exact sum of what
// its requests cost, in pico-dollars, never by costs rounded up to the
// micro-dollar. A budget of 1 µ$ admits seven embedding requests of
// 0.14 µ$ (0.98 µ$ together) and refuses the eighth, which would take it
// to 1.12 µ$; four requests of 0.25 µ$ fill a budget of 1 µ$ exactly and
// a fifth of 1 p$ is refused. Rounded up, each would have cost 1 µ$ and
// the second request would have been refused. Calendar, lifetime and
// rolling budgets alike.
func TestBudgetsCountExactly(t *testing.T) {
	for _, b := range []policies.Budget{
		{MicroUSD: 1, Period: policies.PeriodDay},
		{MicroUSD: 1, Period: policies.PeriodLifetime},
		{MicroUSD: 1, Period: policies.PeriodRolling, Window: time.Hour},
	} {
		for _, tt := range []struct {
			name     string
			cost     int64 // each request's, in pico-dollars
			admitted int
			last     int64 // the request refused after them
		}{
			{"0.14 µ$ each", 140_000, 7, 140_000},
			{"0.25 µ$ each, to the budget exactly", 250_000, 4, 1},
		} {
			t.Run(b.Period+"/"+tt.name, func(t *testing.T) {
				ctx := context.Background()
				l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
				p := principal(policies.Limits{}, policies.Limits{Budgets: []policies.Budget{b}}, policies.Limits{})
				at := t0
				for i := range tt.admitted {
					g, err := l.Admit(ctx, Claim{Principal: p, CostPico: tt.cost, At: at})
					if err != nil {
						t.Fatalf("request %d of %d p$ (%d p$ spent before it): %v", i+1, tt.cost, int64(i)*tt.cost, err)
					}
					l.Settle(ctx, g, Actual{CostPico: tt.cost, At: at})
					at = at.Add(time.Second)
				}
				if _, err := l.Admit(ctx, Claim{Principal: p, CostPico: tt.last, At: at}); err == nil {
					t.Fatalf("a request of %d p$ after %d of %d p$ was admitted against a budget of 1 µ$", tt.last, tt.admitted, tt.cost)
				} else if d := denialOf(t, err); d.Code != "insufficient_quota" {
					t.Fatalf("refusal %+v; want insufficient_quota", d)
				}
				st := l.Budgets(p, at)
				spent := money.FromPico(int64(tt.admitted) * tt.cost)
				if len(st) != 1 || st[0].Spent != spent || st[0].Remaining != money.FromMicros(1).Sub(spent) {
					t.Errorf("Budgets = %+v; want %v spent, the rest of 1 µ$ remaining", st, spent)
				}
			})
		}
	}
}

// TestBudgetsBeyondAnInt64OfPico: calendar and lifetime budgets hold sums
// an int64 of pico-dollars cannot ($9.2M): a monthly budget of $20M
// admits two requests of $9M each and refuses a third.
func TestBudgetsBeyondAnInt64OfPico(t *testing.T) {
	const nine = 9_000_000 * money.PicoPerMicro * 1_000_000 // $9M in p$
	for _, period := range []string{policies.PeriodMonth, policies.PeriodLifetime} {
		t.Run(period, func(t *testing.T) {
			ctx := context.Background()
			l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
			p := principal(policies.Limits{}, policies.Limits{}, policies.Limits{Budgets: []policies.Budget{{MicroUSD: 20_000_000 * 1_000_000, Period: period}}})
			for i := range 2 {
				g, err := l.Admit(ctx, Claim{Principal: p, CostPico: nine, At: t0})
				if err != nil {
					t.Fatalf("request %d of $9M: %v", i+1, err)
				}
				l.Settle(ctx, g, Actual{CostPico: nine, At: t0})
			}
			if _, err := l.Admit(ctx, Claim{Principal: p, CostPico: nine, At: t0}); err == nil {
				t.Fatal("a third request of $9M admitted by a budget of $20M")
			}
			st := l.Budgets(p, t0)
			want := money.FromPico(nine).Add(money.FromPico(nine))
			if len(st) != 1 || st[0].Spent != want || st[0].Remaining != money.FromMicros(2_000_000*1_000_000) {
				t.Errorf("Budgets = %+v; want $18M spent, $2M remaining", st)
			}
			if got := fmt.Sprint(st[0].Spent); got != "$18000000.000000000000" {
				t.Errorf("spent %s", got)
			}
		})
	}
}
