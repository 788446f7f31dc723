package admissiontest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/policies"
)

// testBudgetPeriods: calendar budgets reset at their boundary in the
// configured time zone; lifetime ones never; rolling ones slide.
func testBudgetPeriods(t *testing.T, open opener) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spend := func(l admission.Backend, p *keyring.Principal, at time.Time, cost int64) error {
		g, err := l.Admit(ctx, admission.Claim{Principal: p, CostPico: cost * micro, At: at})
		if err == nil {
			l.Settle(ctx, g, admission.Actual{CostPico: cost * micro, At: at})
		}
		return err
	}
	tests := []struct {
		name        string
		budget      policies.Budget
		first, full time.Time // spend the budget at first; still full at full
		reset       time.Time // free again
	}{
		// 23:30 Berlin on Monday is 22:30 UTC; the day ends at 23:00 UTC.
		{"day in Berlin", policies.Budget{MicroUSD: 100, Period: policies.PeriodDay},
			time.Date(2026, 11, 30, 10, 0, 0, 0, berlin), time.Date(2026, 11, 30, 22, 59, 59, 0, time.UTC), time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC)},
		{"week from Monday", policies.Budget{MicroUSD: 100, Period: policies.PeriodWeek},
			time.Date(2026, 12, 2, 9, 0, 0, 0, berlin), time.Date(2026, 12, 6, 23, 59, 0, 0, berlin), time.Date(2026, 12, 7, 0, 0, 0, 0, berlin)},
		{"month", policies.Budget{MicroUSD: 100, Period: policies.PeriodMonth},
			time.Date(2026, 12, 1, 0, 0, 0, 0, berlin), time.Date(2026, 12, 31, 23, 59, 0, 0, berlin), time.Date(2027, 1, 1, 0, 0, 0, 0, berlin)},
		{"rolling 24h", policies.Budget{MicroUSD: 100, Period: policies.PeriodRolling, Window: 24 * time.Hour},
			t0, t0.Add(23 * time.Hour), t0.Add(24*time.Hour + 30*time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := open(t, berlin)
			p := principal(policies.Limits{Budgets: []policies.Budget{tt.budget}}, policies.Limits{}, policies.Limits{})
			if err := spend(l, p, tt.first, 100); err != nil {
				t.Fatal(err)
			}
			err := spend(l, p, tt.full, 1)
			if d := denialOf(t, err); d.Code != "insufficient_quota" {
				t.Fatalf("denial %+v", d)
			} else if tt.budget.Period != policies.PeriodRolling {
				if want := tt.reset.Sub(tt.full); d.RetryAfter != want {
					t.Errorf("retry-after %v, want %v (until the period resets)", d.RetryAfter, want)
				}
			}
			if err := spend(l, p, tt.reset, 100); err != nil {
				t.Errorf("at the reset (%v) the budget is still spent: %v", tt.reset, err)
			}
		})
	}
	t.Run("lifetime", func(t *testing.T) {
		l := open(t, nil)
		p := principal(policies.Limits{Budgets: []policies.Budget{{MicroUSD: 100, Period: policies.PeriodLifetime}}}, policies.Limits{}, policies.Limits{})
		if err := spend(l, p, t0, 100); err != nil {
			t.Fatal(err)
		}
		if err := spend(l, p, t0.AddDate(5, 0, 0), 1); err == nil {
			t.Error("a lifetime budget reset")
		}
	})
}

