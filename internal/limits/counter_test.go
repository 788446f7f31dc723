package limits

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestSaturatedWindowRecountsWhatStays: a window whose total saturated
// (one bucket holds math.MaxInt64, the next 5) counts, once the full
// bucket has left, exactly what the buckets still in it hold — not the
// saturated total minus what left, which would be 0.
func TestSaturatedWindowRecountsWhatStays(t *testing.T) {
	const maxInt = 1<<63 - 1
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) // on a 15 s bucket boundary
	const key = "k/tokens/1m"
	c := New(Options{Buckets: 4})
	c.Adjust(t0, t0, key, time.Minute, maxInt)
	at := t0.Add(15 * time.Second)
	c.Adjust(at, at, key, time.Minute, 5)
	// Bucket 0 is counted up to bucket 4 and leaves at 75 s; bucket 1
	// stays until 90 s.
	now := t0.Add(80 * time.Second)
	if got := c.Admit(now, []Demand{dm(key, time.Minute, 100, 0)}).Remaining[0]; got != 95 {
		t.Errorf("remaining %d after the saturated bucket left, want 95 (the 5 that stay counted)", got)
	}
}

// TestRefundFromASaturatedWindowRecounts: a refund that empties the bucket
// holding math.MaxInt64 leaves counted exactly what the other buckets
// hold, not the saturated total minus the refund.
func TestRefundFromASaturatedWindowRecounts(t *testing.T) {
	const maxInt = 1<<63 - 1
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const key = "k/tokens/1m"
	c := New(Options{Buckets: 4})
	c.Adjust(t0, t0, key, time.Minute, maxInt)
	at := t0.Add(15 * time.Second)
	c.Adjust(at, at, key, time.Minute, 5)
	c.Adjust(t0, at, key, time.Minute, -maxInt)
	if got := c.Admit(at, []Demand{dm(key, time.Minute, 100, 0)}).Remaining[0]; got != 95 {
		t.Errorf("remaining %d after refunding the saturated bucket, want 95", got)
	}
}

// TestRetryAfterWhenTheOldestBucketFreesExactlyEnough: the retry-after of a
// refusal is when the oldest buckets that free at least the excess have
// left — here the oldest bucket alone frees exactly the excess, so it is
// that bucket's exit, not the next one's.
func TestRetryAfterWhenTheOldestBucketFreesExactlyEnough(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const key = "k/tokens/1m"
	c := New(Options{Buckets: 4})
	for _, a := range []struct {
		at     time.Duration
		amount int64
	}{{0, 4}, {15 * time.Second, 6}} {
		if !c.Admit(t0.Add(a.at), []Demand{dm(key, time.Minute, 10, a.amount)}).Admitted {
			t.Fatalf("%d at %v refused", a.amount, a.at)
		}
	}
	now := t0.Add(20 * time.Second)
	d := c.Admit(now, []Demand{dm(key, time.Minute, 10, 4)})
	// Excess 10+4-10 = 4, which bucket 0 (4) frees when it leaves at 75 s.
	if d.Admitted || d.RetryAfter != 55*time.Second {
		t.Errorf("%+v, want refused with retry-after 55s", d)
	}
}

// TestSortByKeyAscending: demands are locked in ascending key order at
// every size, by insertion sort up to stackDemands and by slices.SortFunc
// above, so that two calls never lock the same counters in opposite
// orders.
func TestSortByKeyAscending(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{2, 3, stackDemands, stackDemands + 1, 3 * stackDemands} {
		for round := range 20 {
			demands := make([]Demand, n)
			for i := range demands {
				demands[i].Key = fmt.Sprintf("k%02d", rng.IntN(n)) // repeats included
			}
			order := make([]int, n)
			for i := range order {
				order[i] = i
			}
			sortByKey(order, demands)
			keys := make([]string, n)
			for k, i := range order {
				keys[k] = demands[i].Key
			}
			if !slices.IsSorted(keys) {
				t.Fatalf("n=%d round %d: keys in order %v", n, round, keys)
			}
		}
	}
}

// Equivalent mutants gremlins leaves alive in this package:
//   - counter.go, advance: "idx <= ct.head" as "<": at idx == head the
//     loop from head+1 runs no step, and a saturated total recounts to
//     the same saturated sum.
//   - counter.go, advance: "idx-n+1" as "idx-n-1": on a jump of n or more
//     two more indices are visited, which map to slots the loop zeroes
//     again; each slot ends with the same idx and amount.
//   - counter.go, retryAfter: "j <= ct.head" as "<": when only the newest
//     bucket frees enough, the fallback after the loop returns that
//     bucket's exit, (head+B+1)·width − now, the same value.
//   - counter.go, sumAt: "idx <= ct.head" as "<": at idx == head the sum
//     over the slots still in the window is the total (saturating alike).
//   - limits.go, AdmitInto: "cs[i].pend > 0" as ">= 0": adding 0 changes
//     nothing.
//   - limits.go, Adjust: "delta > 0" as ">= 0": a zero delta has returned
//     before.
//   - limits.go, sortByKey: "len(order) > stackDemands" as ">=" or "<=":
//     both sorts give ascending order (TestSortByKeyAscending); only
//     which one runs changes.
//   - limits.go, sortByKey: "Key < Key" as "<=": equal keys swap, the
//     order stays ascending and the loop still ends.
