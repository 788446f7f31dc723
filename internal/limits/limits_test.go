package limits

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// base is midnight UTC, so it is aligned to minute, hour and day buckets.
var base = time.Unix(1_700_006_400, 0)

func dm(key string, period time.Duration, limit, amount int64) Demand {
	return Demand{Key: key, Period: period, Limit: limit, Amount: amount}
}

func admitted(remaining ...int64) Decision {
	return Decision{Admitted: true, Remaining: remaining}
}

func denied(idx int, retry time.Duration, remaining ...int64) Decision {
	return Decision{Denied: idx, RetryAfter: retry, Remaining: remaining}
}

func impossible(idx int, remaining ...int64) Decision {
	return Decision{Denied: idx, Impossible: true, Remaining: remaining}
}

type step struct {
	at      time.Duration // offset from the case's base
	demands []Demand
	want    Decision
}

func TestAdmit(t *testing.T) {
	const (
		sec  = time.Second
		min  = time.Minute
		hour = time.Hour
		day  = 24 * time.Hour
	)
	k := func(limit, amount int64) Demand { return dm("k", min, limit, amount) }
	tests := []struct {
		name    string
		buckets int
		base    time.Time // zero: base
		steps   []step
	}{
		{
			name: "fills, denies until the oldest bucket leaves the span",
			steps: []step{
				{0, []Demand{k(3, 1)}, admitted(2)},
				{10 * sec, []Demand{k(3, 1)}, admitted(1)},
				{20 * sec, []Demand{k(3, 1)}, admitted(0)},
				// Bucket 0 is counted until index 60 and leaves at 61s.
				{30 * sec, []Demand{k(3, 1)}, denied(0, 31*sec, 0)},
				{60 * sec, []Demand{k(3, 1)}, denied(0, sec, 0)},
				{61*sec - 1, []Demand{k(3, 1)}, denied(0, 1, 0)},
				{61 * sec, []Demand{k(3, 1)}, admitted(0)},
			},
		},
		{
			name: "excess spanning two buckets",
			steps: []step{
				{0, []Demand{k(3, 1)}, admitted(2)},
				{10 * sec, []Demand{k(3, 1)}, admitted(1)},
				{20 * sec, []Demand{k(3, 1)}, admitted(0)},
				{30 * sec, []Demand{k(3, 2)}, denied(0, 41*sec, 0)},
				{61 * sec, []Demand{k(3, 2)}, denied(0, 10*sec, 1)},
				{71*sec - 1, []Demand{k(3, 2)}, denied(0, 1, 1)},
				{71 * sec, []Demand{k(3, 2)}, admitted(0)},
			},
		},
		{
			name: "sub-bucket times",
			steps: []step{
				{500 * time.Millisecond, []Demand{k(3, 3)}, admitted(0)},
				{59900 * time.Millisecond, []Demand{k(3, 1)}, denied(0, 1100*time.Millisecond, 0)},
				{60500 * time.Millisecond, []Demand{k(3, 1)}, denied(0, 500*time.Millisecond, 0)},
				{61 * sec, []Demand{k(3, 1)}, admitted(2)},
			},
		},
		{
			name: "amount above the limit is impossible and counts nothing",
			steps: []step{
				{0, []Demand{k(3, 4)}, impossible(0, 3)},
				{sec, []Demand{k(3, 3)}, admitted(0)},
			},
		},
		{
			name: "amount zero only checks",
			steps: []step{
				{0, []Demand{k(3, 0)}, admitted(3)},
				{0, []Demand{k(3, 3)}, admitted(0)},
				{sec, []Demand{k(3, 0)}, admitted(0)},
				// The limit was lowered below the count: over by one.
				{2 * sec, []Demand{k(2, 0)}, denied(0, 59*sec, 0)},
				{3 * sec, []Demand{k(5, 0)}, admitted(2)},
				{61 * sec, []Demand{k(2, 0)}, admitted(2)},
			},
		},
		{
			name: "all or nothing across key and team limits",
			steps: []step{
				{0, []Demand{dm("key", min, 10, 1), dm("team", min, 3, 1)}, admitted(9, 2)},
				{sec, []Demand{dm("key", min, 10, 1), dm("team", min, 3, 2)}, admitted(8, 0)},
				{2 * sec, []Demand{dm("key", min, 10, 1), dm("team", min, 3, 1)}, denied(1, 59*sec, 8, 0)},
				// The denied call added nothing to "key".
				{3 * sec, []Demand{dm("key", min, 10, 0), dm("team", min, 3, 0)}, admitted(8, 0)},
				{61 * sec, []Demand{dm("key", min, 10, 1), dm("team", min, 3, 1)}, admitted(8, 0)},
			},
		},
		{
			// The binding demand is the one that frees last (whatever its
			// position), or an impossible one, which beats any wait.
			name: "the binding demand is reported",
			steps: []step{
				{0, []Demand{dm("a", min, 1, 1), dm("b", hour, 1, 1)}, admitted(0, 0)},
				{30 * sec, []Demand{dm("a", min, 1, 1), dm("b", hour, 1, 1)}, denied(1, 61*min-30*sec, 0, 0)},
				{30 * sec, []Demand{dm("b", hour, 1, 1), dm("a", min, 1, 1)}, denied(0, 61*min-30*sec, 0, 0)},
				{30 * sec, []Demand{dm("c", min, 5, 1), dm("b", hour, 1, 1), dm("a", min, 1, 2)}, impossible(2, 5, 0, 0)},
				{30 * sec, []Demand{dm("c", min, 5, 1), dm("a", min, 1, 2), dm("b", hour, 1, 1)}, impossible(1, 5, 0, 0)},
			},
		},
		{
			name: "duplicate keys add up against one counter",
			steps: []step{
				{0, []Demand{k(3, 1), k(3, 1)}, admitted(1, 1)},
				// 2 counted + 1 + 1 = 4: one over, freed when bucket 0 leaves.
				{sec, []Demand{k(3, 1), k(3, 1)}, denied(1, 60*sec, 1, 1)},
				// The call wants 4 of a limit of 3: it can never fit.
				{2 * sec, []Demand{k(3, 2), k(3, 2)}, impossible(1, 1, 1)},
				{2 * sec, []Demand{k(3, 2)}, denied(0, 59*sec, 1)},
				{2 * sec, []Demand{dm("j", min, 3, 2), dm("j", min, 3, 2)}, impossible(1, 3, 3)},
				{3 * sec, []Demand{k(10, 2), k(3, 2)}, impossible(1, 8, 1)},
				{4 * sec, []Demand{k(3, 1)}, admitted(0)},
				{5 * sec, []Demand{k(3, 0), k(3, 0), k(3, 0)}, admitted(0, 0, 0)},
			},
		},
		{
			name: "an hour has one-minute buckets",
			steps: []step{
				{0, []Demand{dm("h", hour, 2, 1)}, admitted(1)},
				{30 * min, []Demand{dm("h", hour, 2, 1)}, admitted(0)},
				{45 * min, []Demand{dm("h", hour, 2, 1)}, denied(0, 16*min, 0)},
				{61 * min, []Demand{dm("h", hour, 2, 1)}, admitted(0)},
			},
		},
		{
			name: "a day has 24-minute buckets",
			steps: []step{
				// 1h falls in bucket 2 ([48m, 72m)), counted until 25h12m.
				{hour, []Demand{dm("d", day, 1, 1)}, admitted(0)},
				{23 * hour, []Demand{dm("d", day, 1, 1)}, denied(0, 2*hour+12*min, 0)},
				{25 * hour, []Demand{dm("d", day, 1, 1)}, denied(0, 12*min, 0)},
				{25*hour + 12*min, []Demand{dm("d", day, 1, 1)}, admitted(0)},
			},
		},
		{
			name: "minute, hour and day together",
			steps: []step{
				{0, []Demand{dm("m", min, 2, 1), dm("h", hour, 3, 1), dm("d", day, 4, 1)}, admitted(1, 2, 3)},
				{sec, []Demand{dm("m", min, 2, 1), dm("h", hour, 3, 1), dm("d", day, 4, 1)}, admitted(0, 1, 2)},
				{2 * sec, []Demand{dm("m", min, 2, 1), dm("h", hour, 3, 1), dm("d", day, 4, 1)}, denied(0, 59*sec, 0, 1, 2)},
				{2 * min, []Demand{dm("m", min, 2, 1), dm("h", hour, 3, 1), dm("d", day, 4, 1)}, admitted(1, 0, 1)},
				{3 * min, []Demand{dm("m", min, 2, 1), dm("h", hour, 3, 1), dm("d", day, 4, 1)}, denied(1, 58*min, 1, 0, 1)},
				{61 * min, []Demand{dm("m", min, 2, 1), dm("h", hour, 3, 1), dm("d", day, 4, 1)}, admitted(1, 1, 0)},
				{62 * min, []Demand{dm("m", min, 2, 1), dm("h", hour, 3, 1), dm("d", day, 4, 1)}, denied(2, 23*hour+22*min, 1, 1, 0)},
			},
		},
		{
			name:    "custom bucket count",
			buckets: 4,
			steps: []step{
				{200 * time.Millisecond, []Demand{dm("k", 4*sec, 2, 1)}, admitted(1)},
				{1500 * time.Millisecond, []Demand{dm("k", 4*sec, 2, 1)}, admitted(0)},
				{3900 * time.Millisecond, []Demand{dm("k", 4*sec, 2, 1)}, denied(0, 1100*time.Millisecond, 0)},
				{5 * sec, []Demand{dm("k", 4*sec, 2, 1)}, admitted(0)},
			},
		},
		{
			name:    "one bucket",
			buckets: 1,
			steps: []step{
				{900 * time.Millisecond, []Demand{dm("k", sec, 1, 1)}, admitted(0)},
				// Buckets [0s,1s) and [1s,2s) are both counted at 1.5s.
				{1500 * time.Millisecond, []Demand{dm("k", sec, 1, 1)}, denied(0, 500*time.Millisecond, 0)},
				{2 * sec, []Demand{dm("k", sec, 1, 1)}, admitted(0)},
			},
		},
		{
			name: "idle for longer than the ring reuses every slot",
			steps: []step{
				{0, []Demand{k(3, 3)}, admitted(0)},
				{10 * min, []Demand{k(3, 3)}, admitted(0)},
				{10*min + 30*sec, []Demand{k(3, 1)}, denied(0, 31*sec, 0)},
				{11*min + 30*sec, []Demand{k(3, 1)}, admitted(2)},
			},
		},
		{
			name: "a clock going backwards is treated as the newest time seen",
			steps: []step{
				{30 * sec, []Demand{k(3, 3)}, admitted(0)},
				{10 * sec, []Demand{k(3, 1)}, denied(0, 81*sec, 0)},
				{10 * sec, []Demand{dm("other", min, 1, 1)}, admitted(0)},
				{91 * sec, []Demand{k(3, 1)}, admitted(2)},
			},
		},
		{
			name: "times before 1970",
			base: time.Unix(-3600, 0),
			steps: []step{
				{0, []Demand{k(3, 1)}, admitted(2)},
				{10 * sec, []Demand{k(3, 2)}, admitted(0)},
				{30 * sec, []Demand{k(3, 1)}, denied(0, 31*sec, 0)},
				{61 * sec, []Demand{k(3, 1)}, admitted(0)},
			},
		},
		{
			name: "no demands",
			steps: []step{
				{0, nil, admitted()},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Options{Buckets: tt.buckets})
			b := tt.base
			if b.IsZero() {
				b = base
			}
			for i, s := range tt.steps {
				got := c.Admit(b.Add(s.at), s.demands)
				if diff := cmp.Diff(s.want, got); diff != "" {
					t.Errorf("step %d (at +%v): Admit() mismatch (-want +got):\n%s", i, s.at, diff)
				}
			}
		})
	}
}

