package gcpace

import (
	"context"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		base, headroom uint64
		want           int
	}{
		{0, 32 * mib, DefaultPercent},
		{1, 32 * mib, MaxPercent},
		{4 * mib, 32 * mib, 800},
		{8 * mib, 32 * mib, 400},
		{32 * mib, 32 * mib, 100},
		{64 * mib, 32 * mib, 50},
		{100 * mib, 32 * mib, 32},
		{128 * mib, 32 * mib, LeastPercent},
		{1 << 62, 32 * mib, LeastPercent},
		{4 * mib, 0, LeastPercent},
		{1, 1 << 63, MaxPercent}, // no overflow to a small percentage
		{1 << 62, 1<<63 + 1<<62, 300},
		{1<<64 - 1, 1<<64 - 1, 100},
	} {
		if got := Percent(c.base, c.headroom); got != c.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", c.base, c.headroom, got, c.want)
		}
	}
}

// TestRun: Run follows the heap while the process allocates at least an
// eighth of the headroom an interval, below that rate goes no higher than
// GOGC's default, leaves small moves alone, and restores the percentage
// it found when its context ends.
func TestRun(t *testing.T) {
	const mib = 1 << 20
	var mu sync.Mutex
	live, allocs, rate, pct := uint64(4*mib), uint64(0), uint64(0), 50
	var sets []int
	read := make(chan struct{}) // a signal only reaches a step waiting for it: no stale ones
	f := Pacer{
		Headroom: 32 * mib,
		Interval: time.Millisecond,
		Read: func() (uint64, uint64) {
			mu.Lock()
			defer mu.Unlock()
			allocs += rate
			select {
			case read <- struct{}{}:
			default:
			}
			return live, allocs
		},
		Set: func(p int) int {
			mu.Lock()
			defer mu.Unlock()
			old := pct
			pct = p
			sets = append(sets, p)
			return old
		},
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	step := func(what string, set func(), want int) {
		t.Helper()
		mu.Lock()
		set()
		mu.Unlock()
		for range 3 { // the change is read by the second read after it
			<-read
		}
		mu.Lock()
		defer mu.Unlock()
		if pct != want {
			t.Errorf("%s: percent %d, want %d", what, pct, want)
		}
	}
	step("idle, 4 MiB live", func() {}, DefaultPercent)
	step("3 MiB an interval", func() { rate = 3 * mib }, DefaultPercent)
	step("4 MiB an interval", func() { rate = 4 * mib }, 800)
	step("a small move of the live heap", func() { live = 4*mib + mib/4 }, 800)
	step("64 MiB live", func() { live = 64 * mib }, 50)
	step("8 MiB live", func() { live = 8 * mib }, 400)
	step("idle again", func() { rate = 0 }, DefaultPercent)
	step("idle, 256 MiB live", func() { live = 256 * mib }, LeastPercent)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := []int{100, 800, 50, 400, 100, 25, 50}; pct != 50 || !slices.Equal(sets, want) {
		t.Errorf("after Run: percent %d, sets %v; want 50 restored, sets %v", pct, sets, want)
	}
}

// TestHeap: the runtime reports a live heap and allocations.
func TestHeap(t *testing.T) {
	runtime.GC()
	runtime.GC()
	base, allocs := heap()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	// Right after a collection the heap is about what it found live, and
	// the base is that and more (the stacks, the globals).
	if base < m.HeapAlloc/2 || allocs == 0 {
		t.Errorf("heap() = %d base, %d allocated; the runtime's heap is %d", base, allocs, m.HeapAlloc)
	}
}

// gcPercent reads the GC percentage.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestStartUp: the percentage is raised so that the first goal is the
// headroom, and restored after the first collection or by done.
func TestStartUp(t *testing.T) {
	prev := debug.SetGCPercent(150)
	defer debug.SetGCPercent(prev)

	done := StartUp(32 << 20)
	if got := gcPercent(); got != 800 {
		t.Fatalf("after StartUp(32 MiB) the GC percentage is %d, want 800", got)
	}
	runtime.GC()
	deadline := time.Now().Add(10 * time.Second)
	for gcPercent() != 150 {
		if time.Now().After(deadline) {
			t.Fatalf("10 s after a collection the GC percentage is %d, want 150 back", gcPercent())
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	debug.SetGCPercent(170)
	done() // after the collection restored it: does nothing
	if got := gcPercent(); got != 170 {
		t.Fatalf("done after the restore set the GC percentage to %d; want it left at 170", got)
	}

	debug.SetGCPercent(150)
	done = StartUp(64 << 20)
	if got := gcPercent(); got != 1600 {
		t.Fatalf("after StartUp(64 MiB) the GC percentage is %d, want 1600", got)
	}
	done()
	if got := gcPercent(); got != 150 {
		t.Fatalf("after done the GC percentage is %d, want 150", got)
	}

	for _, h := range []uint64{0, 1, 4 << 20} {
		StartUp(h)()
		if got := gcPercent(); got != 150 {
			t.Errorf("StartUp(%d) set the GC percentage to %d; a headroom no larger than the least goal should leave it", h, got)
		}
	}
	StartUp(1 << 63)()
	if got := gcPercent(); got != 150 {
		t.Errorf("StartUp(2^63) then done left the GC percentage at %d, want 150", got)
	}
}
