package spool

import (
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/sluicegw/sluice/internal/testctx"
)

// TestSpoolReserveWhenDiskFull: when the disk fills (the spool cannot
// grow), the records of requests already answered are still written,
// durably, into the reserve the spool grew ahead of them, and the ledger
// says it is degraded — new requests must not be admitted — until the
// disk has room again, when the committer grows the reserve back. Every
// record appended is in the ledger.
func TestSpoolReserveWhenDiskFull(t *testing.T) {
	var full atomic.Bool
	l := openTest(t, Options{Path: spoolPath(t), Fault: func(op string) error {
		if op == "grow" && full.Load() {
			return syscall.ENOSPC
		}
		return nil
	}})
	start(t, l)
	ctx := testctx.Deadline(t)
	big := strings.Repeat("m", 4<<10) // 4 KiB records: the reserve is reached after a few hundred
	n := 0
	appendOne := func() {
		t.Helper()
		r := record(fmt.Sprintf("r%04d", n))
		r.UpstreamModel = big
		if err := l.Append(ctx, r); err != nil {
			t.Fatalf("record %d: %v", n, err)
		}
		n++
	}
	appendOne()
	if err := l.Degraded(); err != nil {
		t.Fatalf("degraded with room on the disk: %v", err)
	}
	full.Store(true)
	for l.Degraded() == nil {
		if n > 2*int(growStep+spoolReserve)/len(big) {
			t.Fatalf("still not degraded after %d records with the disk full", n)
		}
		appendOne()
	}
	if err := l.Degraded(); !strings.Contains(err.Error(), "reserve") {
		t.Errorf("Degraded = %v", err)
	}
	// The answered requests' records still go in, into the reserve.
	for range 50 {
		appendOne()
	}
	full.Store(false)
	testctx.Wait(t, "the ledger to leave its degraded state with room on the disk", func() bool { return l.Degraded() == nil })
	recs, err := records(ctx, l)
	if err != nil || len(recs) != n {
		t.Fatalf("Records: %d, %v; want %d", len(recs), err, n)
	}
}