func TestAdmitIntoReusesRemaining(t *testing.T) {
	c := New(Options{})
	buf := make([]int64, 4)
	got := c.AdmitInto(base, []Demand{dm("a", time.Minute, 5, 1), dm("b", time.Minute, 7, 2)}, buf)
	if diff := cmp.Diff(admitted(4, 5), got); diff != "" {
		t.Fatalf("AdmitInto() mismatch (-want +got):\n%s", diff)
	}
	if &got.Remaining[0] != &buf[0] {
		t.Error("AdmitInto() did not write into the caller's slice")
	}
	// Too small a slice is replaced, not overrun.
	small := make([]int64, 1)
	got = c.AdmitInto(base, []Demand{dm("a", time.Minute, 5, 0), dm("b", time.Minute, 7, 0)}, small)
	if diff := cmp.Diff(admitted(4, 5), got); diff != "" {
		t.Fatalf("AdmitInto() with a short slice mismatch (-want +got):\n%s", diff)
	}
}

// TestAdmitWithResets: a demand's reset is when the newest bucket its
// counter counts leaves the window — the whole limit is free again —
// measured after the decision, admitted or not; an empty counter's is 0.
func TestAdmitWithResets(t *testing.T) {
	c := New(Options{}) // 60 buckets: 1 s wide for a minute
	t0 := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration, amount int64) Decision {
		t.Helper()
		return c.AdmitWithResets(t0.Add(d), []Demand{dm("a", time.Minute, 3, amount), dm("empty", time.Minute, 3, 0)}, nil, nil)
	}
	for _, tt := range []struct {
		at     time.Duration
		amount int64
		admit  bool
		reset  time.Duration
	}{
		{10500 * time.Millisecond, 1, true, 60500 * time.Millisecond}, // bucket 10 leaves at 71 s
		{20200 * time.Millisecond, 2, true, 60800 * time.Millisecond}, // bucket 20 leaves at 81 s
		{30 * time.Second, 1, false, 51 * time.Second},                // refused: nothing counted, the same content
		{75 * time.Second, 0, true, 6 * time.Second},                  // bucket 10 has left; 20 is left
		{81 * time.Second, 0, true, 0},                                // everything has left
	} {
		d := at(tt.at, tt.amount)
		if d.Admitted != tt.admit || len(d.Resets) != 2 || d.Resets[0] != tt.reset || d.Resets[1] != 0 {
			t.Errorf("at %v: admitted %v, resets %v; want %v, [%v 0]", tt.at, d.Admitted, d.Resets, tt.admit, tt.reset)
		}
	}
	if d := c.AdmitInto(t0, []Demand{dm("a", time.Minute, 3, 0)}, nil); d.Resets != nil {
		t.Errorf("AdmitInto filled Resets: %v", d.Resets)
	}
	buf := make([]time.Duration, 1)
	if d := c.AdmitWithResets(t0.Add(90*time.Second), []Demand{dm("a", time.Minute, 3, 1)}, nil, buf); &d.Resets[0] != &buf[0] {
		t.Error("AdmitWithResets did not write into the caller's slice")
	}
}

