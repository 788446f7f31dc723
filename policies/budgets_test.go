package policies

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicegw/sluice/internal/tokens"
)

// TestRollingBudgetValidation: a rolling budget's window is whole minutes,
// at least one; two rolling budgets of different windows are two budgets,
// two of one window a duplicate.
func TestRollingBudgetValidation(t *testing.T) {
	rolling := func(w time.Duration) Budget { return Budget{MicroUSD: 100, Period: PeriodRolling, Window: w} }
	for _, tt := range []struct {
		name    string
		budgets []Budget
		want    []string
	}{
		{"1m", []Budget{rolling(time.Minute)}, nil},
		{"24h and 168h", []Budget{rolling(24 * time.Hour), rolling(168 * time.Hour)}, nil},
		{"1h and 61m", []Budget{rolling(time.Hour), rolling(61 * time.Minute)}, nil},
		{"a day and a rolling day", []Budget{{MicroUSD: 1, Period: PeriodDay}, rolling(24 * time.Hour)}, nil},
		{"90s", []Budget{rolling(90 * time.Second)}, []string{
			"teams[0].limits.budgets[0].window: a rolling budget needs a window of whole minutes, at least 1m (e.g. 24h), got 1m30s",
		}},
		{"59s", []Budget{rolling(59 * time.Second)}, []string{
			"teams[0].limits.budgets[0].window: a rolling budget needs a window of whole minutes, at least 1m (e.g. 24h), got 59s",
		}},
		{"1m and a nanosecond", []Budget{rolling(time.Minute + 1)}, []string{
			"teams[0].limits.budgets[0].window: a rolling budget needs a window of whole minutes, at least 1m (e.g. 24h), got 1m0.000000001s",
		}},
		{"no window", []Budget{rolling(0)}, []string{
			"teams[0].limits.budgets[0].window: a rolling budget needs a window of whole minutes, at least 1m (e.g. 24h), got 0s",
		}},
		{"two of one window", []Budget{rolling(time.Hour), rolling(time.Hour)}, []string{
			"teams[0].limits.budgets[1]: a second rolling budget (first at teams[0].limits.budgets[0]): one budget per period",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			c.Teams[0].Limits.Budgets = tt.budgets
			var got []string
			for _, p := range c.Validate() {
				got = append(got, p.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPerRequestFee: the per-request fee is added to every cost, whatever
// the tokens, zero tokens included.
func TestPerRequestFee(t *testing.T) {
	p := Price{Input: 1_000_000, Output: 2_000_000, PerRequest: 7}
	for _, tc := range []struct{ in, cached, out, want int64 }{
		{0, 0, 0, 7},
		{1, 0, 0, 8},    // 1 µ$ + 7
		{10, 0, 20, 57}, // 10 + 40 + 7
		{1_000_000, 0, 0, 1_000_007},
	} {
		if got := p.Cost(Tokens{tokens.Input: tc.in, tokens.CachedInput: tc.cached, tokens.Output: tc.out}); got != tc.want*1_000_000 {
			t.Errorf("Cost(%d, %d, %d) with a fee of 7 µ$ = %d p$, want %d µ$", tc.in, tc.cached, tc.out, got, tc.want)
		}
	}
}
