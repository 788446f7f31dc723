package spool

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/testctx"
)

// failIngestion makes every Write to l's sink fail with an error that is
// no record's fault (errDown: the database down), so that an ingestion
// fails as a whole and is retried.
func failIngestion(l *Ledger) {
	sinkOf(l).setFail(errDown)
}

// runLedger runs l's committer until the returned stop is called, which
// returns Run's error (which these tests expect to be one).
func runLedger(t *testing.T, l *Ledger) (stop func() error) {
	t.Helper()
	return startRun(t, l, false)
}

// reports collects what OnError is told, and signals each report.
type reports struct {
	mu   sync.Mutex
	errs []error
	ch   chan struct{}
}

func newReports() *reports { return &reports{ch: make(chan struct{}, 1024)} }

func (r *reports) onError(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

// TestStopWithFailingIngestionAnswersDirectAppends: the spool failed, so
// an Append goes to the sink directly, queued behind spooled records whose
// ingestion the sink keeps failing. When Run ends, the ingester gives up on
// the spooled records (they stay in the spool); the direct Append, which
// is in no spool, must still be told an outcome before Run returns, not
// be left waiting for a committer that is gone.
func TestStopWithFailingIngestionAnswersDirectAppends(t *testing.T) {
	rep := newReports()
	l := openTest(t, Options{Path: spoolPath(t), OnError: rep.onError})
	failIngestion(l)
	stop := runLedger(t, l)
	if err := l.Append(testctx.Deadline(t), record("spooled")); err != nil {
		t.Fatal(err)
	}
	if err := l.sp.f.Close(); err != nil { // every spool write now fails
		t.Fatal(err)
	}
	t.Cleanup(func() { f, _ := os.Open(os.DevNull); l.sp.f = osFile{f} }) // for Close
	actx, cancel := context.WithCancel(testctx.Deadline(t))
	defer cancel()
	direct := make(chan error, 1)
	go func() { direct <- l.Append(actx, record("direct")) }()
	testctx.Wait(t, "the direct Append to be queued", l.directQueued)
	if err := stop(); err == nil || !strings.Contains(err.Error(), "stay in the spool") {
		t.Errorf("Run = %v; want the ingestion's failure", err)
	}
	cancel()                                                                                       // an Append still waiting now returns the context's error
	if err := testctx.Receive(t, "the direct Append's return", direct); !errors.Is(err, errDown) { // not nil, nor the context's error
		t.Errorf("direct Append = %v; want the sink's error, told before Run returned", err)
	}
}

// directQueued reports whether the ingester's queue holds a direct item.
func (l *Ledger) directQueued() bool {
	l.ing.mu.Lock()
	defer l.ing.mu.Unlock()
	for _, it := range l.ing.q {
		if it.direct {
			return true
		}
	}
	return false
}

// TestReadDuringFailedStopReturns: a read waits for the ingester, whose
// ingestion the sink keeps failing; Run ends, and the ingester gives up,
// leaving the records in the spool. The read must then return an error
// (the records are not in the sink), not wait on for an ingester that is
// gone. Whether the read re-checks before or after Run marks the
// ingester stopped is up to the scheduler, so the test tries several
// times.
func TestReadDuringFailedStopReturns(t *testing.T) {
	for range 10 {
		rep := newReports()
		// IngestDelay: the ingester runs only for the read.
		l := openTest(t, Options{Path: spoolPath(t), IngestDelay: time.Hour, OnError: rep.onError})
		stop := runLedger(t, l)
		// One record the sink holds before it fails: the read's error
		// counts only what it does not.
		if err := l.Append(testctx.Deadline(t), record("ingested")); err != nil {
			t.Fatal(err)
		}
		if _, err := records(testctx.Deadline(t), l); err != nil {
			t.Fatal(err)
		}
		failIngestion(l)
		if err := l.Append(testctx.Deadline(t), record("spooled")); err != nil {
			t.Fatal(err)
		}
		read := make(chan error, 1)
		go func() {
			_, err := records(testctx.Deadline(t), l)
			read <- err
		}()
		testctx.Receive(t, "the ingester's failure, which the read caused", rep.ch) // the read waits
		if err := stop(); err == nil {
			t.Fatal("Run = nil; want the ingestion's failure")
		}
		if err := testctx.Receive(t, "the read's return", read); err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 acknowledged records are in the spool") {
			t.Fatalf("read = %v; want the records left in the spool", err)
		}
	}
}

// bigRecord is a record Validate takes whose spooled encoding is over
// 1 MiB.
func bigRecord(id string) ledger.Record {
	r := record(id)
	r.ErrorType = strings.Repeat("x", 2<<20)
	return r
}

// TestReplayKeepsALargeRecord: a record of any size Append takes is
// replayed from the spool, and so is every record after it: a frame
// longer than some bound the writer does not know of is no torn tail.
func TestReplayKeepsALargeRecord(t *testing.T) {
	path := spoolPath(t)
	writeSpool(t, path, 1, record("before"), bigRecord("big"), record("after"))
	l := openTest(t, Options{Path: path})
	if got := storedIDs(t, l); len(got) != 3 {
		t.Errorf("replayed %v, want before, big, after", got)
	}
	checkAggregates(t, l)
}

// TestReaderSeesPastALargeRecord: a Ledger that does not own the spool
// sees the owner's acknowledged records past a large one.
func TestReaderSeesPastALargeRecord(t *testing.T) {
	path := spoolPath(t)
	s := newMemSink(t)
	// IngestDelay: the owner ingests nothing on its own.
	owner := openOn(t, s, Options{Path: path, IngestDelay: time.Hour})
	start(t, owner)
	for _, r := range []ledger.Record{bigRecord("big"), record("after")} {
		if err := owner.Append(testctx.Deadline(t), r); err != nil {
			t.Fatal(err)
		}
	}
	reader := openOn(t, s, Options{Path: path, Reader: true})
	if got := storedIDs(t, reader); len(got) != 2 {
		t.Errorf("the reader sees %v, want big and after", got)
	}
}
