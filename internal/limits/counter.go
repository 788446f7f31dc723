package limits

import (
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/sat"
)

// slot is one bucket of a ring: the bucket index it holds and the amount
// counted in it.
type slot struct {
	idx int64
	amt int64
}

// counter is one sliding window: a ring of B+1 slots of width ns each.
//
// Invariant (under mu): the slots hold exactly the bucket indices
// head−B … head, one each, and total is the sum of their amounts. Buckets
// older than head−B have been zeroed and reused by advance.
type counter struct {
	mu    sync.Mutex
	width int64 // bucket width in ns; immutable after creation
	dead  bool  // removed from its shard by Sweep: holders must re-fetch
	head  int64 // newest bucket index seen
	total int64 // sum of slots[*].amt
	pend  int64 // amount one Admit call is adding; scratch, valid under mu
	slots []slot
}

func newCounter(width int64, buckets int64, idx int64) *counter {
	ct := &counter{width: width, head: idx, slots: make([]slot, buckets+1)}
	for j := idx - buckets; j <= idx; j++ {
		ct.slot(j).idx = j
	}
	return ct
}

// buckets is B, the number of buckets in the window.
func (ct *counter) buckets() int64 { return int64(len(ct.slots)) - 1 }

// slot returns the slot that holds, or would hold, bucket index j.
func (ct *counter) slot(j int64) *slot {
	n := int64(len(ct.slots))
	k := j % n
	if k < 0 {
		k += n
	}
	return &ct.slots[k]
}

// advance moves the window so that idx is its newest bucket, zeroing the
// buckets that leave the span, and returns the counter's current bucket
// index. A counter's clock never goes backwards: an idx older than head is
// treated as head.
func (ct *counter) advance(idx int64) int64 {
	if idx <= ct.head {
		return ct.head
	}
	n := int64(len(ct.slots))
	from := max(ct.head+1, idx-n+1) // a jump of n or more rewrites every slot
	saturated := ct.total == sat.Max
	for j := from; j <= idx; j++ {
		s := ct.slot(j)
		ct.total -= s.amt
		s.amt, s.idx = 0, j
	}
	if saturated {
		ct.recount()
	}
	ct.head = idx
	return idx
}

// recount sets total from the slots. A saturated total is below the
// slots' true sum, so taking an amount out of it must recount what is left
// rather than forget more than left.
func (ct *counter) recount() {
	ct.total = 0
	for i := range ct.slots {
		ct.total = sat.Add(ct.total, ct.slots[i].amt)
	}
}

// sumAt returns what the window would count at bucket index idx, without
// moving it.
func (ct *counter) sumAt(idx int64) int64 {
	if idx <= ct.head {
		return ct.total
	}
	oldest := idx - ct.buckets()
	var sum int64
	for i := range ct.slots {
		if ct.slots[i].idx >= oldest {
			sum = sat.Add(sum, ct.slots[i].amt)
		}
	}
	return sum
}

// add counts amt in the newest bucket, saturating (internal/sat): a use
// reported far beyond any limit fills the window, never wraps it.
func (ct *counter) add(amt int64) {
	s := ct.slot(ct.head)
	s.amt = sat.Add(s.amt, amt)
	ct.total = sat.Add(ct.total, amt)
}

// retryAfter returns how long after nowNs enough of the oldest buckets will
// have left the span to free excess (0 < excess <= total). Bucket j is
// counted up to and including index j+B, so it leaves at (j+B+1)·width.
func (ct *counter) retryAfter(excess, nowNs int64) time.Duration {
	b := ct.buckets()
	var freed int64
	for j := ct.head - b; j <= ct.head; j++ {
		freed = sat.Add(freed, ct.slot(j).amt)
		if freed >= excess {
			return time.Duration((j+b+1)*ct.width - nowNs)
		}
	}
	// Unreachable while excess <= total; when every bucket has left, the
	// whole limit is free.
	return time.Duration((ct.head+b+1)*ct.width - nowNs)
}

// resetAfter returns how long after nowNs every amount the window counts
// has left the span — its newest non-empty bucket j leaves at
// (j+B+1)·width, as in retryAfter — or 0 when it counts nothing.
func (ct *counter) resetAfter(nowNs int64) time.Duration {
	b := ct.buckets()
	for j := ct.head; j >= ct.head-b; j-- {
		if ct.slot(j).amt != 0 {
			return max(time.Duration((j+b+1)*ct.width-nowNs), 0)
		}
	}
	return 0
}

// floorDiv is a/b rounded towards negative infinity, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
