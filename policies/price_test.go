package policies

import "testing"

func TestCostMicros(t *testing.T) {
	gpt4o := Price{Input: 2_500_000, CachedInput: 1_250_000, Output: 10_000_000}
	for _, tc := range []struct {
		p                     Price
		in, cached, out, want int64
	}{
		{gpt4o, 1_000_000, 0, 0, 2_500_000},         // $2.50 for 1M input
		{gpt4o, 0, 0, 1_000_000, 10_000_000},        // $10 for 1M output
		{gpt4o, 1_000_000, 1_000_000, 0, 1_250_000}, // all cached
		{gpt4o, 10, 0, 20, 225},                     // 10*2.5 + 20*10 = 225 µ$
		{gpt4o, 1, 0, 0, 3},                         // 2.5 µ$ rounds up
		{gpt4o, 0, 0, 0, 0},
		{Price{Input: 3_000_000, Output: 15_000_000}, 100, 40, 0, 300}, // no cached price: cached at input
		{gpt4o, 10, 50, 0, 13},                                         // cached clamped to input: 10*1.25 = 12.5 → 13
		{gpt4o, -5, 0, 2, 20},                                          // negatives clamped
	} {
		if got := tc.p.CostMicros(tc.in, tc.cached, tc.out); got != tc.want {
			t.Errorf("%+v.CostMicros(%d, %d, %d) = %d, want %d", tc.p, tc.in, tc.cached, tc.out, got, tc.want)
		}
	}
}
