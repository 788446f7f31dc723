package sqlite

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/ledgertest"
)

func TestContractSpooled(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledgertest.Backend {
		l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{Spool: true})
		if l.sp == nil {
			t.Fatal("no spool")
		}
		start(t, l)
		return l
	})
}

// fullRecord sets every field, so that a round trip through the spool
// shows any field lost.
func fullRecord(id string) ledger.Record {
	r := record(id)
	r.ClientRequestID, r.ErrorType, r.Estimated, r.Stream = "client-"+id, "overloaded_error", true, true
	r.CachedInputTokens, r.CacheCreationTokens, r.ReasoningTokens = 7, 11, 13
	r.CacheCreation1hTokens, r.AudioInputTokens, r.AudioOutputTokens = 5, 3, 2
	r.StartedAt = r.StartedAt.Add(123456789 * time.Nanosecond)
	return r
}

func TestRecordEncodingRoundTrip(t *testing.T) {
	for _, r := range []ledger.Record{fullRecord("a"), record("b"), {RequestID: "c", StartedAt: time.Unix(0, 1).UTC(), Status: -1, CostPico: 1<<63 - 1}} {
		b := appendRecord(nil, &r)
		got, err := decodeRecord(b)
		if err != nil {
			t.Fatalf("%s: %v", r.RequestID, err)
		}
		if got != r {
			t.Errorf("round trip of %+v gave %+v", r, got)
		}
		for i := range len(b) { // every truncation fails
			if _, err := decodeRecord(b[:i]); err == nil {
				t.Errorf("%s cut at %d of %d bytes decoded", r.RequestID, i, len(b))
			}
		}
		if _, err := decodeRecord(append(bytes.Clone(b), 0)); err == nil {
			t.Errorf("%s with a byte more decoded", r.RequestID)
		}
	}
}

