package money

import (
	"fmt"
	"math"
	"strconv"
)

// PicoPerMicro is the number of pico-dollars in a micro-dollar.
const PicoPerMicro = 1_000_000

// Sum is an exact, non-negative amount of money: whole micro-dollars and
// the pico-dollars beyond them (fewer than PicoPerMicro). The zero value
// is $0. Its fields are unexported so that it is always normalized; two
// Sums are equal (== and Equal) exactly when the amounts are.
type Sum struct {
	micros int64 // ≥ 0
	pico   int64 // in [0, PicoPerMicro)
}

// Max is the largest Sum, what a sum that does not fit saturates to:
// math.MaxInt64 micro-dollars and 999,999 pico-dollars.
var Max = Sum{math.MaxInt64, PicoPerMicro - 1}

// FromPico is p pico-dollars; a negative p is 0.
func FromPico(p int64) Sum {
	if p <= 0 {
		return Sum{}
	}
	return Sum{p / PicoPerMicro, p % PicoPerMicro}
}

// FromMicros is m micro-dollars; a negative m is 0.
func FromMicros(m int64) Sum {
	return Sum{max(m, 0), 0}
}

// FromParts is micros micro-dollars plus pico pico-dollars, where pico may
// be PicoPerMicro or more (a sum of remainders), saturated at Max; a
// negative part is 0.
func FromParts(micros, pico int64) Sum {
	s, ok := FromMicros(micros).Plus(FromPico(pico))
	if !ok {
		return Max
	}
	return s
}

// Plus is s + o, and false (with Max) if the sum does not fit in a Sum.
func (s Sum) Plus(o Sum) (Sum, bool) {
	p := s.pico + o.pico // < 2 × PicoPerMicro
	carry := p / PicoPerMicro
	if s.micros > math.MaxInt64-o.micros || s.micros+o.micros > math.MaxInt64-carry {
		return Max, false
	}
	return Sum{s.micros + o.micros + carry, p % PicoPerMicro}, true
}

// Add is s + o, saturated at Max.
func (s Sum) Add(o Sum) Sum {
	r, _ := s.Plus(o)
	return r
}

// AddPico is s + p pico-dollars, saturated at Max; a negative p is 0.
func (s Sum) AddPico(p int64) Sum { return s.Add(FromPico(p)) }

// Sub is s − o, or 0 when o ≥ s: what is left of s after o.
func (s Sum) Sub(o Sum) Sum {
	if s.Cmp(o) <= 0 {
		return Sum{}
	}
	m, p := s.micros-o.micros, s.pico-o.pico
	if p < 0 {
		m, p = m-1, p+PicoPerMicro
	}
	return Sum{m, p}
}

// Cmp is -1, 0 or +1 as s is less than, equal to or more than o.
func (s Sum) Cmp(o Sum) int {
	switch {
	case s.micros != o.micros:
		if s.micros < o.micros {
			return -1
		}
		return 1
	case s.pico < o.pico:
		return -1
	case s.pico > o.pico:
		return 1
	}
	return 0
}

// Equal reports whether s and o are the same amount (for go-cmp).
func (s Sum) Equal(o Sum) bool { return s == o }

// IsZero reports whether s is $0.
func (s Sum) IsZero() bool { return s == Sum{} }

// Micros is the whole micro-dollars of s: s rounded down.
func (s Sum) Micros() int64 { return s.micros }

// Remainder is the pico-dollars of s beyond Micros, in [0, PicoPerMicro).
func (s Sum) Remainder() int64 { return s.pico }

// MicrosDown is s in micro-dollars rounded down (what is surely there).
func (s Sum) MicrosDown() int64 { return s.micros }

// MicrosUp is s in micro-dollars rounded up (never less than s), saturated
// at math.MaxInt64.
func (s Sum) MicrosUp() int64 {
	if s.pico > 0 && s.micros < math.MaxInt64 {
		return s.micros + 1
	}
	return s.micros
}

// Pico is s in pico-dollars, saturated at math.MaxInt64 (about $9.2M).
func (s Sum) Pico() int64 {
	if s.micros > (math.MaxInt64-s.pico)/PicoPerMicro {
		return math.MaxInt64
	}
	return s.micros*PicoPerMicro + s.pico
}

// PicoString is s in pico-dollars as an exact decimal integer, however
// large ("137450000" for 137.45 µ$).
func (s Sum) PicoString() string {
	if s.micros == 0 {
		return strconv.FormatInt(s.pico, 10)
	}
	return fmt.Sprintf("%d%06d", s.micros, s.pico)
}

// MicrosUpString is s in micro-dollars rounded up, as an exact decimal
// integer: MicrosUp, except that it does not saturate (the largest Sum
// rounds up to 2^63 micro-dollars, one past an int64).
func (s Sum) MicrosUpString() string {
	return strconv.FormatUint(s.microsUp(), 10)
}

// microsUp is s in micro-dollars rounded up; it fits a uint64 (micros is
// at most math.MaxInt64).
func (s Sum) microsUp() uint64 {
	m := uint64(s.micros)
	if s.pico > 0 {
		m++
	}
	return m
}

// DollarsUp is s in dollars with six decimals, rounded up to the
// micro-dollar (a cost is shown as no less than it is): "0.000138".
func (s Sum) DollarsUp() string {
	m := s.microsUp()
	return fmt.Sprintf("%d.%06d", m/PicoPerMicro, m%PicoPerMicro)
}

// String is s in dollars, exactly, with twelve decimals: "$0.000137450000".
func (s Sum) String() string {
	return fmt.Sprintf("$%d.%06d%06d", s.micros/PicoPerMicro, s.micros%PicoPerMicro, s.pico)
}
