package gcpace

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// minHeapGoal is the runtime's least heap goal at GOGC 100, 4 MiB: it
// scales with the GC percentage (runtime/mgcpacer.go, heapMinimum).
const minHeapGoal = 4 << 20

// StartUp has the process's first collection wait until its heap is
// about headroom, then puts the GC percentage back as it found it: after
// that collection, or when done is called, whichever comes first.
//
// A process starting from nothing collects at a 4 MiB heap, then 8, 16:
// each cycle finds almost everything still live (the config, the keys),
// and costs its fixed work (starting the mark workers, scanning stacks
// and globals). A start that stays under headroom collects not at all; a
// larger one collects once at headroom and then at GOGC's proportion.
func StartUp(headroom uint64) (done func()) {
	p := int(min(headroom, 1<<40) * 100 / minHeapGoal)
	if p <= DefaultPercent {
		return func() {}
	}
	prev := debug.SetGCPercent(p)
	var once sync.Once
	restore := func() { once.Do(func() { debug.SetGCPercent(prev) }) }
	// The cleanup runs once a collection has found its object
	// unreachable, which the first one does. The object is not a tiny
	// allocation (the runtime packs those together, and does not promise
	// their cleanups run).
	runtime.AddCleanup(new([64]byte), func(struct{}) { restore() }, struct{}{})
	return restore
}
