package gcfloor

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, headroom uint64
		want           int
	}{
		{0, 32 * mib, MinPercent},
		{1, 32 * mib, MaxPercent},
		{4 * mib, 32 * mib, 800},
		{8 * mib, 32 * mib, 400},
		{32 * mib, 32 * mib, MinPercent},
		{64 * mib, 32 * mib, MinPercent},
		{1 << 62, 32 * mib, MinPercent},
		{4 * mib, 0, MinPercent},
		{1, 1 << 63, MaxPercent}, // no overflow to a small percentage
		{1 << 62, 1<<63 + 1<<62, 300},
		{1<<64 - 1, 1<<64 - 1, MinPercent},
	} {
		if got := Percent(c.live, c.headroom); got != c.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", c.live, c.headroom, got, c.want)
		}
	}
}

// TestRun: Run follows the live heap it reads, leaves small moves alone,
// and restores the percentage it found when its context ends.
func TestRun(t *testing.T) {
	const mib = 1 << 20
	var mu sync.Mutex
	live, pct := uint64(4*mib), 100
	var sets []int
	read := make(chan struct{}, 100)
	f := Floor{
		Headroom: 32 * mib,
		Interval: time.Millisecond,
		Live: func() uint64 {
			mu.Lock()
			defer mu.Unlock()
			select {
			case read <- struct{}{}:
			default:
			}
			return live
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
	waitReads := func(n int) {
		for range n {
			<-read
		}
	}
	waitReads(2)
	mu.Lock()
	if pct != 800 {
		t.Errorf("percent %d with 4 MiB live, want 800", pct)
	}
	live = 4*mib + mib/4 // 753%: within an eighth of 800, left alone
	mu.Unlock()
	waitReads(3)
	mu.Lock()
	if pct != 800 {
		t.Errorf("percent %d after a small move, want 800 kept", pct)
	}
	live = 64 * mib
	mu.Unlock()
	waitReads(3)
	mu.Lock()
	if pct != MinPercent {
		t.Errorf("percent %d with 64 MiB live, want %d", pct, MinPercent)
	}
	mu.Unlock()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if pct != 100 || len(sets) != 3 {
		t.Errorf("after Run: percent %d, sets %v; want 100 restored after [800 100 100]", pct, sets)
	}
}

// TestLiveHeap: the runtime reports a live heap.
func TestLiveHeap(t *testing.T) {
	runtime.GC()
	if liveHeap() == 0 {
		t.Error("/gc/heap/live:bytes read 0")
	}
}
