package spool

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/testctx"
)

// TestAttackSpoolPathIsADirectory: a regression guard. ledger.spool
// naming a directory (a volume's mount point, say) fails Open at once,
// naming the path; nothing is created inside the directory.
func TestAttackSpoolPathIsADirectory(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(testctx.Deadline(t), newMemSink(t), Options{Path: dir}, nil)
	if err == nil {
		t.Fatal("Open with a directory for the spool: nil error")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("Open left %d entries in the directory", len(entries))
	}
}

// TestAttackSpoolAndSinkBothDown: a regression guard for "acknowledged
// but kept nowhere". The spool's writes fail (the disk) while the sink
// is down too: no Append is acknowledged — each fails, or is still
// waiting when its context ends — and once the sink is back, every
// record whose Append returned nil is in it.
func TestAttackSpoolAndSinkBothDown(t *testing.T) {
	var diskBroken atomic.Bool
	s := newMemSink(t)
	l := openOn(t, s, Options{Path: spoolPath(t), IngestDelay: time.Millisecond, Fault: func(op string) error {
		if op == "spool" && diskBroken.Load() {
			return errors.New("injected: EIO")
		}
		return nil
	}})
	start(t, l)
	var acked []string
	if err := l.Append(testctx.Deadline(t), record("before")); err != nil {
		t.Fatal(err)
	}
	acked = append(acked, "before")
	diskBroken.Store(true)
	s.setFail(errDown)
	for _, id := range []string{"during1", "during2"} {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := l.Append(ctx, record(id))
		cancel()
		if err == nil {
			acked = append(acked, id)
			t.Errorf("Append(%s) acknowledged with the spool broken and the sink down: it is in neither", id)
		}
	}
	s.setFail(nil)
	if err := l.Append(testctx.Deadline(t), record("after")); err != nil {
		t.Fatalf("Append once the sink is back: %v", err)
	}
	acked = append(acked, "after")
	got := storedIDs(t, l)
	for _, id := range acked {
		if !slices.Contains(got, id) {
			t.Errorf("acknowledged %s is not in the sink (it holds %v)", id, got)
		}
	}
}
