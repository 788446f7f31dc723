package policies

import (
	"math"
	"testing"

	"github.com/sluicegw/sluice/internal/sat"
)

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

func TestCostMicrosSaturates(t *testing.T) {
	const maxInt = math.MaxInt64
	expensive := Price{Input: 10_000_000, Output: 10_000_000}
	for _, tc := range []struct {
		name                  string
		p                     Price
		in, cached, out, want int64
	}{
		// max_tokens 2^32-1 × n 1000 at $10 per 1M: the product of tokens
		// and price overflows int64, the cost does not.
		{"reservation", expensive, 0, 0, (1<<32 - 1) * 1000, 42_949_672_950_000},
		// A provider reporting 2^40 tokens.
		{"2^40 tokens", expensive, 1 << 40, 0, 1 << 40, 21_990_232_555_520},
		{"2^62 tokens", expensive, 0, 0, 1 << 62, maxInt},
		{"max tokens", expensive, maxInt, maxInt, maxInt, maxInt},
		{"max price", Price{Output: maxInt}, 0, 0, 2_000_000, maxInt},
		{"per-request fee", Price{Input: 1_000_000, PerRequest: 7}, 3, 0, 0, 10},
		{"fee alone", Price{PerRequest: 7}, 0, 0, 0, 7},
		{"fee saturates", Price{Output: maxInt, PerRequest: maxInt}, 0, 0, 1, maxInt},
		{"min tokens", expensive, math.MinInt64, math.MinInt64, math.MinInt64, 0},
	} {
		if got := tc.p.CostMicros(tc.in, tc.cached, tc.out); got != tc.want {
			t.Errorf("%s: %+v.CostMicros(%d, %d, %d) = %d, want %d", tc.name, tc.p, tc.in, tc.cached, tc.out, got, tc.want)
		}
	}
}

// reservedMicros is the worst case ext_proc reserves: the prompt estimate
// and max_tokens × n output tokens, at price p.
func reservedMicros(p Price, input, maxTokens, n int64) int64 {
	return p.CostMicros(input, 0, sat.Mul(maxTokens, n))
}

// FuzzCost checks, over the whole int64 range, that the reserved cost is
// never negative, never below any of its parts, and monotone in every
// input: more prompt, more output, more choices or a higher price never
// reserves less.
func FuzzCost(f *testing.F) {
	f.Add(int64(10), int64(20), int64(1), int64(2_500_000), int64(10_000_000), int64(0), uint64(1), uint8(0))
	f.Add(int64(0), int64(1<<32-1), int64(1000), int64(10_000_000), int64(10_000_000), int64(5), uint64(1<<40), uint8(2))
	f.Fuzz(func(t *testing.T, input, maxTokens, n, pIn, pOut, fee int64, delta uint64, which uint8) {
		p := Price{Input: pIn, Output: pOut, PerRequest: fee}
		base := reservedMicros(p, input, maxTokens, n)
		if base < 0 {
			t.Fatalf("reserved %d < 0 for %+v, input %d, max_tokens %d, n %d", base, p, input, maxTokens, n)
		}
		if parts := max(fee, 0); base < parts {
			t.Fatalf("reserved %d below the per-request fee %d", base, parts)
		}
		if exact := sat.MulDiv(sat.Mul(maxTokens, n), pOut, 1_000_000); base < exact {
			t.Fatalf("reserved %d below the output's own cost %d", base, exact)
		}
		d := int64(delta >> 1) // non-negative
		q, in2, mt2, n2 := p, input, maxTokens, n
		switch which % 6 {
		case 0:
			in2 = sat.Add(input, d)
		case 1:
			mt2 = sat.Add(max(maxTokens, 0), d)
		case 2:
			n2 = sat.Add(max(n, 0), d)
		case 3:
			q.Input = sat.Add(max(pIn, 0), d)
		case 4:
			q.Output = sat.Add(max(pOut, 0), d)
		case 5:
			q.PerRequest = sat.Add(max(fee, 0), d)
		}
		if more := reservedMicros(q, in2, mt2, n2); more < base {
			t.Fatalf("not monotone: %+v input %d max_tokens %d n %d reserves %d, but %+v input %d max_tokens %d n %d reserves %d",
				p, input, maxTokens, n, base, q, in2, mt2, n2, more)
		}
	})
}
