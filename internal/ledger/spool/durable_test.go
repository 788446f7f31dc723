package spool

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicegw/sluice/internal/testctx"
)

// powerLossFile is a File that keeps what a power loss would leave
// of the file: its content as of the last Sync or SyncData that returned.
// A killed process keeps the page cache, so only this, not a crash test,
// sees a missing sync.
type powerLossFile struct {
	File
	mu      sync.Mutex
	durable []byte
}

func (w *powerLossFile) Sync() error     { return w.synced(w.File.Sync()) }
func (w *powerLossFile) SyncData() error { return w.synced(w.File.SyncData()) }

// synced takes the file's content as durable once a sync returned nil.
// Only the committer writes the spool, and it is here: nothing writes
// between the sync and the read.
func (w *powerLossFile) synced(err error) error {
	if err != nil {
		return err
	}
	f, ok := w.File.(osFile)
	if !ok {
		return errors.New("powerLossFile: not over an os file")
	}
	b, err := io.ReadAll(io.NewSectionReader(f.File, 0, 1<<40))
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.durable = b
	w.mu.Unlock()
	return nil
}

// image is what a power loss now would leave.
func (w *powerLossFile) image() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.durable)
}

// TestAppendAcknowledgedOnlyWhenSynced: an Append returns only once a
// sync of the spool covered its frame, and the spool as of its syncs —
// what a power loss leaves — replays every acknowledged record into a
// ledger that has nothing else (the sink's commits held back, so the
// records are nowhere but in the spool).
func TestAppendAcknowledgedOnlyWhenSynced(t *testing.T) {
	if !canLock {
		t.Skip("no spool where files cannot be locked")
	}
	var held atomic.Bool
	held.Store(true)
	var w *powerLossFile
	path := spoolPath(t)
	l := openTest(t, Options{
		Path: path,
		Fault: func(op string) error {
			if op == "commit" && held.Load() {
				return errors.New("commits held back by the test")
			}
			return nil
		},
		OnError: func(error) {},
		File: func(f File) File {
			if f.(osFile).Name() != path { // the spool's directory, synced
				return f
			}
			w = &powerLossFile{File: f}
			return w
		},
	})
	stop := startRun(t, l, false)
	ctx := testctx.Deadline(t)
	const n = 200
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				id := fmt.Sprintf("req_%04d", i)
				if err := l.Append(ctx, record(id)); err != nil {
					t.Errorf("Append(%s): %v", id, err)
					return
				}
				// Acknowledged: a sync returned after its frame was written.
				if !bytes.Contains(w.image(), []byte(id)) {
					t.Errorf("Append(%s) returned before a sync covered its frame", id)
				}
			}
		})
	}
	wg.Wait()

	// The power fails now: a new ledger, on a new, empty sink, beside the
	// spool's synced bytes.
	again := spoolPath(t)
	if err := os.WriteFile(again, w.image(), 0o600); err != nil {
		t.Fatal(err)
	}
	after := openTest(t, Options{Path: again})
	recs, err := records(ctx, after)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range recs {
		got[r.RequestID] = true
	}
	for i := range n {
		if id := fmt.Sprintf("req_%04d", i); !got[id] {
			t.Errorf("acknowledged %s lost with the power", id)
		}
	}
	if len(recs) != n {
		t.Errorf("%d records after the power loss; want %d", len(recs), n)
	}
	checkAggregates(t, after)

	held.Store(false)
	if err := stop(); err != nil {
		t.Errorf("Run, its commits let go: %v", err)
	}
}

