package limits

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// event is one admitted amount, for the brute-force log.
type event struct {
	t   int64 // UnixNano
	amt int64
}

// worstWindow returns the largest total amount in any interval (s−p, s] of
// the log (sorted by time), and the s where it occurs. Checking the intervals
// that end at an event is enough: any other interval holds a subset of the one
// ending at its latest event.
func worstWindow(log []event, p int64) (worst, at int64) {
	for k := range log {
		var sum int64
		for j := k; j >= 0 && log[j].t > log[k].t-p; j-- {
			sum += log[j].amt
		}
		if sum > worst {
			worst, at = sum, log[k].t
		}
	}
	return worst, at
}

func TestWorstWindow(t *testing.T) {
	// The checker itself must be able to find a violation.
	tests := []struct {
		name string
		log  []event
		want int64
	}{
		{"empty", nil, 0},
		{"both ends inside", []event{{0, 2}, {9, 2}}, 4},
		{"left end is open", []event{{0, 2}, {10, 2}}, 2},
		{"window in the middle", []event{{0, 1}, {5, 3}, {12, 3}, {16, 1}, {30, 5}}, 6},
	}
	for _, tt := range tests {
		if got, _ := worstWindow(tt.log, 10); got != tt.want {
			t.Errorf("%s: worstWindow() = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// model is a naive reference: every bucket ever touched in a map, sums and
// retry times recomputed from scratch. Timestamps given to it must not go
// backwards.
type model struct {
	b    int64
	amts map[string]map[int64]int64 // key → bucket index → amount
}

func (m *model) admit(now time.Time, demands []Demand) Decision {
	nowNs := now.UnixNano()
	sum := func(d Demand) (int64, int64) {
		w := int64(d.Period) / m.b
		c := floorDiv(nowNs, w)
		var s int64
		for j := c - m.b; j <= c; j++ {
			s += m.amts[d.Key][j]
		}
		return s, c
	}
	pend := map[string]int64{}
	dec := Decision{Admitted: true, Remaining: make([]int64, len(demands))}
	// Every demand is judged with the amounts of all the call's demands
	// before it on the same key; the binding one is the first impossible
	// one, else the one that frees last.
	for i, d := range demands {
		s, c := sum(d)
		pend[d.Key] += d.Amount
		if s+pend[d.Key] <= d.Limit {
			continue
		}
		first := dec.Admitted
		dec.Admitted = false
		if pend[d.Key] > d.Limit {
			if !dec.Impossible {
				dec.Impossible, dec.Denied, dec.RetryAfter = true, i, 0
			}
			continue
		}
		if dec.Impossible {
			continue
		}
		w := int64(d.Period) / m.b
		excess, freed := s+pend[d.Key]-d.Limit, int64(0)
		for j := c - m.b; j <= c; j++ {
			freed += m.amts[d.Key][j]
			if freed >= excess {
				if ra := time.Duration((j+m.b+1)*w - nowNs); first || ra > dec.RetryAfter {
					dec.Denied, dec.RetryAfter = i, ra
				}
				break
			}
		}
	}
	if dec.Admitted {
		for _, d := range demands {
			if m.amts[d.Key] == nil {
				m.amts[d.Key] = map[int64]int64{}
			}
			_, c := sum(d)
			m.amts[d.Key][c] += d.Amount
		}
	}
	for i, d := range demands {
		s, _ := sum(d)
		dec.Remaining[i] = max(d.Limit-s, 0)
	}
	return dec
}

// propLimit is one counter of a property run.
type propLimit struct {
	key    string
	period time.Duration
	limit  int64
}

// TestPropertyNoIntervalExceedsLimit drives random, seeded sequences of
// admissions through Counters and checks, against a brute-force log of what
// was admitted, that no interval of length P ever holds more than the limit.
// Every decision must also equal the naive model's, and after a denial the
// same demand is denied 1ns before RetryAfter and admitted at RetryAfter.
func TestPropertyNoIntervalExceedsLimit(t *testing.T) {
	configs := []struct {
		buckets int
		widths  []time.Duration // bucket width per key
		limits  []int64
	}{
		{1, []time.Duration{10}, []int64{5}},
		{2, []time.Duration{7, 1000}, []int64{4, 9}},
		{5, []time.Duration{3, 11, 1}, []int64{10, 25, 3}},
		{60, []time.Duration{1000, 60_000}, []int64{100, 1000}},
		{60, []time.Duration{time.Second, time.Minute, 24 * time.Minute}, []int64{20, 60, 200}},
	}
	const steps = 3000
	var hitLimit, denials, retryProbes int
	for ci, cfg := range configs {
		for seed := range uint64(4) {
			t.Run(fmt.Sprintf("config%d/seed%d", ci, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, uint64(ci)))
				lims := make([]propLimit, len(cfg.widths))
				for i, w := range cfg.widths {
					lims[i] = propLimit{fmt.Sprintf("k%d", i), w * time.Duration(cfg.buckets), cfg.limits[i]}
				}
				c := New(Options{Buckets: cfg.buckets})
				ref := &model{b: int64(cfg.buckets), amts: map[string]map[int64]int64{}}
				logs := map[string][]event{}

				now := base.Add(time.Duration(rng.Int64N(int64(cfg.widths[0]))))
				admit := func(demands []Demand) Decision {
					t.Helper()
					want := ref.admit(now, demands)
					got := c.Admit(now, demands)
					if diff := cmp.Diff(want, got); diff != "" {
						t.Fatalf("at %d, Admit(%v) differs from the model (-model +got):\n%s", now.UnixNano(), demands, diff)
					}
					if got.Admitted {
						for _, d := range demands {
							if d.Amount > 0 {
								logs[d.Key] = append(logs[d.Key], event{now.UnixNano(), d.Amount})
							}
						}
					}
					return got
				}

				for range steps {
					now = now.Add(gap(rng, cfg.widths[0], lims[len(lims)-1].period))
					demands := randomDemands(rng, lims)
					dec := admit(demands)
					if dec.Admitted || dec.Impossible {
						continue
					}
					denials++
					if rng.IntN(2) == 0 {
						continue
					}
					// Retry the denied demand, with the demands before it on
					// the same key, 1ns early and then on time.
					retryProbes++
					var probe []Demand
					for _, d := range demands[:dec.Denied+1] {
						if d.Key == demands[dec.Denied].Key {
							probe = append(probe, d)
						}
					}
					start := now
					now = start.Add(dec.RetryAfter - 1)
					if early := admit(probe); early.Admitted || early.Denied != len(probe)-1 {
						t.Fatalf("at now+RetryAfter-1ns (%v): Admit(%v) = %+v, want the last demand denied", dec.RetryAfter-1, probe, early)
					}
					now = start.Add(dec.RetryAfter)
					if onTime := admit(probe); !onTime.Admitted {
						t.Fatalf("at now+RetryAfter (%v): Admit(%v) = %+v, want admitted", dec.RetryAfter, probe, onTime)
					}
				}

				for _, l := range lims {
					worst, at := worstWindow(logs[l.key], int64(l.period))
					if worst > l.limit {
						t.Errorf("%s: %d admitted in the interval (%d−%v, %d], limit %d", l.key, worst, at, l.period, at, l.limit)
					}
					if worst == l.limit {
						hitLimit++
					}
				}
			})
		}
	}
	// The runs must have pushed against the limits, or they prove nothing.
	t.Logf("%d limits reached exactly, %d denials, %d retry probes", hitLimit, denials, retryProbes)
	if hitLimit < 40 || denials < 10000 || retryProbes < 5000 {
		t.Errorf("weak property run: %d limits reached exactly, %d denials, %d retry probes", hitLimit, denials, retryProbes)
	}
}

// gap returns a random time step: often none or less than a bucket, sometimes
// a few buckets, rarely up to several of the longest periods.
func gap(rng *rand.Rand, width, period time.Duration) time.Duration {
	switch r := rng.IntN(100); {
	case r < 25:
		return 0
	case r < 60:
		return time.Duration(rng.Int64N(int64(width)))
	case r < 85:
		return time.Duration(rng.Int64N(3 * int64(width)))
	case r < 97:
		return time.Duration(rng.Int64N(int64(period)))
	default:
		return time.Duration(rng.Int64N(3 * int64(period)))
	}
}

// randomDemands returns one to four demands on the given limits, sometimes
// naming one key twice, with amounts that are usually small and now and then
// more than the limit.
func randomDemands(rng *rand.Rand, lims []propLimit) []Demand {
	n := 1 + rng.IntN(4)
	out := make([]Demand, n)
	for i := range out {
		l := lims[rng.IntN(len(lims))]
		var amt int64
		switch r := rng.IntN(100); {
		case r < 10:
			amt = 0
		case r < 85:
			amt = 1 + rng.Int64N(max(l.limit/5, 1))
		case r < 98:
			amt = 1 + rng.Int64N(l.limit)
		default:
			amt = l.limit + 1
		}
		out[i] = Demand{Key: l.key, Period: l.period, Limit: l.limit, Amount: amt}
	}
	return out
}
