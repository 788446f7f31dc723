package pricingimport

import (
	"errors"
	"strconv"
)

// Why a value cannot be a Sluice price.
var (
	errNotNumber = errors.New("not a number")
	errNegative  = errors.New("negative")
	errTooFine   = errors.New("finer than the unit")
	errTooLarge  = errors.New("too large")
)

// maxExp bounds a parsed exponent's magnitude. The input is bounded far
// below it, so a saturated exponent still judges every number exactly:
// no mantissa has enough digits to bring it back into range.
const maxExp = 1 << 40

// scale returns the JSON number written in num times 10^shift, when that
// is a whole number in [0, limit]: the decimal text is read digit by
// digit, so the result is exact (no float64 is involved). -0 and 0e99
// are 0.
func scale(num []byte, shift int, limit int64) (int64, error) {
	i := 0
	neg := i < len(num) && num[i] == '-'
	if neg {
		i++
	}
	digitsFrom := i
	switch {
	case i < len(num) && num[i] == '0':
		i++
	case i < len(num) && num[i] >= '1' && num[i] <= '9':
		for i < len(num) && isDigit(num[i]) {
			i++
		}
	default:
		return 0, errNotNumber
	}
	intPart := num[digitsFrom:i]
	var frac []byte
	if i < len(num) && num[i] == '.' {
		i++
		from := i
		for i < len(num) && isDigit(num[i]) {
			i++
		}
		if i == from {
			return 0, errNotNumber
		}
		frac = num[from:i]
	}
	var exp int64
	if i < len(num) && (num[i] == 'e' || num[i] == 'E') {
		i++
		expNeg := false
		if i < len(num) && (num[i] == '+' || num[i] == '-') {
			expNeg = num[i] == '-'
			i++
		}
		from := i
		for ; i < len(num) && isDigit(num[i]); i++ {
			if exp < maxExp {
				exp = exp*10 + int64(num[i]-'0')
			}
		}
		if i == from {
			return 0, errNotNumber
		}
		exp = min(exp, maxExp)
		if expNeg {
			exp = -exp
		}
	}
	if i != len(num) {
		return 0, errNotNumber
	}
	// The value is digits × 10^e, digits being the integer and fraction
	// digits run together.
	digits := make([]byte, 0, len(intPart)+len(frac))
	digits = append(append(digits, intPart...), frac...)
	e := exp - int64(len(frac)) + int64(shift)
	for len(digits) > 0 && digits[0] == '0' {
		digits = digits[1:]
	}
	if len(digits) == 0 {
		return 0, nil
	}
	if neg {
		return 0, errNegative
	}
	for len(digits) > 0 && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
		e++
	}
	if e < 0 {
		return 0, errTooFine
	}
	if int64(len(digits))+e > 19 {
		return 0, errTooLarge // at least 10^19, beyond int64
	}
	v, err := strconv.ParseInt(string(digits), 10, 64)
	if err != nil {
		return 0, errTooLarge
	}
	for ; e > 0; e-- {
		if v > limit/10 {
			return 0, errTooLarge
		}
		v *= 10
	}
	if v > limit {
		return 0, errTooLarge
	}
	return v, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