// TestSpoolBacklogMetrics: while the sink takes nothing, the records wait
// in the spool — Backlog counts them and OldestSpooled is how long the
// first has waited; once the sink takes them, both are 0 and Ingested
// counts them.
func TestSpoolBacklogMetrics(t *testing.T) {
	if !canLock {
		t.Skip("no spool where files cannot be locked")
	}
	var held atomic.Bool
	held.Store(true)
	l := openTest(t, Options{
		Path: spoolPath(t),
		Fault: func(op string) error {
			if op == "commit" && held.Load() {
				return errors.New("commits held back by the test")
			}
			return nil
		},
		OnError: func(error) {},
	})
	stop := startRun(t, l, false)
	ctx := testctx.Deadline(t)
	for _, id := range []string{"a", "b", "c"} {
		if err := l.Append(ctx, record(id)); err != nil {
			t.Fatal(err)
		}
	}
	first := l.OldestSpooled()
	testctx.Wait(t, "the oldest spooled record to age", func() bool { return l.OldestSpooled() > first })
	if l.Backlog() != 3 || l.Ingested() != 0 {
		t.Errorf("held: backlog %d, ingested %d; want 3 and 0", l.Backlog(), l.Ingested())
	}
	held.Store(false)
	testctx.Wait(t, "the sink to take the spooled records", func() bool { return l.Backlog() == 0 })
	if l.OldestSpooled() != 0 || l.Ingested() != 3 {
		t.Errorf("taken: oldest %v, ingested %d; want 0 and 3", l.OldestSpooled(), l.Ingested())
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
}

// TestSpoolBoundWhileBehind: while the sink takes nothing, the spool
// grows; past Options.MaxBytes the ledger is degraded (it takes the
// answered requests' records, and serve takes no new requests) — and
// still takes records — until the sink has caught up.
func TestSpoolBoundWhileBehind(t *testing.T) {
	if !canLock {
		t.Skip("no spool where files cannot be locked")
	}
	var held atomic.Bool
	held.Store(true)
	const bound = 8 << 10
	l := openTest(t, Options{
		Path:     spoolPath(t),
		MaxBytes: bound,
		Fault: func(op string) error {
			if op == "commit" && held.Load() {
				return errors.New("commits held back by the test")
			}
			return nil
		},
		OnError: func(error) {},
	})
	stop := startRun(t, l, false)
	ctx := testctx.Deadline(t)
	n := 0
	for ; l.spoolEnd.Load() <= bound; n++ {
		if err := l.Degraded(); err != nil {
			t.Fatalf("degraded at %d bytes of frames, under the bound: %v", l.spoolEnd.Load(), err)
		}
		if err := l.Append(ctx, record(fmt.Sprintf("r%04d", n))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Degraded(); err == nil || !strings.Contains(err.Error(), "memSink is behind") {
		t.Fatalf("%d records (%d bytes of frames) past a bound of %d, the sink behind: Degraded = %v", n, l.spoolEnd.Load(), bound, err)
	}
	// The bound itself is within it. (Nothing else reads MaxBytes, and
	// no frame is written meanwhile.)
	l.opts.MaxBytes = l.spoolEnd.Load()
	if err := l.Degraded(); err != nil {
		t.Fatalf("frames ending exactly at the bound: Degraded = %v; want nil", err)
	}
	l.opts.MaxBytes = bound
	if err := l.Append(ctx, record("answered")); err != nil {
		t.Fatalf("an answered request's record while degraded: %v", err)
	}
	held.Store(false)
	testctx.Wait(t, "the ledger to leave its degraded state once the sink caught up", func() bool { return l.Degraded() == nil })
	recs, err := records(ctx, l)
	if err != nil || len(recs) != n+1 {
		t.Errorf("Records: %d, %v; want %d", len(recs), err, n+1)
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
}

// TestFailedStopKeepsTheSpool: a Run that ends while the sink takes
// nothing returns the error that left the acknowledged records in the
// spool, and leaves them there: it does not rewind it. The next Open
// replays them.
func TestFailedStopKeepsTheSpool(t *testing.T) {
	if !canLock {
		t.Skip("no spool where files cannot be locked")
	}
	path := spoolPath(t)
	s := newMemSink(t)
	l := openOn(t, s, Options{
		Path: path,
		Fault: func(op string) error {
			return map[bool]error{true: errors.New("the sink takes nothing")}[op == "commit"]
		},
		OnError: func(error) {},
	})
	stop := startRun(t, l, false)
	ctx := testctx.Deadline(t)
	for i := range 5 {
		if err := l.Append(ctx, record(fmt.Sprintf("kept%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := stop(); err == nil || !strings.Contains(err.Error(), "stay in the spool") {
		t.Fatalf("Run = %v; want the error that left the records in the spool", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(s.all()); n != 0 {
		t.Fatalf("the sink holds %d records; the test wants them in the spool alone", n)
	}
	again := openOn(t, s, Options{Path: path})
	recs, err := records(ctx, again)
	if err != nil || len(recs) != 5 {
		t.Fatalf("after the next Open: %d records, %v; want the 5 acknowledged", len(recs), err)
	}
	checkAggregates(t, again)
}

// fileLog is a File wrapper (Options.File) that logs, in order, the
// writes and syncs made to every file the spool opens, by base name.
type fileLog struct {
	mu  sync.Mutex
	ops []string
}

func (l *fileLog) wrap(f File) File {
	return &loggedFile{File: f, name: filepath.Base(f.(osFile).Name()), log: l}
}

func (l *fileLog) add(op string) {
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
}

func (l *fileLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ops := l.ops
	l.ops = nil
	return ops
}

type loggedFile struct {
	File
	name string
	log  *fileLog
}

func (f *loggedFile) WriteAt(p []byte, off int64) (int, error) {
	f.log.add("write " + f.name)
	return f.File.WriteAt(p, off)
}
func (f *loggedFile) Sync() error     { f.log.add("sync " + f.name); return f.File.Sync() }
func (f *loggedFile) SyncData() error { f.log.add("syncdata " + f.name); return f.File.SyncData() }

// TestNewFilesSyncedWithTheirDirectory: a new spool's directory entry is
// synced before anything is written to it, and only a new one's; a
// damaged spool's copy is written, synced, and its directory entry
// synced, all before the spool is rewound — so a power loss right after
// Open loses neither the spool nor the copy.
func TestNewFilesSyncedWithTheirDirectory(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Base(dir)
	path := filepath.Join(dir, "ledger"+Suffix)
	var log fileLog
	l := openTest(t, Options{Path: path, File: log.wrap})
	if ops := log.take(); len(ops) == 0 || ops[0] != "sync "+base || slices.Index(ops[1:], "sync "+base) >= 0 {
		t.Fatalf("opening a new spool: %q; want its directory synced first, once", ops)
	}
	stop := start(t, l)
	if err := l.Append(testctx.Deadline(t), record("a")); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	log.take()

	l = openTest(t, Options{Path: path, File: log.wrap})
	if ops := log.take(); slices.Contains(ops, "sync "+base) {
		t.Fatalf("opening a spool that exists: %q; want no directory sync", ops)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// A damaged spool: its copy first, then the rewind.
	b, offs, _ := spoolImage(t, 5, 4, 0)
	b[offs[1]+frameHeader+3] ^= 0x20
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	l = openTest(t, Options{Path: path, File: log.wrap})
	defer l.Close()
	kept, err := filepath.Glob(path + "-damaged-*")
	if err != nil || len(kept) != 1 {
		t.Fatalf("kept aside: %v %v; want one copy", kept, err)
	}
	copyName := filepath.Base(kept[0])
	ops := log.take()
	at := func(op string) int {
		i := slices.Index(ops, op)
		if i < 0 {
			t.Fatalf("opening a damaged spool: %q; want %q", ops, op)
		}
		return i
	}
	w, s, d, r := at("write "+copyName), at("sync "+copyName), at("sync "+base), at("write ledger"+Suffix)
	if !(w < s && s < d && d < r) {
		t.Fatalf("opening a damaged spool: %q; want the copy written, synced, its directory synced, then the spool rewound", ops)
	}
}
