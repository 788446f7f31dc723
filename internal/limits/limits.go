package limits

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/internal/sat"
)

// DefaultBuckets is the number of buckets per window when Options.Buckets is 0.
const DefaultBuckets = 60

const (
	numShards = 64
	// stackDemands is how many demands Admit handles without allocating
	// scratch space.
	stackDemands = 8
)

// Demand asks to add Amount to the counter Key, whose limit is Limit per
// sliding Period.
//
// An invalid Demand is a programmer error and makes Admit panic: Period must
// be positive and a multiple of the bucket count (buckets of at least 1ns),
// Limit must be positive, Amount must not be negative, and a Key must always
// be used with the same Period.
type Demand struct {
	Key    string        // counter identity, e.g. "key/key_abc/requests/1m"; the same Key must always be used with the same Period
	Period time.Duration // > 0
	Limit  int64         // > 0
	Amount int64         // >= 0; 0 only checks
}

// Decision is the outcome of Admit.
type Decision struct {
	// Admitted reports that every demand fitted and every Amount was counted.
	// When false, nothing was counted.
	Admitted bool
	// Denied is the index in demands of the binding demand (when
	// !Admitted): the first that can never fit if there is one, otherwise
	// the one that frees last.
	Denied int
	// RetryAfter is how long from now until every demand of the call would
	// fit again if nothing else were counted meanwhile, exact to the bucket
	// boundary: the longest wait among the demands that did not fit. It is
	// 0 when Impossible.
	RetryAfter time.Duration
	// Impossible reports that the denied demand can never fit: its Amount,
	// plus the Amounts of the other demands in the same call on the same
	// Key that come before it, exceeds its Limit.
	Impossible bool
	// Remaining holds, per demand and in the order of demands, its Limit
	// minus what its counter counts after this decision, floored at 0.
	Remaining []int64
	// Resets, filled by AdmitWithResets only, holds per demand how long
	// from now until everything its counter counts after this decision
	// has left the window — when its Remaining is the whole Limit again
	// if nothing else is counted: 0 for an empty counter.
	Resets []time.Duration
}

// Options configures Counters.
type Options struct {
	// Buckets is the number of buckets per window; 0 means DefaultBuckets.
	// A denial can last up to one bucket (Period/Buckets) longer than a
	// perfect sliding log would allow; each counter keeps Buckets+1 slots.
	Buckets int
}

// Counters holds sliding-window counters by key. It is safe for concurrent
// use. The zero value is not usable; call New.
type Counters struct {
	buckets int64
	seed    maphash.Seed
	live    atomic.Int64
	shards  [numShards]shard

	// testHookFetched, when set, runs between fetching counters and locking
	// them, to let tests sweep in the gap.
	testHookFetched func()
}

type shard struct {
	mu sync.RWMutex
	m  map[string]*counter
	_  [64]byte // keep neighbouring shards' locks off one cache line
}

// New returns empty Counters. A negative Options.Buckets is a programmer error
// and panics.
func New(opts Options) *Counters {
	b := opts.Buckets
	switch {
	case b == 0:
		b = DefaultBuckets
	case b < 0:
		panic(fmt.Sprintf("limits: Options.Buckets %d must not be negative", b))
	}
	c := &Counters{buckets: int64(b), seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string]*counter)
	}
	return c
}

// Admit either counts every demand's Amount, when all fit, or counts nothing.
// A demand fits when its counter's sum over the window, plus the Amounts of
// earlier demands in the call on the same Key, plus its Amount, is at most
// its Limit; the window at now counts the B+1 buckets that overlap
// (now−Period, now], the oldest one whole. Admit is atomic with respect to
// concurrent calls on overlapping keys. Duplicate keys in one call add up
// against their one counter.
//
// now is the caller's clock. A counter never moves backwards: a now older
// than the newest one a counter has seen is treated as that newest one.
//
// Admit panics on an invalid Demand (see Demand), a programmer error. It
// allocates Decision.Remaining; AdmitInto does not.
func (c *Counters) Admit(now time.Time, demands []Demand) Decision {
	return c.AdmitInto(now, demands, nil)
}

// AdmitInto is Admit writing Decision.Remaining into remaining's backing
// array when cap(remaining) >= len(demands), and into a new slice otherwise.
// With a reused slice and at most 8 demands on existing counters it does not
// allocate.
func (c *Counters) AdmitInto(now time.Time, demands []Demand, remaining []int64) Decision {
	return c.admit(now, demands, remaining, nil, false)
}

// AdmitWithResets is AdmitInto that also fills Decision.Resets, into
// resets' backing array when cap(resets) >= len(demands) and into a new
// slice otherwise.
func (c *Counters) AdmitWithResets(now time.Time, demands []Demand, remaining []int64, resets []time.Duration) Decision {
	if cap(resets) < len(demands) {
		resets = make([]time.Duration, len(demands))
	}
	return c.admit(now, demands, remaining, resets[:len(demands)], true)
}

