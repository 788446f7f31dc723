package limits

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

// waitOrFail waits for wg, failing the test if that takes longer than
// timeout: a deadlock shows up as a failure, not a hung test binary.
func waitOrFail(t *testing.T, wg *sync.WaitGroup, timeout time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("goroutines did not finish within %v: deadlock?", timeout)
	}
}

func TestConcurrentAdmitsExactlyTheLimit(t *testing.T) {
	const (
		goroutines = 16
		attempts   = 250
		limit      = 1000
	)
	tests := []struct {
		name    string
		demands []Demand
	}{
		{"one key", []Demand{dm("k", time.Minute, limit, 1)}},
		{"key and team", []Demand{dm("key", time.Minute, 1<<40, 1), dm("team", time.Minute, limit, 1)}},
		{"duplicate key", []Demand{dm("k", time.Minute, limit, 1), dm("k", time.Minute, limit, 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Options{})
			var admittedCalls atomic.Int64
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for range attempts {
						if c.Admit(base, tt.demands).Admitted {
							admittedCalls.Add(1)
						}
					}
				})
			}
			waitOrFail(t, &wg, 30*time.Second)

			// Every call adds len(demands) to one counter or another; the
			// limited counter must be full to the unit.
			perCall := int64(0)
			for _, d := range tt.demands {
				if d.Limit == limit {
					perCall += d.Amount
				}
			}
			if got, want := admittedCalls.Load(), limit/perCall; got != want {
				t.Errorf("%d calls admitted, want exactly %d", got, want)
			}
			check := make([]Demand, len(tt.demands))
			want := admitted()
			for i, d := range tt.demands {
				check[i] = dm(d.Key, d.Period, d.Limit, 0)
				want.Remaining = append(want.Remaining, d.Limit-admittedCalls.Load()*sumAmounts(tt.demands, d.Key))
			}
			if diff := cmp.Diff(want, c.Admit(base, check)); diff != "" {
				t.Errorf("counts after the run (-want +got):\n%s", diff)
			}
		})
	}
}

func sumAmounts(demands []Demand, key string) int64 {
	var n int64
	for _, d := range demands {
		if d.Key == key {
			n += d.Amount
		}
	}
	return n
}

// TestConcurrentOppositeOrders has two groups admit overlapping multi-key
// demands listed in opposite orders, with a Sweep running, and checks that
// nothing deadlocks and that every admission counted in all three counters.
func TestConcurrentOppositeOrders(t *testing.T) {
	const (
		perGroup = 8
		attempts = 500
		limit    = 5000
	)
	a := dm("a", time.Minute, limit, 1)
	b := dm("b", time.Minute, limit, 1)
	cc := dm("c", time.Minute, limit, 1)
	forward := []Demand{a, b, cc}
	backward := []Demand{cc, b, a, b} // b twice: 2 per call

	c := New(Options{})
	stop := make(chan struct{})
	var sweeper sync.WaitGroup
	sweeper.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				c.Sweep(base)
			}
		}
	})

	var fwd, bwd atomic.Int64
	var wg sync.WaitGroup
	for range perGroup {
		wg.Go(func() {
			for range attempts {
				if c.Admit(base, forward).Admitted {
					fwd.Add(1)
				}
			}
		})
		wg.Go(func() {
			for range attempts {
				if c.Admit(base, backward).Admitted {
					bwd.Add(1)
				}
			}
		})
	}
	waitOrFail(t, &wg, 30*time.Second)
	close(stop)
	waitOrFail(t, &sweeper, 30*time.Second)

	f, w := fwd.Load(), bwd.Load()
	want := admitted(limit-f-w, limit-f-2*w, limit-f-w)
	got := c.Admit(base, []Demand{dm("a", time.Minute, limit, 0), dm("b", time.Minute, limit, 0), dm("c", time.Minute, limit, 0)})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counts after %d forward and %d backward admissions (-want +got):\n%s", f, w, diff)
	}
	// b is the tightest counter and there were more attempts than room.
	if f+2*w > limit || f+2*w < limit-1 {
		t.Errorf("b counts %d, want %d or %d (full up to one backward call)", f+2*w, limit-1, limit)
	}
}