func TestAdmitIntoDoesNotAllocate(t *testing.T) {
	for _, n := range []int{1, 2, 4, 8} {
		c := New(Options{})
		demands := make([]Demand, n)
		for i := range demands {
			// Reverse key order so sorting has work to do.
			demands[i] = dm(string(rune('z'-i)), time.Minute, 1<<40, 1)
		}
		remaining := make([]int64, n)
		now := base
		c.AdmitInto(now, demands, remaining) // create the counters
		allocs := testing.AllocsPerRun(100, func() {
			now = now.Add(time.Second)
			c.AdmitInto(now, demands, remaining)
		})
		if allocs != 0 {
			t.Errorf("%d demands: AdmitInto allocated %v times per call, want 0", n, allocs)
		}
		resets := make([]time.Duration, n)
		allocs = testing.AllocsPerRun(100, func() {
			now = now.Add(time.Second)
			c.AdmitWithResets(now, demands, remaining, resets)
		})
		if allocs != 0 {
			t.Errorf("%d demands: AdmitWithResets allocated %v times per call, want 0", n, allocs)
		}
	}
}

func TestManyDemands(t *testing.T) {
	// More demands than fit the stack scratch space, with duplicates.
	c := New(Options{})
	var demands []Demand
	want := admitted()
	for i := range 20 {
		key := string(rune('a' + i%7))
		demands = append(demands, dm(key, time.Minute, 100, 1))
	}
	for i := range 20 {
		n := int64(3) // keys a..f appear 3 times, g twice
		if i%7 == 6 {
			n = 2
		}
		want.Remaining = append(want.Remaining, 100-n)
	}
	got := c.Admit(base, demands)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Admit() mismatch (-want +got):\n%s", diff)
	}
	if got := c.Len(); got != 7 {
		t.Errorf("Len() = %d, want 7", got)
	}
}

