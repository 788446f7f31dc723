package sat

import (
	"math"
	"math/big"
	"testing"
	"testing/quick"
)

// edges are the inputs every function is tested at.
var edges = []int64{0, 1, -1, math.MaxInt64, math.MinInt64, 1<<32 - 1, 1 << 40, 1 << 62, 999_999, 1_000_000}

// want computes f exactly on the clamped inputs and saturates the result.
func want(f func(a, b *big.Int) *big.Int, a, b int64) int64 {
	r := f(big.NewInt(max(a, 0)), big.NewInt(max(b, 0)))
	if r.Sign() < 0 {
		return 0
	}
	if !r.IsInt64() {
		return Max
	}
	return r.Int64()
}

func TestAddSubMulAtEdges(t *testing.T) {
	for _, a := range edges {
		for _, b := range edges {
			if got, w := Add(a, b), want(func(x, y *big.Int) *big.Int { return new(big.Int).Add(x, y) }, a, b); got != w {
				t.Errorf("Add(%d, %d) = %d, want %d", a, b, got, w)
			}
			if got, w := Sub(a, b), want(func(x, y *big.Int) *big.Int { return new(big.Int).Sub(x, y) }, a, b); got != w {
				t.Errorf("Sub(%d, %d) = %d, want %d", a, b, got, w)
			}
			if got, w := Mul(a, b), want(func(x, y *big.Int) *big.Int { return new(big.Int).Mul(x, y) }, a, b); got != w {
				t.Errorf("Mul(%d, %d) = %d, want %d", a, b, got, w)
			}
		}
	}
}

// mulDivWant is ⌈max(a,0)·max(b,0)/max(d,1)⌉, saturated.
func mulDivWant(a, b, d int64) int64 {
	n := new(big.Int).Mul(big.NewInt(max(a, 0)), big.NewInt(max(b, 0)))
	dd := big.NewInt(max(d, 1))
	q, r := new(big.Int).QuoRem(n, dd, new(big.Int))
	if r.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return Max
	}
	return q.Int64()
}

func TestMulDivAtEdges(t *testing.T) {
	for _, a := range edges {
		for _, b := range edges {
			for _, d := range []int64{1_000_000, 1, 0, -1, 3, math.MaxInt64, math.MinInt64} {
				if got, w := MulDiv(a, b, d), mulDivWant(a, b, d); got != w {
					t.Errorf("MulDiv(%d, %d, %d) = %d, want %d", a, b, d, got, w)
				}
			}
		}
	}
}

func TestMulDivCases(t *testing.T) {
	for _, c := range []struct{ a, b, d, want int64 }{
		{0, 10_000_000, 1_000_000, 0},
		{1, 1, 1_000_000, 1},                                 // rounded up
		{1_000_000, 2_500_000, 1_000_000, 2_500_000},         // exact
		{1<<32 - 1, 10_000_000, 1_000_000, 42_949_672_950},   // no overflow in the product
		{1 << 62, 10_000_000, 1_000_000, Max},                // 2^62 × 10 does not fit
		{1 << 40, 10_000_000, 1_000_000, 10_995_116_277_760}, // the product overflows int64, the quotient fits
	} {
		if got := MulDiv(c.a, c.b, c.d); got != c.want || got != mulDivWant(c.a, c.b, c.d) {
			t.Errorf("MulDiv(%d, %d, %d) = %d, want %d", c.a, c.b, c.d, got, c.want)
		}
	}
	// The quotient 2^64 - 1 rounded up must saturate, not wrap to 0.
	if got := MulDiv(math.MaxInt64, math.MaxInt64, 2); got != Max {
		t.Errorf("MulDiv(Max, Max, 2) = %d, want Max", got)
	}
}

func TestProductsRoundOnce(t *testing.T) {
	var p Products
	p.Add(1, 1)
	p.Add(1, 1)
	if got := p.DivUp(2); got != 1 {
		t.Errorf("(1+1)/2 rounded once = %d, want 1", got)
	}
	var s Products
	for range 8 {
		s.Add(math.MaxInt64, math.MaxInt64) // carries out of 128 bits: saturates
	}
	if got := s.DivUp(math.MaxInt64); got != Max {
		t.Errorf("saturated sum / Max = %d, want Max", got)
	}
}

// Over the whole input range: never negative, exact where it fits, and
// monotone in every input.
func TestPropertiesQuick(t *testing.T) {
	cfg := &quick.Config{MaxCount: 20000}
	exact := func(a, b, d int64) bool { return MulDiv(a, b, d) == mulDivWant(a, b, d) }
	if err := quick.Check(exact, cfg); err != nil {
		t.Error(err)
	}
	mono := func(a, b, da, db uint32, d int64) bool {
		a2, b2 := Add(a0(a), int64(da)), Add(a0(b), int64(db))
		x, y := MulDiv(a0(a), a0(b), d), MulDiv(a2, b2, d)
		return x >= 0 && x <= y && Add(a0(a), a0(b)) <= Add(a2, b2) && Mul(a0(a), a0(b)) <= Mul(a2, b2)
	}
	if err := quick.Check(mono, cfg); err != nil {
		t.Error(err)
	}
}

// a0 spreads a uint32 over the int64 range (large values included).
func a0(v uint32) int64 { return int64(v) << (v % 32) }
