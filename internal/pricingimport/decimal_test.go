package pricingimport

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestScale(t *testing.T) {
	const perToken, perRequest = 12, 6
	tests := []struct {
		num   string
		shift int
		limit int64
		want  int64
		err   error
	}{
		{"2.5e-06", perToken, maxPerToken, 2_500_000, nil},
		{"1.25e-7", perToken, maxPerToken, 125_000, nil},
		{"0.0000025", perToken, maxPerToken, 2_500_000, nil},
		{"2500000e-12", perToken, maxPerToken, 2_500_000, nil},
		{"1.5E-05", perToken, maxPerToken, 15_000_000, nil},
		{"1e-12", perToken, maxPerToken, 1, nil},
		{"0.1e-11", perToken, maxPerToken, 1, nil},
		{"3.75e-06", perToken, maxPerToken, 3_750_000, nil},
		{"2.1875e-06", perToken, maxPerToken, 2_187_500, nil},
		{"5.46875e-07", perToken, maxPerToken, 546_875, nil},
		{"6.25e-09", perToken, maxPerToken, 6_250, nil},
		{"1", perToken, maxPerToken, maxPerToken, nil},
		{"1.000000000000", perToken, maxPerToken, maxPerToken, nil},
		{"0", perToken, maxPerToken, 0, nil},
		{"0.0", perToken, maxPerToken, 0, nil},
		{"-0", perToken, maxPerToken, 0, nil},
		{"-0.0e-5", perToken, maxPerToken, 0, nil},
		{"0e999999999999999999999", perToken, maxPerToken, 0, nil},
		{"0.005", perRequest, maxPerRequest, 5_000, nil},
		{"1000", perRequest, maxPerRequest, maxPerRequest, nil},
		{"1e+3", perRequest, maxPerRequest, maxPerRequest, nil},
		// Finer than the unit: never rounded.
		{"1e-13", perToken, maxPerToken, 0, errTooFine},
		{"1.5e-13", perToken, maxPerToken, 0, errTooFine},
		{"2.5000000000001e-06", perToken, maxPerToken, 0, errTooFine},
		{"1.0000000000001", perToken, maxPerToken, 0, errTooFine},
		{"123456789012345678901234567890e-30", perToken, maxPerToken, 0, errTooFine},
		{"1e-400", perToken, maxPerToken, 0, errTooFine},
		{"1e-9223372036854775808", perToken, maxPerToken, 0, errTooFine},
		{"1e-7", perRequest, maxPerRequest, 0, errTooFine},
		// Negative.
		{"-1e-06", perToken, maxPerToken, 0, errNegative},
		{"-0.000000000001", perToken, maxPerToken, 0, errNegative},
		{"-1e-400", perToken, maxPerToken, 0, errNegative},
		// Absurd.
		{"1.000000000001", perToken, maxPerToken, 0, errTooLarge},
		{"2", perToken, maxPerToken, 0, errTooLarge},
		{"1e400", perToken, maxPerToken, 0, errTooLarge},
		{"9223372036854775807", 0, 1<<63 - 1, 1<<63 - 1, nil},
		{"9223372036854775808", 0, 1<<63 - 1, 0, errTooLarge},
		{"99999999999999999999", 0, 1<<63 - 1, 0, errTooLarge},
		{"1e9223372036854775808", perToken, maxPerToken, 0, errTooLarge},
		{"1000.000001", perRequest, maxPerRequest, 0, errTooLarge},
		// Not JSON numbers.
		{"", perToken, maxPerToken, 0, errNotNumber},
		{"-", perToken, maxPerToken, 0, errNotNumber},
		{"+1", perToken, maxPerToken, 0, errNotNumber},
		{"01", perToken, maxPerToken, 0, errNotNumber},
		{".5", perToken, maxPerToken, 0, errNotNumber},
		{"1.", perToken, maxPerToken, 0, errNotNumber},
		{"1e", perToken, maxPerToken, 0, errNotNumber},
		{"1e+", perToken, maxPerToken, 0, errNotNumber},
		{"1x", perToken, maxPerToken, 0, errNotNumber},
		{`"2.5e-06"`, perToken, maxPerToken, 0, errNotNumber},
		{"NaN", perToken, maxPerToken, 0, errNotNumber},
		{"Infinity", perToken, maxPerToken, 0, errNotNumber},
		{"0x10", perToken, maxPerToken, 0, errNotNumber},
		{"1_000", perToken, maxPerToken, 0, errNotNumber},
	}
	for _, tt := range tests {
		got, err := scale([]byte(tt.num), tt.shift, tt.limit)
		if got != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("scale(%s, %d) = %d, %v; want %d, %v", tt.num, tt.shift, got, err, tt.want, tt.err)
		}
	}
}

