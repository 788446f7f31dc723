package policies

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sluicegw/sluice/internal/sat"
	"github.com/sluicegw/sluice/internal/tokens"
)

// TestCost: costs are exact in pico-dollars (1 µ$ = 10⁶ p$): nothing is
// rounded, however small.
func TestCost(t *testing.T) {
	gpt4o := Price{Input: 2_500_000, CachedInput: 1_250_000, Output: 10_000_000}
	for _, tc := range []struct {
		p                     Price
		in, cached, out, want int64
	}{
		{gpt4o, 1_000_000, 0, 0, 2_500_000_000_000},         // $2.50 for 1M input
		{gpt4o, 0, 0, 1_000_000, 10_000_000_000_000},        // $10 for 1M output
		{gpt4o, 1_000_000, 1_000_000, 0, 1_250_000_000_000}, // all cached
		{gpt4o, 10, 0, 20, 225_000_000},                     // 10 × 2.5 µ$ + 20 × 10 µ$ = 225 µ$
		{gpt4o, 1, 0, 0, 2_500_000},                         // 2.5 µ$, not rounded up to 3
		{gpt4o, 0, 0, 0, 0},
		{Price{Input: 3_000_000, Output: 15_000_000}, 100, 40, 0, 300_000_000}, // no cached price: cached at input
		{gpt4o, 10, 50, 0, 12_500_000},                                         // cached clamped to input: 10 × 1.25 µ$
		{gpt4o, -5, 0, 2, 20_000_000},                                          // negatives clamped
		// text-embedding-3-small at $0.02 per 1M: 7 tokens are 0.14 µ$,
		// which rounding up per request would have charged as 1 µ$.
		{Price{Input: 20_000}, 7, 0, 0, 140_000},
		{Price{Input: 1}, 1, 0, 0, 1}, // the smallest price: 1 p$ a token
	} {
		if got := tc.p.Cost(Tokens{tokens.Input: tc.in, tokens.CachedInput: tc.cached, tokens.Output: tc.out}); got != tc.want {
			t.Errorf("%+v.Cost(in %d, cached %d, out %d) = %d p$, want %d", tc.p, tc.in, tc.cached, tc.out, got, tc.want)
		}
	}
}

func TestCostSaturates(t *testing.T) {
	const maxInt = math.MaxInt64
	expensive := Price{Input: 10_000_000, Output: 10_000_000}
	for _, tc := range []struct {
		name                  string
		p                     Price
		in, cached, out, want int64
	}{
		// max_tokens 2^32-1 × n 1000 at $10 per 1M: the product of tokens
		// and price overflows int64, the cost does not.
		{"reservation", expensive, 0, 0, (1<<32 - 1) * 10, 429_496_729_500_000_000},
		// A provider reporting 2^40 tokens each way: $22M, more than an
		// int64 of pico-dollars holds.
		{"2^40 tokens", expensive, 1 << 40, 0, 1 << 40, maxInt},
		{"2^62 tokens", expensive, 0, 0, 1 << 62, maxInt},
		{"max tokens", expensive, maxInt, maxInt, maxInt, maxInt},
		{"max price", Price{Output: maxInt}, 0, 0, 1, maxInt},
		{"max price, one token less than it", Price{Output: maxInt - 1}, 0, 0, 1, maxInt - 1},
		{"per-request fee", Price{Input: 1_000_000, PerRequest: 7}, 3, 0, 0, 10_000_000},
		{"fee alone", Price{PerRequest: 7}, 0, 0, 0, 7_000_000},
		{"fee saturates", Price{PerRequest: maxInt}, 0, 0, 0, maxInt},
		{"fee and tokens saturate together", Price{Output: maxInt/2 + 1, PerRequest: (maxInt/2+1)/1_000_000 + 1}, 0, 0, 1, maxInt},
		{"min tokens", expensive, math.MinInt64, math.MinInt64, math.MinInt64, 0},
		{"negative prices count as 0", Price{Input: -1, Output: math.MinInt64, PerRequest: -1}, 5, 0, 5, 0},
	} {
		if got := tc.p.Cost(Tokens{tokens.Input: tc.in, tokens.CachedInput: tc.cached, tokens.Output: tc.out}); got != tc.want {
			t.Errorf("%s: %+v.Cost(in %d, cached %d, out %d) = %d, want %d", tc.name, tc.p, tc.in, tc.cached, tc.out, got, tc.want)
		}
	}
}

