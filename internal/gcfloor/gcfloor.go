package gcfloor

import (
	"context"
	"math/bits"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Floor sets the GC percentage from the live heap.
type Floor struct {
	// Headroom is the least the heap may grow past the live heap before a
	// collection.
	Headroom uint64
	// Interval is how often the live heap is read.
	Interval time.Duration
	// Live reads the live heap in bytes, and Set sets the GC percentage
	// and returns the previous one: runtime/metrics' /gc/heap/live:bytes
	// and debug.SetGCPercent when nil.
	Live func() uint64
	Set  func(int) int
}

// Default GC percentages: GOGC's default, and the most a Floor sets.
const (
	MinPercent = 100
	MaxPercent = 2000
)

// Percent is the GC percentage whose goal is at least live + headroom:
// headroom/live × 100, within [MinPercent, MaxPercent]. A live heap of 0
// (no collection has run yet) is unknown and gets MinPercent: GOGC's
// default governs the first cycle.
func Percent(live, headroom uint64) int {
	if live == 0 {
		return MinPercent
	}
	if headroom/live >= MaxPercent/100 {
		return MaxPercent
	}
	// headroom × 100 / live in 128 bits: the quotient is below MaxPercent,
	// so the high word is below live, as Div64 needs.
	hi, lo := bits.Mul64(headroom, 100)
	p, _ := bits.Div64(hi, lo, live)
	return int(max(p, MinPercent))
}

// Run keeps the percentage at Percent(live, Headroom) until ctx ends,
// then restores the percentage it found. It changes the percentage only
// when it moves by more than an eighth (setting it stops the world), and
// returns nil.
func (f Floor) Run(ctx context.Context) error {
	live, set := f.Live, f.Set
	if live == nil {
		live = liveHeap
	}
	if set == nil {
		set = debug.SetGCPercent
	}
	interval := f.Interval
	if interval <= 0 {
		interval = time.Second
	}
	cur := Percent(live(), f.Headroom)
	prev := set(cur)
	defer set(prev)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if p := Percent(live(), f.Headroom); p > cur+cur/8 || p < cur-cur/8 {
			set(p)
			cur = p
		}
	}
}

// liveHeap is the heap the last collection found live.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
