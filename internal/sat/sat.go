package sat

import (
	"math"
	"math/bits"
)

// Max is what a result that does not fit in an int64 saturates to.
const Max = math.MaxInt64

// clamp is v, or 0 when v is negative.
func clamp(v int64) uint64 {
	if v < 0 {
		return 0
	}
	return uint64(v)
}

// Add is a + b, saturated at Max; negative inputs count as 0.
func Add(a, b int64) int64 {
	s := clamp(a) + clamp(b) // both < 2^63: no uint64 overflow
	if s > Max {
		return Max
	}
	return int64(s)
}

// Sub is a − b, or 0 when b ≥ a (what is left of a after b); negative
// inputs count as 0.
func Sub(a, b int64) int64 {
	x, y := clamp(a), clamp(b)
	if y >= x {
		return 0
	}
	return int64(x - y)
}

// Mul is a × b, saturated at Max; negative inputs count as 0.
func Mul(a, b int64) int64 {
	hi, lo := bits.Mul64(clamp(a), clamp(b))
	if hi != 0 || lo > Max {
		return Max
	}
	return int64(lo)
}

// MulDiv is a × b / d rounded up (tokens × price-per-million / 1e6),
// computed exactly and saturated at Max; negative a or b count as 0, and d
// below 1 counts as 1.
func MulDiv(a, b, d int64) int64 {
	var s Products
	s.Add(a, b)
	return s.DivUp(d)
}

// Products is a sum of products, held exactly in 128 bits (saturating
// there, far beyond what DivUp can return), for costs with several terms
// that must be rounded once. The zero value is an empty sum.
type Products struct{ hi, lo uint64 }

// Add adds a × b to the sum; negative inputs count as 0.
func (p *Products) Add(a, b int64) {
	hi, lo := bits.Mul64(clamp(a), clamp(b)) // < 2^126
	var c uint64
	p.lo, c = bits.Add64(p.lo, lo, 0)
	p.hi, c = bits.Add64(p.hi, hi, c)
	if c != 0 {
		p.hi, p.lo = math.MaxUint64, math.MaxUint64
	}
}

// DivUp is the sum divided by d, rounded up, saturated at Max; d below 1
// counts as 1.
func (p Products) DivUp(d int64) int64 {
	dd := uint64(max(d, 1))
	if p.hi >= dd {
		return Max // the quotient needs more than 64 bits
	}
	q, r := bits.Div64(p.hi, p.lo, dd)
	if q >= Max && (q > Max || r != 0) {
		return Max
	}
	if r != 0 {
		q++
	}
	return int64(q)
}
