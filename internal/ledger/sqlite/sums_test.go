package sqlite

import (
	"math"
	"testing"
)

// TestSumsPlus: an aggregate's sums add up to math.MaxInt64 exactly, and
// refuse one more, in each of their five counts alone.
func TestSumsPlus(t *testing.T) {
	const m = math.MaxInt64
	for _, tt := range []struct {
		name      string
		have, add sums
		ok        bool
	}{
		{"small", sums{1, 2, 3, 4, 5}, sums{1, 1, 1, 1, 1}, true},
		{"cost to the maximum", sums{cost: m - 1}, sums{cost: 1}, true},
		{"cost past it", sums{cost: m}, sums{cost: 1}, false},
		{"input past it", sums{input: m}, sums{input: 1}, false},
		{"cached input past it", sums{cachedInput: m}, sums{cachedInput: 1}, false},
		{"output past it", sums{output: m}, sums{output: 1}, false},
		{"requests past it", sums{requests: m}, sums{requests: 1}, false},
		{"every count to the maximum", sums{m - 5, m - 4, m - 3, m - 2, m - 1}, sums{5, 4, 3, 2, 1}, true},
	} {
		got, ok := tt.have.plus(tt.add)
		if ok != tt.ok {
			t.Errorf("%s: %+v plus %+v fits: %v, want %v", tt.name, tt.have, tt.add, ok, tt.ok)
		}
		if ok {
			want := sums{tt.have.cost + tt.add.cost, tt.have.input + tt.add.input, tt.have.cachedInput + tt.add.cachedInput,
				tt.have.output + tt.add.output, tt.have.requests + tt.add.requests}
			if got != want {
				t.Errorf("%s: sum %+v, want %+v", tt.name, got, want)
			}
		}
	}
}