// TestSpoolReadsSeeAcknowledged: with the ingester's delay far longer
// than the test, a read right after Append returned sees the record,
// and the aggregates count it.
func TestSpoolReadsSeeAcknowledged(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{Spool: true})
	start(t, l)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			if err := l.Append(t.Context(), record(fmt.Sprintf("r%02d", i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	recs, err := l.Records(t.Context(), ledger.Filter{})
	if err != nil || len(recs) != 40 {
		t.Fatalf("Records: %d records, %v; want 40", len(recs), err)
	}
	checkAggregates(t, l)
	if r, c := l.Stats(); r != 40 || c < 1 {
		t.Errorf("Stats = %d records in %d commits", r, c)
	}
}

// writeSpool writes a spool file at path of generation gen with recs'
// frames, and returns its bytes.
func writeSpool(t testing.TB, path string, gen uint64, recs ...ledger.Record) []byte {
	t.Helper()
	sp, err := openSpool(path)
	if err != nil || sp == nil {
		t.Fatalf("openSpool: %v %v", sp, err)
	}
	defer sp.close()
	sp.gen = gen - 1
	if err := sp.rewind(true); err != nil {
		t.Fatal(err)
	}
	var payloads [][]byte
	for _, r := range recs {
		payloads = append(payloads, appendRecord(nil, &r))
	}
	if err := sp.write(sp.frames(payloads)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b[:sp.off]
}

// TestReplay: Open inserts the spool's frames — every field kept — and
// counts none twice: a frame SQLite already holds is skipped.
func TestReplay(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.sqlite")
	l := openTest(t, path, Options{})
	start(t, l)
	if err := l.Append(t.Context(), fullRecord("a")); err != nil { // ingested before the "crash"
		t.Fatal(err)
	}
	writeSpool(t, path+spoolSuffix, 7, fullRecord("a"), fullRecord("b"), fullRecord("c"))

	r := openTest(t, path, Options{Spool: true})
	recs, err := r.Records(t.Context(), ledger.Filter{})
	if err != nil || len(recs) != 3 {
		t.Fatalf("after replay: %v %v, want a, b, c", ids(recs), err)
	}
	for _, got := range recs {
		if want := fullRecord(got.RequestID); got != want {
			t.Errorf("replayed %+v, want %+v", got, want)
		}
	}
	checkAggregates(t, r)
	if r.sp.gen != 8 || r.sp.off != frameStart {
		t.Errorf("after replay: generation %d at %d, want 8 at %d (rewound)", r.sp.gen, r.sp.off, frameStart)
	}
}

// TestReplayStopsAtTheTail: frames are replayed up to the first one that
// is torn, corrupt or of an older generation; none after it.
func TestReplayStopsAtTheTail(t *testing.T) {
	recs := []ledger.Record{fullRecord("a"), fullRecord("b"), fullRecord("c")}
	good := writeSpool(t, filepath.Join(t.TempDir(), "probe"), 3, recs...)
	frame := (len(good) - frameStart) / 3 // the records are of one size
	for _, tc := range []struct {
		name   string
		mangle func(b []byte) []byte
		want   int
	}{
		{"intact", func(b []byte) []byte { return b }, 3},
		{"torn in the third frame", func(b []byte) []byte { return b[:len(b)-5] }, 2},
		{"torn in the second frame's header", func(b []byte) []byte { return b[:frameStart+frame+7] }, 1},
		{"a flipped payload byte in the second", func(b []byte) []byte { b[frameStart+frame+frameHeader+3] ^= 1; return b }, 1},
		{"a length past the file's end", func(b []byte) []byte { b[frameStart+3] = 0x7f; return b }, 0},
		{"the second of an older generation", func(b []byte) []byte {
			old := writeSpool(t, filepath.Join(t.TempDir(), "old"), 2, recs...)
			return append(b[:frameStart+frame], old[frameStart+frame:]...)
		}, 1},
		{"a corrupt header", func(b []byte) []byte { b[2] ^= 1; return b }, 0},
		{"header only", func(b []byte) []byte { return b[:frameStart] }, 0},
		{"empty", func([]byte) []byte { return nil }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.sqlite")
			if err := os.WriteFile(path+spoolSuffix, tc.mangle(bytes.Clone(good)), 0o600); err != nil {
				t.Fatal(err)
			}
			l := openTest(t, path, Options{Spool: true})
			if got := storedIDs(t, l); len(got) != tc.want {
				t.Errorf("replayed %v, want the first %d", got, tc.want)
			}
			checkAggregates(t, l)
		})
	}
}

// TestReplayDropsUndecodable: a frame whose CRC holds but whose record
// does not decode or validate is dropped and reported; the others are
// replayed.
func TestReplayDropsUndecodable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	sp, err := openSpool(path + spoolSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.rewind(true); err != nil {
		t.Fatal(err)
	}
	a, neg := fullRecord("a"), fullRecord("neg")
	neg.InputTokens = -1
	if err := sp.write(sp.frames([][]byte{{9, 9}, appendRecord(nil, &neg), appendRecord(nil, &a)})); err != nil {
		t.Fatal(err)
	}
	if err := sp.close(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reported []error
	l := openTest(t, path, Options{Spool: true, OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})
	if got := storedIDs(t, l); len(got) != 1 || got[0] != "a" {
		t.Errorf("replayed %v, want [a]", got)
	}
	if len(reported) != 2 || !errors.Is(reported[0], errRecordEncoding) || !errors.Is(reported[1], ledger.ErrInvalid) {
		t.Errorf("reported %v, want the undecodable frame and the invalid record", reported)
	}
}

// TestSecondLedgerCommitsDirectly: two Ledgers of one file — the first
// has the spool, the second commits to SQLite itself — both work, and
// each reads the other's records.
func TestSecondLedgerCommitsDirectly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	a := openTest(t, path, Options{Spool: true})
	b := openTest(t, path, Options{Spool: true})
	if a.sp == nil || b.sp != nil {
		t.Fatalf("spools: first %v, second %v; want the first only", a.sp != nil, b.sp != nil)
	}
	start(t, a)
	start(t, b)
	if err := a.Append(t.Context(), record("from-a")); err != nil {
		t.Fatal(err)
	}
	if err := b.Append(t.Context(), record("from-b")); err != nil {
		t.Fatal(err)
	}
	if got := storedIDs(t, a); len(got) != 2 {
		t.Errorf("first reads %v", got)
	}
	if got := storedIDs(t, b); len(got) != 1 || got[0] != "from-b" {
		// b cannot wait for a's ingester; a's record shows up once a's
		// ingester ran, which a's own read above forced.
		if len(got) != 2 {
			t.Errorf("second reads %v", got)
		}
	}
}

// TestSpoolRewinds: past rewindAt, with SQLite caught up, the spool
// starts a new generation at frameStart, so it stays small; records are
// neither lost nor counted twice, across a reopen too.
func TestSpoolRewinds(t *testing.T) {
	old := rewindAt
	rewindAt = 4096
	t.Cleanup(func() { rewindAt = old })
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	l := openTest(t, path, Options{Spool: true})
	stop := start(t, l)
	gen := l.sp.gen
	for i := range 300 {
		if err := l.Append(t.Context(), record(fmt.Sprintf("r%03d", i))); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 { // let the ingester catch up now and then
			if _, err := l.Records(t.Context(), ledger.Filter{Limit: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if l.sp.gen == gen {
		t.Errorf("no rewind in 300 records of a 4 KiB spool")
	}
	if st, err := os.Stat(path + spoolSuffix); err != nil || st.Size() > growStep {
		t.Errorf("spool: %v %v, want at most %d bytes", st.Size(), err, growStep)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r := openTest(t, path, Options{Spool: true})
	if got := storedIDs(t, r); len(got) != 300 {
		t.Errorf("%d records after reopen, want 300", len(got))
	}
	checkAggregates(t, r)
}

// TestBrokenSpoolCommitsDirectly: when the spool cannot be written, the
// failure is reported, and that Append and every later one commit to
// SQLite directly; nothing is lost.
func TestBrokenSpoolCommitsDirectly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	var mu sync.Mutex
	var reported []error
	l := openTest(t, path, Options{Spool: true, OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})
	start(t, l)
	if err := l.Append(t.Context(), record("before")); err != nil {
		t.Fatal(err)
	}
	if err := l.sp.f.Close(); err != nil { // every write now fails
		t.Fatal(err)
	}
	for _, id := range []string{"after1", "after2"} {
		if err := l.Append(t.Context(), record(id)); err != nil {
			t.Fatalf("Append(%s) with a broken spool: %v", id, err)
		}
	}
	if got := storedIDs(t, l); len(got) != 3 {
		t.Errorf("stored %v, want before, after1, after2", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 1 || !errors.Is(reported[0], os.ErrClosed) {
		t.Errorf("reported %v, want the spool's one failure", reported)
	}
	l.sp.f, _ = os.Open(os.DevNull) // for Close
}

// FuzzDecodeRecord: any bytes decode to a record that encodes back to
// them, or fail; nothing panics.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range []ledger.Record{fullRecord("a"), record("b")} {
		f.Add(appendRecord(nil, &r))
	}
	f.Add([]byte{recordVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err != nil {
			return
		}
		if _, err := encode(r); err != nil {
			return // decodes, but is no record Append would take
		}
		if again := appendRecord(nil, &r); !bytes.Equal(again, b) {
			// Varints have one canonical form each but decode from
			// longer ones too: the record must at least round-trip.
			if r2, err := decodeRecord(again); err != nil || r2 != r {
				t.Fatalf("% x decoded to %+v, which does not round-trip", b, r)
			}
		}
	})
}

// FuzzReplay: any spool file replays without panicking, and every record
// it yields decodes.
func FuzzReplay(f *testing.F) {
	dir := f.TempDir()
	seed := func(name string, recs ...ledger.Record) []byte {
		return writeSpool(f, filepath.Join(dir, name), 1, recs...)
	}
	f.Add(seed("one", fullRecord("a")))
	f.Add(seed("two", fullRecord("a"), record("b")))
	f.Add([]byte(spoolMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "spool")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		sp, err := openSpool(path)
		if err != nil {
			t.Fatal(err)
		}
		defer sp.close()
		if err := sp.replay(func(p []byte) error { _, _ = decodeRecord(p); return nil }); err != nil {
			t.Fatal(err)
		}
		if sp.off > max(int64(len(b)), frameStart) {
			t.Fatalf("replay read to %d of %d bytes", sp.off, len(b))
		}
	})
}

// TestLinger: a lone record is committed without waiting, however long
// Linger is; after a batch of two, the next record waits Linger for
// company. Only lower bounds are asserted (an upper one would be a timed
// test): that the lone Appends returned at all, with Linger an hour,
// shows they did not wait.
func TestLinger(t *testing.T) {
	for _, spool := range []bool{false, true} {
		t.Run(fmt.Sprintf("spool=%v", spool), func(t *testing.T) {
			l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{Spool: spool, Linger: time.Hour})
			stop := start(t, l)
			for _, id := range []string{"lone1", "lone2"} {
				if err := l.Append(t.Context(), record(id)); err != nil {
					t.Fatal(err)
				}
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}

			const linger = 50 * time.Millisecond
			l = openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{Spool: spool, Linger: linger})
			var wg sync.WaitGroup
			for _, id := range []string{"pair1", "pair2"} { // queued before Run: one batch of two
				wg.Go(func() {
					if err := l.Append(t.Context(), record(id)); err != nil {
						t.Error(err)
					}
				})
			}
			for l.queued() < 2 {
				time.Sleep(time.Millisecond)
			}
			start(t, l)
			wg.Wait()
			begin := time.Now()
			if err := l.Append(t.Context(), record("after")); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(begin); took < linger {
				t.Errorf("the Append after a batch of two returned after %v; want at least Linger %v", took, linger)
			}
		})
	}
}

// queued is how many Appends wait in the queue.
func (l *Ledger) queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

// TestReaderSeesOwnersRecords: a Ledger that does not own the spool (as
// `sluice spend` beside a running server) sees the records the owner
// acknowledged and has not ingested yet — here never, until it stops —
// and when the owner ingests them after all, nothing is counted twice.
func TestReaderSeesOwnersRecords(t *testing.T) {
	old := ingestDelay
	ingestDelay = time.Hour
	t.Cleanup(func() { ingestDelay = old })
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	owner := openTest(t, path, Options{Spool: true})
	stop := start(t, owner)
	for i := range 5 {
		if err := owner.Append(t.Context(), record(fmt.Sprintf("r%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := owner.Backlog(); n != 5 {
		t.Fatalf("owner's backlog %d, want 5 (the ingester must not have run)", n)
	}
	reader := openTest(t, path, Options{Spool: true})
	if reader.sp != nil {
		t.Fatal("the reader got the spool")
	}
	if got := storedIDs(t, reader); len(got) != 5 {
		t.Errorf("the reader sees %v, want 5 records", got)
	}
	checkAggregates(t, reader)
	if err := stop(); err != nil { // the owner ingests: all duplicates
		t.Fatal(err)
	}
	if got := storedIDs(t, reader); len(got) != 5 {
		t.Errorf("after the owner ingested, %d records, want 5", len(got))
	}
	checkAggregates(t, reader) // the sums of 5 records, not 10
	lt, err := reader.Lifetime(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range lt {
		if a.Requests != 5 {
			t.Errorf("lifetime %s %s: %d requests, want 5", a.Scope, a.ID, a.Requests)
		}
	}
}

// TestSpoolStaysSmallUnderSteadyLoad: with appends that never pause and
// no read to force the ingester, the spool is still rewound: it stays
// within one growth step.
func TestSpoolStaysSmallUnderSteadyLoad(t *testing.T) {
	old, oldWait := rewindAt, rewindWait
	// The wait as long as a slow machine (or the race detector) may need
	// for an ingestion: the mechanism is under test, not this machine.
	rewindAt, rewindWait = 16<<10, 10*time.Second
	t.Cleanup(func() { rewindAt, rewindWait = old, oldWait })
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	l := openTest(t, path, Options{Spool: true})
	start(t, l)
	gen := l.sp.gen
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1500 {
				if err := l.Append(t.Context(), record(fmt.Sprintf("g%d-%04d", g, i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if st, err := os.Stat(path + spoolSuffix); err != nil || st.Size() > growStep {
		t.Errorf("spool after 12,000 records: %v %v, want at most %d bytes", st.Size(), err, growStep)
	}
	if l.sp.gen-gen < 10 {
		t.Errorf("%d rewinds in 12,000 records (about 2.4 MB of frames) of a 16 KiB spool", l.sp.gen-gen)
	}
	if got := storedIDs(t, l); len(got) != 12000 {
		t.Errorf("%d records, want 12000", len(got))
	}
	checkAggregates(t, l)
}

// TestSyncData: the sync that hands off its P makes a write durable
// without error, and reports a file that cannot be synced rather than
// pass over it.
func TestSyncData(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("frame")); err != nil {
		t.Fatal(err)
	}
	if err := syncData(f); err != nil {
		t.Fatalf("sync of an open file: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syncData(f); err == nil {
		t.Fatal("sync of a closed file: no error")
	}
}
