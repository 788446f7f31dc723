package gcfloor

import (
	"context"
	"math/bits"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Floor sets the GC percentage from the live heap and the allocation
// rate.
type Floor struct {
	// Headroom is the least the heap may grow past the live heap before a
	// collection, while the process allocates at least an eighth of it an
	// Interval; below that rate the collector runs seldom anyway, and GOGC's
	// default keeps an idle process's heap (and what the scavenger hands
	// back) small.
	Headroom uint64
	// Interval is how often the heap is read.
	Interval time.Duration
	// Read returns the live heap and the bytes allocated since the start,
	// and Set sets the GC percentage and returns the previous one:
	// runtime/metrics' /gc/heap/live:bytes and /gc/heap/allocs:bytes, and
	// debug.SetGCPercent, when nil.
	Read func() (live, allocs uint64)
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

// Run sets the percentage every Interval until ctx ends — Percent(live,
// Headroom) while an Interval's allocation reaches Headroom/8, else
// MinPercent — then restores the percentage it found. It starts at
// MinPercent, changes the percentage only when it moves by more than an
// eighth (setting it stops the world), and returns nil.
func (f Floor) Run(ctx context.Context) error {
	read, set := f.Read, f.Set
	if read == nil {
		read = heap
	}
	if set == nil {
		set = debug.SetGCPercent
	}
	interval := f.Interval
	if interval <= 0 {
		interval = time.Second
	}
	cur := MinPercent
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
		live, allocs := read()
		p := MinPercent
		if allocs-last >= f.Headroom/8 {
			p = Percent(live, f.Headroom)
		}
		last = allocs
		if p > cur+cur/8 || p < cur-cur/8 {
			set(p)
			cur = p
		}
	}
}

// heap reads the heap the last collection found live and the bytes
// allocated since the start.
func heap() (live, allocs uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		live = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		allocs = s[1].Value.Uint64()
	}
	return live, allocs
}
