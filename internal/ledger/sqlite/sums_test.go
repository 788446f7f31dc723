package sqlite

import (
	"math"
	"testing"

	"github.com/sluicegw/sluice/internal/money"
)

// TestSumsPlus: an aggregate's sums add up to their maximum exactly
// (math.MaxInt64, and for the cost money.Max), and refuse one more, in
// each of their five counts alone; the cost's pico-dollars carry.
func TestSumsPlus(t *testing.T) {
	const m = math.MaxInt64
	p := money.FromPico
	for _, tt := range []struct {
		name      string
		have, add sums
		ok        bool
	}{
		{"small", sums{p(1), 2, 3, 4, 5}, sums{p(1), 1, 1, 1, 1}, true},
		{"pico-dollars carry", sums{cost: p(999_999)}, sums{cost: p(1)}, true},
		{"cost to the maximum", sums{cost: money.Max.Sub(p(1))}, sums{cost: p(1)}, true},
		{"cost past it", sums{cost: money.Max}, sums{cost: p(1)}, false},
		{"cost past an int64 of pico-dollars", sums{cost: p(m)}, sums{cost: p(m)}, true},
		{"input past it", sums{input: m}, sums{input: 1}, false},
		{"cached input past it", sums{cachedInput: m}, sums{cachedInput: 1}, false},
		{"output past it", sums{output: m}, sums{output: 1}, false},
		{"requests past it", sums{requests: m}, sums{requests: 1}, false},
		{"every count to the maximum", sums{money.Max.Sub(p(5)), m - 4, m - 3, m - 2, m - 1}, sums{p(5), 4, 3, 2, 1}, true},
	} {
		got, ok := tt.have.plus(tt.add)
		if ok != tt.ok {
			t.Errorf("%s: %+v plus %+v fits: %v, want %v", tt.name, tt.have, tt.add, ok, tt.ok)
		}
		if ok {
			want := sums{tt.have.cost.Add(tt.add.cost), tt.have.input + tt.add.input, tt.have.cachedInput + tt.add.cachedInput,
				tt.have.output + tt.add.output, tt.have.requests + tt.add.requests}
			if got != want {
				t.Errorf("%s: sum %+v, want %+v", tt.name, got, want)
			}
		}
	}
}