func (c *Counters) admit(now time.Time, demands []Demand, remaining []int64, resets []time.Duration, withResets bool) Decision {
	n := len(demands)
	if cap(remaining) < n {
		remaining = make([]int64, n)
	}
	remaining = remaining[:n]
	if n == 0 {
		return Decision{Admitted: true, Remaining: remaining, Resets: resets}
	}

	var (
		cbuf [stackDemands]*counter
		obuf [stackDemands]int
		wbuf [stackDemands]int64
		ibuf [stackDemands]int64
	)
	cs, order, widths, idxs := cbuf[:0], obuf[:0], wbuf[:0], ibuf[:0]
	if n > stackDemands {
		cs, order = make([]*counter, 0, n), make([]int, 0, n)
		widths, idxs = make([]int64, 0, n), make([]int64, 0, n)
	}
	cs, order, widths, idxs = cs[:n], order[:n], widths[:n], idxs[:n]

	nowNs := now.UnixNano()
	for i := range demands {
		w := c.width(i, &demands[i])
		widths[i], idxs[i], order[i] = w, floorDiv(nowNs, w), i
	}
	sortByKey(order, demands)

	for {
		c.fetch(demands, order, widths, idxs, cs)
		if c.testHookFetched != nil {
			c.testHookFetched()
		}
		if lockAll(order, cs) {
			break
		}
	}

	// Move each counter to now and reset its scratch.
	for k, i := range order {
		if k > 0 && cs[i] == cs[order[k-1]] {
			continue
		}
		cs[i].advance(idxs[i])
		cs[i].pend = 0
	}

	// Every demand is evaluated, even after one has failed, so the
	// decision can name the binding one: a client told to retry after the
	// minute window frees must not find the day window still full.
	d := Decision{Admitted: true, Remaining: remaining}
	for i := range demands {
		dm, ct := &demands[i], cs[i]
		room := dm.Limit - ct.total // may be negative if the limit was lowered
		fits := ct.pend <= room && dm.Amount <= room-ct.pend
		ct.pend = sat.Add(ct.pend, dm.Amount)
		if fits {
			continue
		}
		first := d.Admitted
		d.Admitted = false
		switch {
		case ct.pend > dm.Limit:
			// The call's own amounts on this key exceed the limit.
			if !d.Impossible {
				d.Impossible, d.Denied, d.RetryAfter = true, i, 0
			}
		case d.Impossible:
		default:
			// pend <= Limit, so excess <= total: room will come. The
			// excess, total + pend - Limit, is computed so that no sum
			// saturates (a saturated one would understate it).
			ra := ct.retryAfter(ct.total-(dm.Limit-ct.pend), nowNs)
			if first || ra > d.RetryAfter {
				d.Denied, d.RetryAfter = i, ra
			}
		}
	}

	for k, i := range order {
		if k > 0 && cs[i] == cs[order[k-1]] {
			continue
		}
		if d.Admitted && cs[i].pend > 0 {
			cs[i].add(cs[i].pend)
		}
	}
	for i := range demands {
		remaining[i] = max(demands[i].Limit-cs[i].total, 0)
		if withResets {
			resets[i] = cs[i].resetAfter(nowNs)
		}
	}
	if withResets {
		d.Resets = resets
	}
	unlockAll(order, cs, n)
	return d
}

// width validates demands[i] and returns its bucket width in ns.
func (c *Counters) width(i int, d *Demand) int64 {
	p := int64(d.Period)
	switch {
	case p <= 0:
		invalid(i, d, "period must be positive")
	case d.Limit <= 0:
		invalid(i, d, "limit must be positive")
	case d.Amount < 0:
		invalid(i, d, "amount must not be negative")
	case p < c.buckets || p%c.buckets != 0:
		invalid(i, d, fmt.Sprintf("period does not divide into %d buckets of whole nanoseconds", c.buckets))
	}
	return p / c.buckets
}

//go:noinline
func invalid(i int, d *Demand, why string) {
	panic(fmt.Sprintf("limits: demands[%d] %q (period %v, limit %d, amount %d): %s",
		i, d.Key, d.Period, d.Limit, d.Amount, why))
}