func TestAdmitRefetchesASweptCounter(t *testing.T) {
	tests := []struct {
		name    string
		demands []Demand
		want    Decision
	}{
		{"one key", []Demand{dm("m", time.Minute, 100, 1)}, admitted(99)},
		// "k" is locked first, then "m" turns out swept: "k" must be
		// unlocked before fetching again.
		{"second of two keys", []Demand{dm("m", time.Minute, 100, 2), dm("k", time.Minute, 100, 1)}, admitted(98, 98)},
		{"duplicate key", []Demand{dm("m", time.Minute, 100, 1), dm("m", time.Minute, 100, 1)}, admitted(98, 98)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Options{})
			// "k" counts 1, so a sweep keeps it; "m" counts nothing.
			c.Admit(base, []Demand{dm("k", time.Minute, 100, 1), dm("m", time.Minute, 100, 0)})
			now := base.Add(30 * time.Second)
			swept := 0
			c.testHookFetched = func() {
				if swept == 0 {
					swept = c.Sweep(now)
				}
			}
			got := c.Admit(now, tt.demands)
			if swept != 1 {
				t.Fatalf("the hook swept %d counters, want 1", swept)
			}
			c.testHookFetched = nil
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Admit() mismatch (-want +got):\n%s", diff)
			}
			check := make([]Demand, len(tt.demands))
			for i, d := range tt.demands {
				check[i] = dm(d.Key, d.Period, d.Limit, 0)
			}
			// The counts landed in the live counters, not the swept ones.
			if diff := cmp.Diff(tt.want, c.Admit(now, check)); diff != "" {
				t.Errorf("counts after Admit (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSweepRacingAdmitLosesNoCounts sweeps continuously while goroutines
// admit into counters that are empty (so sweepable) until they count.
// Admissions into a counter that was swept meanwhile must land in its
// replacement.
func TestSweepRacingAdmitLosesNoCounts(t *testing.T) {
	const (
		rounds     = 200
		goroutines = 8
	)
	c := New(Options{})
	stop := make(chan struct{})
	var sweeper sync.WaitGroup
	sweeper.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				c.Sweep(base)
			}
		}
	})
	defer func() {
		close(stop)
		sweeper.Wait()
	}()

	for r := range rounds {
		key := fmt.Sprintf("round%d", r)
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				// A check first makes an empty counter for Sweep to take.
				c.Admit(base, []Demand{dm(key, time.Minute, 100, 0)})
				c.Admit(base, []Demand{dm(key, time.Minute, 100, 1)})
			})
		}
		waitOrFail(t, &wg, 30*time.Second)
		got := c.Admit(base, []Demand{dm(key, time.Minute, 100, 0)})
		if diff := cmp.Diff(admitted(100-goroutines), got); diff != "" {
			t.Fatalf("round %d: counts (-want +got):\n%s", r, diff)
		}
	}
}

func TestRun(t *testing.T) {
	defer goleak.VerifyNone(t)

	c := New(Options{})
	// A counter whose window is long past on the wall clock.
	c.Admit(time.Unix(0, 0), []Demand{dm("old", time.Minute, 1, 1)})

	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx, time.Millisecond) }()

	deadline := time.Now().Add(30 * time.Second)
	for c.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Len() = %d 30s after Run started, want 0", c.Len())
		}
		time.Sleep(time.Millisecond) // polling, not waiting for readiness
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
}

func TestRunRejectsBadInterval(t *testing.T) {
	c := New(Options{})
	for _, d := range []time.Duration{0, -time.Second} {
		if err := c.Run(t.Context(), d); err == nil {
			t.Errorf("Run(ctx, %v) = nil, want an error", d)
		}
	}
}