func TestSweep(t *testing.T) {
	c := New(Options{})
	// "m" counts 1 in the bucket of base+10s, index j; it is counted up to
	// index j+60 and empty from base+71s.
	c.Admit(base.Add(10*time.Second), []Demand{dm("m", time.Minute, 5, 1)})
	// "h" counts in the bucket of base (one-minute buckets): empty from base+61m.
	c.Admit(base, []Demand{dm("h", time.Hour, 5, 1)})
	// "z" only checked, so it counts nothing.
	c.Admit(base, []Demand{dm("z", time.Minute, 5, 0)})
	if got := c.Len(); got != 3 {
		t.Fatalf("Len() = %d, want 3", got)
	}

	steps := []struct {
		at       time.Duration
		dropped  int
		wantLive int
	}{
		{0, 1, 2}, // "z"
		{71*time.Second - 1, 0, 2},
		{71 * time.Second, 1, 1}, // "m"
		{61*time.Minute - 1, 0, 1},
		{61 * time.Minute, 1, 0}, // "h"
		{62 * time.Minute, 0, 0},
	}
	for _, s := range steps {
		if got := c.Sweep(base.Add(s.at)); got != s.dropped {
			t.Errorf("Sweep(+%v) = %d, want %d", s.at, got, s.dropped)
		}
		if got := c.Len(); got != s.wantLive {
			t.Errorf("after Sweep(+%v): Len() = %d, want %d", s.at, got, s.wantLive)
		}
	}

	// A swept key starts again from zero.
	got := c.Admit(base.Add(62*time.Minute), []Demand{dm("m", time.Minute, 5, 2)})
	if diff := cmp.Diff(admitted(3), got); diff != "" {
		t.Errorf("Admit() after sweep mismatch (-want +got):\n%s", diff)
	}
}

