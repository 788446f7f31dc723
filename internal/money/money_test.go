package money

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

// exact is s as a big integer of pico-dollars.
func exact(s Sum) *big.Int {
	v := new(big.Int).Mul(big.NewInt(s.Micros()), big.NewInt(PicoPerMicro))
	return v.Add(v, big.NewInt(s.Remainder()))
}

// fromBig is the Sum of v pico-dollars, or Max if v does not fit.
func fromBig(v *big.Int) Sum {
	if v.Sign() <= 0 {
		return Sum{}
	}
	if v.Cmp(exact(Max)) >= 0 {
		return Max
	}
	q, r := new(big.Int).QuoRem(v, big.NewInt(PicoPerMicro), new(big.Int))
	return Sum{q.Int64(), r.Int64()}
}

var edges = []int64{0, 1, -1, 999_999, 1_000_000, 1_000_001, math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, 140_000}

func TestFromPicoAndParts(t *testing.T) {
	for _, p := range edges {
		want := fromBig(big.NewInt(max(p, 0)))
		if got := FromPico(p); got != want {
			t.Errorf("FromPico(%d) = %v, want %v", p, got, want)
		}
		if got := FromPico(p); got.Remainder() < 0 || got.Remainder() >= PicoPerMicro {
			t.Errorf("FromPico(%d) remainder %d out of range", p, got.Remainder())
		}
		for _, m := range edges {
			v := new(big.Int).Mul(big.NewInt(max(m, 0)), big.NewInt(PicoPerMicro))
			v.Add(v, big.NewInt(max(p, 0)))
			if got, want := FromParts(m, p), fromBig(v); got != want {
				t.Errorf("FromParts(%d, %d) = %v, want %v", m, p, got, want)
			}
		}
	}
	if got := FromMicros(-5); !got.IsZero() {
		t.Errorf("FromMicros(-5) = %v, want 0", got)
	}
}

// TestArithmeticExact compares Plus, Add, Sub, Cmp, the roundings and Pico
// with big integers, at the edges and at random.
func TestArithmeticExact(t *testing.T) {
	var sums []Sum
	for _, m := range edges {
		for _, p := range []int64{0, 1, 999_999} {
			sums = append(sums, FromParts(m, p))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		sums = append(sums, FromParts(rng.Int64N(1<<62), rng.Int64N(PicoPerMicro)), FromPico(rng.Int64()))
	}
	maxInt := big.NewInt(math.MaxInt64)
	for _, a := range sums {
		for _, b := range sums {
			total := new(big.Int).Add(exact(a), exact(b))
			got, ok := a.Plus(b)
			if fits := total.Cmp(exact(Max)) <= 0; ok != fits || (ok && got != fromBig(total)) || (!ok && got != Max) {
				t.Fatalf("%v.Plus(%v) = %v, %v; want %v (fits %v)", a, b, got, ok, fromBig(total), fits)
			}
			if got := a.Add(b); got != fromBig(total) {
				t.Fatalf("%v.Add(%v) = %v, want %v", a, b, got, fromBig(total))
			}
			if got, want := a.Sub(b), fromBig(new(big.Int).Sub(exact(a), exact(b))); got != want {
				t.Fatalf("%v.Sub(%v) = %v, want %v", a, b, got, want)
			}
			if got, want := a.Cmp(b), exact(a).Cmp(exact(b)); got != want {
				t.Fatalf("%v.Cmp(%v) = %d, want %d", a, b, got, want)
			}
		}
		up := new(big.Int).Add(exact(a), big.NewInt(PicoPerMicro-1))
		up.Quo(up, big.NewInt(PicoPerMicro))
		if up.Cmp(maxInt) > 0 {
			up = maxInt
		}
		if got := a.MicrosUp(); got != up.Int64() {
			t.Fatalf("%v.MicrosUp() = %d, want %d", a, got, up)
		}
		if got, want := a.MicrosDown(), new(big.Int).Quo(exact(a), big.NewInt(PicoPerMicro)).Int64(); got != want {
			t.Fatalf("%v.MicrosDown() = %d, want %d", a, got, want)
		}
		pico := exact(a)
		if pico.Cmp(maxInt) > 0 {
			pico = maxInt
		}
		if got := a.Pico(); got != pico.Int64() {
			t.Fatalf("%v.Pico() = %d, want %d", a, got, pico)
		}
		if got, want := a.PicoString(), exact(a).String(); got != want {
			t.Fatalf("%v.PicoString() = %s, want %s", a, got, want)
		}
	}
}

func TestFormats(t *testing.T) {
	for _, tt := range []struct {
		s          Sum
		pico, usd  string
		dollarsUp  string
		up, down   int64
		picoSat    int64
		isZero     bool
		micros, rm int64
	}{
		{Sum{}, "0", "$0.000000000000", "0.000000", 0, 0, 0, true, 0, 0},
		{FromPico(140_000), "140000", "$0.000000140000", "0.000001", 1, 0, 140_000, false, 0, 140_000},
		{FromPico(137_450_000), "137450000", "$0.000137450000", "0.000138", 138, 137, 137_450_000, false, 137, 450_000},
		{FromMicros(2_500_000), "2500000000000", "$2.500000000000", "2.500000", 2_500_000, 2_500_000, 2_500_000_000_000, false, 2_500_000, 0},
		{Max, "9223372036854775807999999", "$9223372036854.775807999999", "9223372036854.775808", math.MaxInt64, math.MaxInt64, math.MaxInt64, false, math.MaxInt64, 999_999},
	} {
		if got := tt.s.PicoString(); got != tt.pico {
			t.Errorf("PicoString = %s, want %s", got, tt.pico)
		}
		if got := tt.s.String(); got != tt.usd {
			t.Errorf("String = %s, want %s", got, tt.usd)
		}
		if got := tt.s.DollarsUp(); got != tt.dollarsUp {
			t.Errorf("DollarsUp = %s, want %s", got, tt.dollarsUp)
		}
		// MicrosUp unsaturated: the dollars' digits without the point.
		if got, want := tt.s.MicrosUpString(), strings.TrimLeft(strings.Replace(tt.dollarsUp, ".", "", 1), "0"); got != want && !(got == "0" && want == "") {
			t.Errorf("MicrosUpString = %s, want %s", got, want)
		}
		if tt.s.MicrosUp() != tt.up || tt.s.MicrosDown() != tt.down || tt.s.Pico() != tt.picoSat || tt.s.IsZero() != tt.isZero ||
			tt.s.Micros() != tt.micros || tt.s.Remainder() != tt.rm {
			t.Errorf("%v: up %d down %d pico %d zero %v parts %d+%d", tt.s, tt.s.MicrosUp(), tt.s.MicrosDown(), tt.s.Pico(), tt.s.IsZero(), tt.s.Micros(), tt.s.Remainder())
		}
	}
}

// TestManyTinyCostsExact: a million costs of 0.14 µ$ and one of 1 p$ sum
// to exactly 140,000,000,001 p$, where rounding each up to 1 µ$ would have
// counted $1.
func TestManyTinyCostsExact(t *testing.T) {
	var s Sum
	for range 1_000_000 {
		s = s.AddPico(140_000)
	}
	s = s.AddPico(1)
	if got := s.PicoString(); got != "140000000001" {
		t.Errorf("sum = %s p$, want 140000000001", got)
	}
}