// testBudgetPeriodNeverGoesBack: a request stamped just before midnight,
// admitted after one stamped just after, must not reset the new day.
func testBudgetPeriodNeverGoesBack(t *testing.T, open opener) {
	l := open(t, nil)
	p := principal(policies.Limits{Budgets: []policies.Budget{{MicroUSD: 100, Period: policies.PeriodDay}}}, policies.Limits{}, policies.Limits{})
	ctx := context.Background()
	midnight := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	g, err := l.Admit(ctx, admission.Claim{Principal: p, CostPico: 80 * micro, At: midnight.Add(time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	l.Settle(ctx, g, admission.Actual{CostPico: 80 * micro, At: midnight.Add(time.Second)})
	if _, err := l.Admit(ctx, admission.Claim{Principal: p, CostPico: 30 * micro, At: midnight.Add(-time.Millisecond)}); err == nil {
		t.Fatal("a late request from the old day reset the new day's budget")
	}
	// The new day's period (it resets a day after midnight) with 80 spent.
	if st := l.Budgets(p, midnight.Add(time.Second)); len(st) != 1 || !st[0].Resets.Equal(midnight.AddDate(0, 0, 1)) || st[0].Spent != mu(80) {
		t.Errorf("state %+v; want the new day with 80 spent", st)
	}
}

func testBudgetsReport(t *testing.T, open opener) {
	l := open(t, nil)
	p := principal(policies.Limits{Budgets: []policies.Budget{{MicroUSD: 100, Period: policies.PeriodDay}, {MicroUSD: 500, Period: policies.PeriodRolling, Window: time.Hour}}},
		policies.Limits{Models: map[string]policies.Limits{"m": {Budgets: []policies.Budget{{MicroUSD: 70, Period: policies.PeriodLifetime}}}}}, policies.Limits{})
	ctx := context.Background()
	g, err := l.Admit(ctx, admission.Claim{Principal: p, Model: "m", CostPico: 40 * micro, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	l.Settle(ctx, g, admission.Actual{CostPico: 30 * micro, At: t0})
	if _, err := l.Admit(ctx, admission.Claim{Principal: p, Model: "m", CostPico: 20 * micro, At: t0}); err != nil {
		t.Fatal(err)
	}
	got := l.Budgets(p, t0)
	want := []admission.BudgetStatus{
		{Scope: "key", ID: "key_a", Period: "day", Limit: 100, Spent: mu(30), Reserved: mu(20), Remaining: mu(50), Resets: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{Scope: "key", ID: "key_a", Period: "rolling", Window: time.Hour, Limit: 500, Spent: mu(50), Remaining: mu(450)},
		{Scope: "team", ID: "t", Model: "m", Period: "lifetime", Limit: 70, Spent: mu(30), Reserved: mu(20), Remaining: mu(20)},
	}
	if len(got) != len(want) {
		t.Fatalf("Budgets = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Budgets[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// testBudgetsCountExactly: a budget is exceeded by the exact sum of what
// its requests cost, in pico-dollars, never by costs rounded up to the
// micro-dollar. A budget of 1 µ$ admits seven embedding requests of
// 0.14 µ$ (0.98 µ$ together) and refuses the eighth, which would take it
// to 1.12 µ$; four requests of 0.25 µ$ fill a budget of 1 µ$ exactly and
// a fifth of 1 p$ is refused. Rounded up, each would have cost 1 µ$ and
// the second request would have been refused. Calendar, lifetime and
// rolling budgets alike.
func testBudgetsCountExactly(t *testing.T, open opener) {
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
				l := open(t, nil)
				p := principal(policies.Limits{}, policies.Limits{Budgets: []policies.Budget{b}}, policies.Limits{})
				at := t0
				for i := range tt.admitted {
					g, err := l.Admit(ctx, admission.Claim{Principal: p, CostPico: tt.cost, At: at})
					if err != nil {
						t.Fatalf("request %d of %d p$ (%d p$ spent before it): %v", i+1, tt.cost, int64(i)*tt.cost, err)
					}
					l.Settle(ctx, g, admission.Actual{CostPico: tt.cost, At: at})
					at = at.Add(time.Second)
				}
				if _, err := l.Admit(ctx, admission.Claim{Principal: p, CostPico: tt.last, At: at}); err == nil {
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

// testBudgetsBeyondAnInt64OfPico: calendar and lifetime budgets hold sums
// an int64 of pico-dollars cannot ($9.2M): a monthly budget of $20M
// admits two requests of $9M each and refuses a third.
func testBudgetsBeyondAnInt64OfPico(t *testing.T, open opener) {
	const nine = 9_000_000 * money.PicoPerMicro * 1_000_000 // $9M in p$
	for _, period := range []string{policies.PeriodMonth, policies.PeriodLifetime} {
		t.Run(period, func(t *testing.T) {
			ctx := context.Background()
			l := open(t, nil)
			p := principal(policies.Limits{}, policies.Limits{}, policies.Limits{Budgets: []policies.Budget{{MicroUSD: 20_000_000 * 1_000_000, Period: period}}})
			for i := range 2 {
				g, err := l.Admit(ctx, admission.Claim{Principal: p, CostPico: nine, At: t0})
				if err != nil {
					t.Fatalf("request %d of $9M: %v", i+1, err)
				}
				l.Settle(ctx, g, admission.Actual{CostPico: nine, At: t0})
			}
			if _, err := l.Admit(ctx, admission.Claim{Principal: p, CostPico: nine, At: t0}); err == nil {
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