// reserved is the worst case ext_proc reserves: the prompt estimate and
// max_tokens × n output tokens, at price p, in pico-dollars.
func reserved(p Price, input, maxTokens, n int64) int64 {
	return p.Cost(Tokens{tokens.Input: input, tokens.Output: sat.Mul(maxTokens, n)})
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
		base := reserved(p, input, maxTokens, n)
		if base < 0 {
			t.Fatalf("reserved %d < 0 for %+v, input %d, max_tokens %d, n %d", base, p, input, maxTokens, n)
		}
		if parts := sat.Mul(fee, 1_000_000); base < parts {
			t.Fatalf("reserved %d below the per-request fee %d", base, parts)
		}
		if exact := sat.Mul(sat.Mul(maxTokens, n), pOut); base < exact {
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
		if more := reserved(q, in2, mt2, n2); more < base {
			t.Fatalf("not monotone: %+v input %d max_tokens %d n %d reserves %d, but %+v input %d max_tokens %d n %d reserves %d",
				p, input, maxTokens, n, base, q, in2, mt2, n2, more)
		}
	})
}

// TestWorstCostBoundsCost: whatever way a provider divides a request's
// tokens into kinds, its cost is at most the worst case reserved for the
// request's totals — with cache writes allowed, and without when the
// division has none — at prices with every kind set, defaulted or dearer
// than the base, long-context tier included.
func TestWorstCostBoundsCost(t *testing.T) {
	p := func(v int64) *int64 { return &v }
	prices := []Price{
		{Input: 3_000_000, Output: 15_000_000},
		{Input: 3_000_000, CachedInput: 300_000, Output: 15_000_000, PerRequest: 7},
		{Input: 1_000_000, Output: 2_000_000, AudioInput: p(40_000_000), AudioOutput: p(80_000_000), Reasoning: p(9_000_000), CacheWrite: p(5_000_000), CacheWrite1h: p(1)},
		{Input: 3_000_000, Output: 15_000_000, LongContext: &LongContext{AboveInputTokens: 100, Input: p(6_000_000), Output: p(22_500_000)}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i, pr := range prices {
		for range 20000 {
			in, out := rng.Int64N(300), rng.Int64N(300)
			part := func(n int64) int64 { return rng.Int64N(n + 1) }
			tk := Tokens{tokens.Input: in, tokens.CachedInput: part(in), tokens.CacheWrite: part(in), tokens.AudioInput: part(in), tokens.Output: out, tokens.Reasoning: part(out), tokens.AudioOutput: part(out)}
			tk[tokens.CacheWrite1h] = part(tk[tokens.CacheWrite])
			if c, w := pr.Cost(tk), pr.WorstCost(in, out, true); c > w {
				t.Fatalf("price %d: Cost(%+v) = %d > WorstCost = %d", i, tk, c, w)
			}
			tk[tokens.CacheWrite], tk[tokens.CacheWrite1h] = 0, 0
			if c, w := pr.Cost(tk), pr.WorstCost(in, out, false); c > w {
				t.Fatalf("price %d: Cost(%+v) = %d > WorstCost without cache writes = %d", i, tk, c, w)
			}
		}
	}
	// Exact: 10 prompt tokens at the 1-hour write rate (2 × $3), 5 output
	// tokens at $15, and without cache writes the prompt at $3.
	if got := prices[0].WorstCost(10, 5, true); got != 10*6_000_000+5*15_000_000 {
		t.Errorf("WorstCost with cache writes = %d", got)
	}
	if got := prices[0].WorstCost(10, 5, false); got != 10*3_000_000+5*15_000_000 {
		t.Errorf("WorstCost without = %d", got)
	}
	if got := prices[0].WorstCost(math.MaxInt64, math.MaxInt64, true); got != math.MaxInt64 {
		t.Errorf("WorstCost at 2^63-1 tokens = %d, want saturated", got)
	}
	if got := prices[0].WorstCost(-5, -5, true); got != 0 {
		t.Errorf("WorstCost of negative counts = %d, want 0", got)
	}
}