func TestSweepKeepsCountsOfAClockAhead(t *testing.T) {
	// A Sweep whose clock lags the callers' must not drop live counts.
	c := New(Options{})
	c.Admit(base.Add(10*time.Minute), []Demand{dm("k", time.Minute, 1, 1)})
	if got := c.Sweep(base); got != 0 {
		t.Fatalf("Sweep() = %d, want 0", got)
	}
	got := c.Admit(base.Add(10*time.Minute), []Demand{dm("k", time.Minute, 1, 1)})
	if diff := cmp.Diff(denied(0, 61*time.Second, 0), got); diff != "" {
		t.Errorf("Admit() mismatch (-want +got):\n%s", diff)
	}
}

func TestInvalidDemandsPanic(t *testing.T) {
	tests := []struct {
		name    string
		buckets int
		demands []Demand
		want    string
	}{
		{"zero period", 0, []Demand{dm("k", 0, 1, 1)}, "period must be positive"},
		{"negative period", 0, []Demand{dm("k", -time.Minute, 1, 1)}, "period must be positive"},
		{"zero limit", 0, []Demand{dm("k", time.Minute, 0, 1)}, "limit must be positive"},
		{"negative amount", 0, []Demand{dm("k", time.Minute, 1, -1)}, "amount must not be negative"},
		{"period not divisible", 0, []Demand{dm("k", 61, 1, 1)}, "does not divide into 60 buckets"},
		{"period shorter than buckets", 0, []Demand{dm("k", 30, 1, 1)}, "does not divide into 60 buckets"},
		{"second demand invalid", 0, []Demand{dm("a", time.Minute, 1, 1), dm("b", time.Minute, -1, 1)}, `demands[1] "b"`},
		{"one key, two periods in a call", 0, []Demand{dm("k", time.Minute, 1, 1), dm("k", time.Hour, 1, 1)}, "but the key is used with period"},
		{"custom buckets", 7, []Demand{dm("k", time.Minute, 1, 1)}, "does not divide into 7 buckets"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Options{Buckets: tt.buckets})
			msg := catchPanic(func() { c.Admit(base, tt.demands) })
			if !strings.Contains(msg, tt.want) {
				t.Errorf("Admit() panicked with %q, want it to contain %q", msg, tt.want)
			}
			if got := c.Len(); got > 1 {
				t.Errorf("Len() = %d after a panic, want at most 1", got)
			}
		})
	}

	t.Run("one key, two periods across calls", func(t *testing.T) {
		c := New(Options{})
		c.Admit(base, []Demand{dm("k", time.Minute, 1, 1)})
		msg := catchPanic(func() { c.Admit(base, []Demand{dm("k", time.Hour, 1, 1)}) })
		if want := "period 1h0m0s, but the key is used with period 1m0s"; !strings.Contains(msg, want) {
			t.Errorf("Admit() panicked with %q, want it to contain %q", msg, want)
		}
		// No lock was left held.
		got := c.Admit(base, []Demand{dm("k", time.Minute, 1, 0)})
		if diff := cmp.Diff(admitted(0), got); diff != "" {
			t.Errorf("Admit() after the panic mismatch (-want +got):\n%s", diff)
		}
	})

	t.Run("negative buckets", func(t *testing.T) {
		msg := catchPanic(func() { New(Options{Buckets: -1}) })
		if want := "Options.Buckets -1 must not be negative"; !strings.Contains(msg, want) {
			t.Errorf("New() panicked with %q, want it to contain %q", msg, want)
		}
	})
}

// catchPanic runs f and returns the message it panicked with, or "" if it
// did not panic.
func catchPanic(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			s, ok := r.(string)
			if !ok {
				s = "non-string panic"
			}
			msg = s
		}
	}()
	f()
	return ""
}