// sortByKey sorts demand indices by Key.
func sortByKey(order []int, demands []Demand) {
	if len(order) > stackDemands {
		slices.SortFunc(order, func(a, b int) int { return strings.Compare(demands[a].Key, demands[b].Key) })
		return
	}
	for k := 1; k < len(order); k++ {
		for j := k; j > 0 && demands[order[j]].Key < demands[order[j-1]].Key; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
}

// fetch looks up (or creates) the counter of every demand, in key order, so
// that demands on one Key share one counter.
func (c *Counters) fetch(demands []Demand, order []int, widths, idxs []int64, cs []*counter) {
	for k, i := range order {
		if k > 0 && demands[i].Key == demands[order[k-1]].Key {
			cs[i] = cs[order[k-1]]
		} else {
			cs[i] = c.get(demands[i].Key, widths[i], idxs[i])
		}
		if cs[i].width != widths[i] {
			panic(fmt.Sprintf("limits: demands[%d] %q: period %v, but the key is used with period %v",
				i, demands[i].Key, demands[i].Period, time.Duration(cs[i].width*c.buckets)))
		}
	}
}

// get returns the live counter for key, creating it at bucket idx.
func (c *Counters) get(key string, width, idx int64) *counter {
	sh := &c.shards[maphash.String(c.seed, key)%numShards]
	sh.mu.RLock()
	ct := sh.m[key]
	sh.mu.RUnlock()
	if ct != nil {
		return ct
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if ct = sh.m[key]; ct == nil {
		ct = newCounter(width, c.buckets, idx)
		sh.m[key] = ct
		c.live.Add(1)
	}
	return ct
}

// lockAll locks the distinct counters of cs in key order. If one of them was
// swept, it unlocks everything and reports false: the caller must fetch
// again. It is never called with a shard lock held, and Sweep takes a
// counter's lock only under its shard's lock, so the two cannot deadlock.
func lockAll(order []int, cs []*counter) bool {
	for k, i := range order {
		if k > 0 && cs[i] == cs[order[k-1]] {
			continue
		}
		cs[i].mu.Lock()
		if cs[i].dead {
			unlockAll(order, cs, k+1)
			return false
		}
	}
	return true
}

// unlockAll unlocks the distinct counters among the first n of order.
func unlockAll(order []int, cs []*counter, n int) {
	for k, i := range order[:n] {
		if k > 0 && cs[i] == cs[order[k-1]] {
			continue
		}
		cs[i].mu.Unlock()
	}
}

// Sweep drops the counters that count nothing in their window at now, so
// memory is bounded by the keys active in the last period. It returns how
// many it dropped. A counter in use by a concurrent Admit is either kept or
// dropped before that Admit counts in it; no count is lost.
func (c *Counters) Sweep(now time.Time) int {
	nowNs := now.UnixNano()
	dropped := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for key, ct := range sh.m {
			ct.mu.Lock()
			if ct.sumAt(floorDiv(nowNs, ct.width)) == 0 {
				ct.dead = true
				delete(sh.m, key)
				dropped++
			}
			ct.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	c.live.Add(-int64(dropped))
	return dropped
}

// Len reports how many counters are live.
func (c *Counters) Len() int {
	return int(c.live.Load())
}

// Run calls Sweep with the wall clock every interval until ctx ends, then
// returns nil. A non-positive interval is an error.
func (c *Counters) Run(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("limits: sweep interval %v must be positive", interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.Sweep(time.Now())
		}
	}
}

// PeriodName names a window for error messages: minute, hour, day, or the
// duration.
func PeriodName(p time.Duration) string {
	switch p {
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	case 24 * time.Hour:
		return "day"
	}
	return p.String()
}

// Adjust corrects what an earlier Admit counted on key at time at, once
// the real amount is known (a reservation settled): a negative delta is
// taken back from the bucket that holds at — only while that bucket is
// still in the window, and never below zero, so a window never forgets
// more than it counted — and a positive delta (the real use exceeded the
// reservation) is counted now, in the newest bucket. period must be the
// one the key is always used with.
func (c *Counters) Adjust(at, now time.Time, key string, period time.Duration, delta int64) {
	if delta == 0 {
		return
	}
	d := Demand{Key: key, Period: period, Limit: 1}
	w := c.width(0, &d)
	nowIdx := floorDiv(now.UnixNano(), w)
	for {
		ct := c.get(key, w, nowIdx)
		if ct.width != w {
			panic(fmt.Sprintf("limits: Adjust %q: period %v, but the key is used with period %v", key, period, time.Duration(ct.width*c.buckets)))
		}
		ct.mu.Lock()
		if ct.dead {
			ct.mu.Unlock()
			continue
		}
		head := ct.advance(nowIdx)
		if delta > 0 {
			ct.add(delta)
		} else if j := floorDiv(at.UnixNano(), w); j >= head-ct.buckets() && j <= head {
			s := ct.slot(j)
			take := min(-max(delta, -sat.Max), s.amt)
			saturated := ct.total == sat.Max
			s.amt -= take
			ct.total -= take
			if saturated {
				ct.recount()
			}
		}
		ct.mu.Unlock()
		return
	}
}
