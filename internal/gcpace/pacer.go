package gcpace

import (
	"context"
	"math/bits"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Pacer sets the GC percentage from the heap and the allocation rate.
type Pacer struct {
	// Headroom is how far the heap may grow past what the last collection
	// found live before the next one, while the process allocates at least
	// an eighth of it an Interval: the collector then runs once per
	// Headroom allocated, however large the heap. Below that rate the
	// collector runs seldom anyway, and the goal is the smaller of that
	// and GOGC's default, so an idle process's heap (and what the
	// scavenger hands back) stays small.
	Headroom uint64
	// Interval is how often the heap is read.
	Interval time.Duration
	// Read returns what the runtime scales the GC percentage by — the live
	// heap, the stacks in use and the globals, the last collection's — and
	// the bytes allocated since the start; Set sets the GC percentage and
	// returns the previous one: runtime/metrics' /gc/heap/live:bytes,
	// /gc/scan/stack:bytes, /gc/scan/globals:bytes and
	// /gc/heap/allocs:bytes, and debug.SetGCPercent, when nil.
	Read func() (base, allocs uint64)
	Set  func(int) int
}

// GC percentages: GOGC's default, and the least and the most a Pacer
// sets.
const (
	DefaultPercent = 100
	LeastPercent   = 25
	MaxPercent     = 2000
)

// Percent is the GC percentage whose goal is base + headroom:
// headroom/base × 100, within [LeastPercent, MaxPercent]. The runtime's
// goal is the live heap plus base × percent/100 (runtime/mgcpacer.go), so
// the heap may grow by headroom, never by less than a quarter of base.
// A base of 0 (no collection has run yet) is unknown and gets
// DefaultPercent: GOGC's default governs the first cycle.
func Percent(base, headroom uint64) int {
	if base == 0 {
		return DefaultPercent
	}
	if headroom/base >= MaxPercent/100 {
		return MaxPercent
	}
	// headroom × 100 / base in 128 bits: the quotient is below MaxPercent,
	// so the high word is below base, as Div64 needs.
	hi, lo := bits.Mul64(headroom, 100)
	p, _ := bits.Div64(hi, lo, base)
	return int(max(p, LeastPercent))
}

// Run sets the percentage every Interval until ctx ends — Percent(base,
// Headroom) while an Interval's allocation reaches Headroom/8, else the
// smaller of that and DefaultPercent — then restores the percentage it
// found. It starts at DefaultPercent, changes the percentage only when it
// moves by more than an eighth (setting it stops the world), and returns
// nil.
func (pc Pacer) Run(ctx context.Context) error {
	read, set := pc.Read, pc.Set
	if read == nil {
		read = heap
	}
	if set == nil {
		set = debug.SetGCPercent
	}
	interval := pc.Interval
	if interval <= 0 {
		interval = time.Second
	}
	cur := DefaultPercent
	prev := set(cur)
	defer set(prev)
	_, last := read()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		base, allocs := read()
		p := Percent(base, pc.Headroom)
		if allocs-last < pc.Headroom/8 {
			p = min(p, DefaultPercent)
		}
		last = allocs
		if p > cur+cur/8 || p < cur-cur/8 {
			set(p)
			cur = p
		}
	}
}

// heap reads what the last collection found live (heap, stacks and
// globals) and the bytes allocated since the start.
func heap() (base, allocs uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	if live := v(0); live > 0 {
		base = live + v(1) + v(2)
	}
	return base, v(3)
}