func TestAdjust(t *testing.T) {
	c := New(Options{})
	t0 := time.Unix(1_800_000_000, 0)
	d := []Demand{{Key: "k/tokens/1m", Period: time.Minute, Limit: 100, Amount: 80}}
	if !c.Admit(t0, d).Admitted {
		t.Fatal("first reservation refused")
	}
	// Settled at 30: 50 of the 80 reserved come back, in the bucket they
	// were counted in.
	c.Adjust(t0, t0.Add(10*time.Second), "k/tokens/1m", time.Minute, -50)
	d[0].Amount = 70
	if !c.Admit(t0.Add(10*time.Second), d).Admitted {
		t.Fatal("the released tokens were not available again")
	}
	// A use above the reservation is counted now.
	c.Adjust(t0, t0.Add(20*time.Second), "k/tokens/1m", time.Minute, +5)
	d[0].Amount = 1
	if dec := c.Admit(t0.Add(20*time.Second), d); dec.Admitted || dec.Remaining[0] != 0 {
		t.Fatalf("30+70+5 = 105 > 100 counted, but admitted: %+v", dec)
	}
	// Once the first bucket has left the window, a late release of it does
	// nothing: the window must not forget more than it still counts.
	late := t0.Add(61 * time.Second)
	c.Adjust(t0, late, "k/tokens/1m", time.Minute, -30)
	d[0].Amount = 0
	if rem := c.Admit(late, d).Remaining[0]; rem != 100-75 {
		t.Fatalf("remaining %d after the first bucket left, want 25 (70+5 still counted)", rem)
	}
	// Never below zero.
	c.Adjust(t0.Add(10*time.Second), late, "k/tokens/1m", time.Minute, -1000)
	if rem := c.Admit(late, d).Remaining[0]; rem != 100-5 {
		t.Fatalf("remaining %d, want 95 (only the +5 bucket is left)", rem)
	}
}

// TestHugeAmountsSaturate: uses reported far beyond any limit (a provider
// claiming 2^62 tokens, twice) fill the window instead of wrapping it to a
// negative count that admits everything; demands that sum past int64 on
// one key are impossible, not admitted.
func TestHugeAmountsSaturate(t *testing.T) {
	const maxInt = 1<<63 - 1
	c := New(Options{})
	t0 := time.Unix(1_800_000_000, 0)
	key := "k/tokens/1m"
	for _, delta := range []int64{1 << 62, 1 << 62} { // 2^63 wraps to MinInt64
		c.Adjust(t0, t0, key, time.Minute, delta)
	}
	if dec := c.Admit(t0.Add(time.Second), []Demand{dm(key, time.Minute, 100, 1)}); dec.Admitted || dec.Remaining[0] != 0 {
		t.Fatalf("after 2·2^62 tokens, a 1-token request: %+v, want denied with 0 left", dec)
	}
	// Taking back part of a saturated bucket leaves the rest counted.
	c.Adjust(t0, t0.Add(2*time.Second), key, time.Minute, -(1 << 62))
	if dec := c.Admit(t0.Add(3*time.Second), []Demand{dm(key, time.Minute, 100, 1)}); dec.Admitted {
		t.Fatalf("part of a saturated window released, a request admitted: %+v", dec)
	}
	// Releasing more than int64 can say releases the bucket, no more.
	c.Adjust(t0, t0.Add(2*time.Second), key, time.Minute, -maxInt-1) // MinInt64
	if dec := c.Admit(t0.Add(3*time.Second), []Demand{dm(key, time.Minute, 100, 1)}); !dec.Admitted || dec.Remaining[0] != 99 {
		t.Fatalf("after releasing everything: %+v, want admitted with 99 left", dec)
	}
	// Once the window has moved past the bucket, it is empty again.
	c.Adjust(t0.Add(4*time.Second), t0.Add(4*time.Second), key, time.Minute, maxInt)
	if dec := c.Admit(t0.Add(3*time.Minute), []Demand{dm(key, time.Minute, 100, 1)}); !dec.Admitted || dec.Remaining[0] != 99 {
		t.Fatalf("three minutes later: %+v, want admitted with 99 left", dec)
	}

	// Two demands on one key whose amounts overflow together.
	other := "k2/tokens/1m"
	dec := c.Admit(t0, []Demand{dm(other, time.Minute, 100, maxInt), dm(other, time.Minute, 100, maxInt)})
	if dec.Admitted || !dec.Impossible {
		t.Fatalf("max + max tokens on one key: %+v, want impossible", dec)
	}
}
