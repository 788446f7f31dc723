package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/ledgertest"
	"github.com/sluicegw/sluice/internal/ledger/spool"
	"github.com/sluicegw/sluice/internal/testctx"
)

// The spool itself — its file, replay, the committer and the ingester —
// is tested in internal/ledger/spool, in front of a sink in memory. The
// tests here are those that need SQLite behind it: the contract, a
// second writer of one file, and a reader beside the writer.

// requireSpool fails t unless l, opened with Options.Spool, has its spool;
// where files cannot be locked (not unix: internal/ledger/spool's
// lock_other.go) no Ledger has one, and t is skipped.
func requireSpool(t *testing.T, l *Ledger) {
	t.Helper()
	if l.Spooled() {
		return
	}
	switch runtime.GOOS {
	case "windows", "plan9", "js", "wasip1":
		t.Skipf("no spool on %s, where files cannot be locked", runtime.GOOS)
	}
	t.Fatal("opened with Options.Spool, and no spool")
}

func TestContractSpooled(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledgertest.Backend {
		l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{Spool: true})
		requireSpool(t, l)
		start(t, l)
		return l
	})
}

// TestSecondWriterRefused: a second Ledger of a file with a spool —
// another `sluice serve`, which would admit every budget a second time —
// is refused while the first holds it, whatever process it is in, with
// an *InUseError naming the spool beside the file; a Reader (`sluice
// spend`) is not, and sees the first one's records; once the first is
// closed, a writer opens.
func TestSecondWriterRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	a := openTest(t, path, Options{Spool: true})
	requireSpool(t, a)
	stop := start(t, a)
	if err := a.Append(testctx.Deadline(t), record("from-a")); err != nil {
		t.Fatal(err)
	}
	b, err := Open(t.Context(), path, Options{Spool: true})
	var inUse *InUseError
	// The spool's name is the file's path and "-spool": a spool an older
	// build left must be found by this one.
	if !errors.Is(err, ErrInUse) || !errors.As(err, &inUse) || inUse.Path != path+"-spool" {
		if b != nil {
			_ = b.Close()
		}
		t.Fatalf("second Open: %v %v, want an *InUseError for %s", b, err, path+"-spool")
	}
	if _, err := os.Stat("/proc/locks"); err == nil && inUse.PID != os.Getpid() {
		t.Errorf("the holder's pid is %d, want %d (this process)", inUse.PID, os.Getpid())
	}
	r := openTest(t, path, Options{Spool: true, Reader: true})
	recs, err := r.Records(testctx.Deadline(t), ledger.Filter{})
	if err != nil || !slices.Equal(ids(recs), []string{"from-a"}) {
		t.Errorf("the reader sees %v (%v), want from-a", ids(recs), err)
	}
	if err := errors.Join(stop(), a.Close()); err != nil {
		t.Fatal(err)
	}
	c := openTest(t, path, Options{Spool: true})
	if !c.Spooled() {
		t.Error("no spool once the first was closed")
	}
}

// TestReaderSeesOwnersRecords: a Ledger that does not own the spool (as
// `sluice spend` beside a running server) sees, in its Records and its
// aggregates, the records the owner acknowledged and has not ingested yet
// — here never, until it stops — and when the owner ingests them after
// all, nothing is counted twice.
func TestReaderSeesOwnersRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	owner := openTest(t, path, Options{
		Spool: true,
		tune:  func(o *spool.Options) { o.IngestDelay = time.Hour }, // the owner ingests nothing on its own
	})
	requireSpool(t, owner)
	stop := start(t, owner)
	for i := range 5 {
		if err := owner.Append(testctx.Deadline(t), record(fmt.Sprintf("r%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := owner.Backlog(); n != 5 {
		t.Fatalf("owner's backlog %d, want 5 (the ingester must not have run)", n)
	}
	reader := openTest(t, path, Options{Spool: true, Reader: true})
	if reader.Spooled() {
		t.Fatal("the reader got the spool")
	}
	// check reads the reader's records and its aggregates, which must be
	// the sums of five records.
	check := func(when string) {
		t.Helper()
		recs, err := reader.Records(testctx.Deadline(t), ledger.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 5 {
			t.Errorf("%s, the reader sees %v, want 5 records", when, ids(recs))
		}
		buckets, err := reader.Buckets(testctx.Deadline(t), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ledgertest.ExpectedBuckets(recs, time.Time{}), buckets); diff != "" {
			t.Errorf("%s, the aggregates are not the sums of the %d records (-want +got):\n%s", when, len(recs), diff)
		}
		lt, err := reader.Lifetime(testctx.Deadline(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(lt) == 0 {
			t.Errorf("%s, no lifetime aggregates", when)
		}
		for _, a := range lt {
			if a.Requests != 5 {
				t.Errorf("%s, lifetime %s %s: %d requests, want 5", when, a.Scope, a.ID, a.Requests)
			}
		}
	}
	check("before the owner ingested")
	if err := stop(); err != nil { // the owner ingests: all duplicates
		t.Fatal(err)
	}
	if n := owner.Backlog(); n != 0 {
		t.Errorf("owner's backlog %d once Run returned, want 0", n)
	}
	check("after the owner ingested") // the sums of 5 records, not 10
}