// exactScale is scale computed with math/big, for the property tests:
// the value and whether it is a whole number in [0, limit].
func exactScale(num string, shift int, limit int64) (int64, error) {
	mant, exp, _ := strings.Cut(strings.ToLower(num), "e")
	r, ok := new(big.Rat).SetString(mant)
	if !ok {
		return 0, errNotNumber
	}
	e := int64(shift)
	if exp != "" {
		n, ok := new(big.Int).SetString(strings.TrimPrefix(exp, "+"), 10)
		if !ok {
			return 0, errNotNumber
		}
		if !n.IsInt64() || n.Int64() > 1e6 || n.Int64() < -1e6 {
			switch {
			case r.Sign() == 0:
				return 0, nil
			case r.Sign() < 0:
				return 0, errNegative
			case n.Sign() > 0:
				return 0, errTooLarge
			}
			return 0, errTooFine
		}
		e += n.Int64()
	}
	p := new(big.Int).Exp(big.NewInt(10), big.NewInt(max(e, -e)), nil)
	if e >= 0 {
		r.Mul(r, new(big.Rat).SetInt(p))
	} else {
		r.Quo(r, new(big.Rat).SetInt(p))
	}
	switch {
	case r.Sign() == 0:
		return 0, nil
	case r.Sign() < 0:
		return 0, errNegative
	case !r.IsInt():
		return 0, errTooFine
	case !r.Num().IsInt64() || r.Num().Int64() > limit:
		return 0, errTooLarge
	}
	return r.Num().Int64(), nil
}

// randomNumber writes a random JSON number: digits, a fraction, an
// exponent, each of varied length, with zeros often.
func randomNumber(rng *rand.Rand) string {
	digits := func(n int, lead bool) string {
		var b strings.Builder
		for i := range n {
			d := rng.IntN(10)
			if rng.IntN(3) == 0 {
				d = 0
			}
			if i == 0 && lead && d == 0 {
				d = 1 + rng.IntN(9)
			}
			b.WriteByte(byte('0' + d))
		}
		return b.String()
	}
	var s string
	if rng.IntN(4) == 0 {
		s = "-"
	}
	if rng.IntN(3) == 0 {
		s += "0"
	} else {
		s += digits(1+rng.IntN(12), true)
	}
	if rng.IntN(2) == 0 {
		s += "." + digits(1+rng.IntN(20), false)
	}
	if rng.IntN(2) == 0 {
		s += [...]string{"e", "E", "e+", "e-", "E-"}[rng.IntN(5)] + fmt.Sprint(rng.IntN(30))
	}
	return s
}

// TestScaleAgreesWithBig: on random JSON numbers, scale gives math/big's
// exact answer for both units.
func TestScaleAgreesWithBig(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		checkScale(t, randomNumber(rng))
	}
}

func checkScale(t *testing.T, num string) {
	t.Helper()
	isNumber := num != "" && (num[0] == '-' || num[0] >= '0' && num[0] <= '9') &&
		strings.TrimSpace(num) == num && json.Valid([]byte(num))
	for _, u := range []struct {
		shift int
		limit int64
	}{{12, maxPerToken}, {6, maxPerRequest}, {0, 1<<63 - 1}} {
		got, err := scale([]byte(num), u.shift, u.limit)
		want, wantErr := exactScale(num, u.shift, u.limit)
		if errors.Is(err, errNotNumber) == isNumber {
			t.Fatalf("scale(%q): %v, but JSON number: %v", num, err, isNumber)
		}
		if !isNumber {
			continue
		}
		if got != want || !errors.Is(err, wantErr) {
			t.Fatalf("scale(%s, %d) = %d, %v; math/big says %d, %v", num, u.shift, got, err, want, wantErr)
		}
	}
}

// FuzzScale: any text, as a price, converts as math/big computes it, or
// is refused as no JSON number.
func FuzzScale(f *testing.F) {
	for _, s := range []string{"2.5e-06", "1.25e-7", "0", "-0.0", "1e-13", "1e400", "9223372036854775808", "1.000000000001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, num string) {
		checkScale(t, num)
	})
}
