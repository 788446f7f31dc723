package spool

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/testctx"
)

// TestQueueHoldsFourBatches: the queue holds four batches' worth of
// Appends, or 1,024, whichever is more: 1,100 Appends with MaxBatch 300
// all queue before Run starts.
func TestQueueHoldsFourBatches(t *testing.T) {
	const maxBatch, n = 300, 1100 // 1024 < n <= 4*maxBatch
	l := openTest(t, Options{MaxBatch: maxBatch})
	wait := appendAsync(testctx.Deadline(t), l, numbered(n)...)
	testctx.Wait(t, fmt.Sprintf("%d Appends queued", n), func() bool { return l.Queued() == n })
	start(t, l)
	for id, err := range wait() {
		if err != nil {
			t.Errorf("Append(%s): %v", id, err)
		}
	}
	if records, _ := l.Stats(); records != n {
		t.Errorf("Stats = %d records; want %d", records, n)
	}
}

// TestIngestTransactionsBounded: the ingester and the replay write at
// most 1,024 records a transaction, and fill them: 2,500 records replayed
// are three transactions; 3,000 spooled while the ingester waits are
// written in transactions of at most 1,024.
func TestIngestTransactionsBounded(t *testing.T) {
	path := spoolPath(t)
	writeSpool(t, path, 1, numbered(2500)...)
	sink := newMemSink(t)
	l := openOn(t, sink, Options{Path: path, IngestDelay: time.Hour, MaxBatch: 1000})
	sink.mu.Lock()
	writes, largest := sink.writes, sink.largest
	sink.writes, sink.largest = 0, 0
	sink.mu.Unlock()
	if writes != 3 || largest != ingestBatch {
		t.Errorf("replaying 2,500 records took %d transactions, the largest of %d; want 3, of %d", writes, largest, ingestBatch)
	}
	start(t, l)
	var recs []ledger.Record
	for i := range 3000 {
		recs = append(recs, record(fmt.Sprintf("new_%04d", i)))
	}
	for id, err := range appendAsync(testctx.Deadline(t), l, recs...)() {
		if err != nil {
			t.Fatalf("Append(%s): %v", id, err)
		}
	}
	if got, err := records(testctx.Deadline(t), l); err != nil || len(got) != 5500 {
		t.Fatalf("records = %d, %v; want 5,500", len(got), err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.largest > ingestBatch || sink.writes < 3000/ingestBatch+1 {
		t.Errorf("3,000 records ingested in %d transactions, the largest of %d; want at most %d each", sink.writes, sink.largest, ingestBatch)
	}
}

// TestStopTriesThreeTimes: at Run's end, records the sink keeps failing
// are tried three times (stopAttempts), then left in the spool, and Run
// says so.
func TestStopTriesThreeTimes(t *testing.T) {
	sink := newMemSink(t)
	l := openOn(t, sink, Options{Path: spoolPath(t), IngestDelay: time.Hour})
	stop := runLedger(t, l)
	if err := l.Append(testctx.Deadline(t), record("spooled")); err != nil {
		t.Fatal(err)
	}
	failIngestion(l)
	if err := stop(); err == nil || !strings.Contains(err.Error(), "1 acknowledged records stay in the spool") {
		t.Errorf("Run = %v; want the record left in the spool", err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.writes != stopAttempts {
		t.Errorf("the failing sink was tried %d times at the stop; want %d", sink.writes, stopAttempts)
	}
}

// TestDefaultName: a Ledger opened without a Name says "ledger" in its
// errors.
func TestDefaultName(t *testing.T) {
	l := openTest(t, Options{})
	l.Close()
	if err := l.Append(testctx.Deadline(t), record("late")); err == nil || !strings.HasPrefix(err.Error(), "ledger: append late: ") {
		t.Errorf("Append after Close = %v; want it to start with %q", err, "ledger: append late: ")
	}
}

// TestFailedCheckReleasesTheSpool: Open whose check fails (the database
// cannot be opened) lets go of the spool's lock, so that the next Open
// takes it.
func TestFailedCheckReleasesTheSpool(t *testing.T) {
	path := spoolPath(t)
	if _, err := Open(t.Context(), newMemSink(t), Options{Path: path}, func() error { return errDown }); !errors.Is(err, errDown) {
		t.Fatalf("Open with a failing check = %v; want its error", err)
	}
	l, err := Open(t.Context(), newMemSink(t), Options{Path: path}, nil)
	if err != nil {
		t.Fatalf("Open after a failed one: %v; want the spool free", err)
	}
	l.Close()
}

// TestTornTailLogged: a spool whose last frame is cut short (a crash
// during its write) is kept aside and the torn tail logged at warn level;
// one damaged in its middle (a flipped bit) is kept aside without that
// warning; one without damage is neither.
func TestTornTailLogged(t *testing.T) {
	for _, tc := range []struct {
		name          string
		damage        func(path string, data []byte) error
		aside, warned bool
		damaged       int64 // DamagedFrames
	}{
		{"intact", func(string, []byte) error { return nil }, false, false, 0},
		{"torn", func(path string, data []byte) error { return os.Truncate(path, int64(len(data))-3) }, true, true, 0},
		{"bit flipped", func(path string, data []byte) error {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteAt([]byte{data[frameStart+frameHeader+2] ^ 1}, frameStart+frameHeader+2)
			return errors.Join(err, f.Close())
		}, true, false, 1},
		{"header and first frame", func(path string, data []byte) error {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteAt([]byte{data[len(spoolMagic)] ^ 1}, int64(len(spoolMagic)))
			if err == nil {
				_, err = f.WriteAt([]byte{data[frameStart+frameHeader+2] ^ 1}, frameStart+frameHeader+2)
			}
			return errors.Join(err, f.Close())
		}, true, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := spoolPath(t)
			data := writeSpool(t, path, 1, record("a"), record("b"), record("c"))
			if err := tc.damage(path, data); err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			l := openTest(t, Options{Path: path, Logger: slog.New(slog.NewTextHandler(&log, nil))})
			if got := l.DamagedFrames(); got != tc.damaged {
				t.Errorf("DamagedFrames = %d; want %d", got, tc.damaged)
			}
			aside, _ := filepath.Glob(path + "-damaged-*")
			warned := strings.Contains(log.String(), "level=WARN") && strings.Contains(log.String(), "last frame does not verify")
			if warned != tc.warned || (len(aside) == 1) != tc.aside {
				t.Errorf("warned %v (want %v), kept aside %v (want %v); log:\n%s", warned, tc.warned, aside, tc.aside, log.String())
			}
		})
	}
}

// TestKeptAsideNamesDiffer: two damaged spools kept aside in the same
// second get names of their own.
func TestKeptAsideNamesDiffer(t *testing.T) {
	path := spoolPath(t)
	sp := &spool{path: path}
	now := time.Unix(1_700_000_000, 0)
	var names []string
	for i := range 3 {
		if err := os.WriteFile(path, []byte(fmt.Sprintf("spool %d", i)), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sp.f, sp.size = osFile{f}, 7
		name, err := copyAside(sp, now)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, filepath.Base(name))
	}
	want := []string{"ledger-spool-damaged-1700000000", "ledger-spool-damaged-1700000000-2", "ledger-spool-damaged-1700000000-3"}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Errorf("names %v; want %v", names, want)
	}
}

// TestReplayAcrossWindows: replay reads the spool through a 64 KiB window;
// with frames of 1 to 40 KiB, frames straddle the window's edges, a
// damaged frame's resynchronization scans across them, and the scan's
// search for the generation's bytes straddles them too. A bit flipped at
// any of hundreds of places across five windows loses the one frame it
// hit, and every other frame is replayed, once, in order.
func TestReplayAcrossWindows(t *testing.T) {
	var recs []ledger.Record
	var ids []string
	for i := range 24 {
		r := record(fmt.Sprintf("w%02d", i))
		r.ErrorType = strings.Repeat(string(rune('a'+i%26)), 1000+(i*7919)%40000)
		recs, ids = append(recs, r), append(ids, r.RequestID)
	}
	good := writeSpool(t, filepath.Join(t.TempDir(), "spool"), 9, recs...)
	var offs []int64
	for off := int64(frameStart); len(offs) < len(recs); {
		offs = append(offs, off)
		off += frameHeader + int64(binary.LittleEndian.Uint32(good[off:]))
	}
	end := offs[len(offs)-1] + frameHeader + int64(binary.LittleEndian.Uint32(good[offs[len(offs)-1]:]))
	if end < 5*windowSize {
		t.Fatalf("the frames end at %d; want past five windows", end)
	}
	if got, rep := replayed(t, good); !slices.Equal(got, ids) || len(rep.skips) != 0 || rep.end != end {
		t.Fatalf("intact: replayed %d records, %d skips, ending at %d; want %d, none, %d", len(got), len(rep.skips), rep.end, len(ids), end)
	}
	b := make([]byte, len(good))
	for at := int64(frameStart); at < offs[len(offs)-1]; at += 4099 {
		frame := 0
		for frame+1 < len(offs) && offs[frame+1] <= at {
			frame++
		}
		copy(b, good)
		b[at] ^= 1 << (at % 8)
		got, rep := replayed(t, b)
		want := slices.Delete(slices.Clone(ids), frame, frame+1)
		if !slices.Equal(got, want) {
			t.Fatalf("byte %d (frame %d) flipped: replayed %v, want %v", at, frame, got, want)
		}
		if len(rep.skips) != 1 || rep.skips[0].at != offs[frame] || rep.skips[0].n != offs[frame+1]-offs[frame] ||
			rep.skips[0].frames != len(ids)-frame-1 || rep.end != end {
			t.Fatalf("byte %d (frame %d) flipped: skips %+v, end %d; want one skip of frame %d (%d bytes at %d), %d frames after it, end %d",
				at, frame, rep.skips, rep.end, frame, offs[frame+1]-offs[frame], offs[frame], len(ids)-frame-1, end)
		}
	}
}

// TestGrownSpoolCutBack: a spool that grew past four times its rewind
// point while the sink was behind is cut back to one growth step at the
// rewind that follows the sink's catching up, not left at its largest.
func TestGrownSpoolCutBack(t *testing.T) {
	sink := newMemSink(t)
	release := make(chan struct{})
	sink.setBefore(func(ctx context.Context) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	path := spoolPath(t)
	l := openOn(t, sink, Options{Path: path, RewindAt: 4096, RewindWait: time.Millisecond})
	start(t, l)
	for i := range 3 { // 1.5 MiB of frames: the file grows to 3 MiB, under 4 MiB
		r := record(fmt.Sprintf("half_%d", i))
		r.ErrorType = strings.Repeat("x", 512<<10)
		if err := l.Append(testctx.Deadline(t), r); err != nil {
			t.Fatal(err)
		}
	}
	grown, err := os.Stat(path)
	if err != nil || grown.Size() <= growStep+spoolReserve {
		t.Fatalf("the spool is %v bytes (%v) with the sink behind; want it grown past %d", grown.Size(), err, growStep+spoolReserve)
	}
	close(release)
	if _, err := records(testctx.Deadline(t), l); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(testctx.Deadline(t), record("after")); err != nil { // rewinds: the sink holds all
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() > growStep+spoolReserve {
		t.Errorf("the spool is %d bytes (%v) after the rewind; want it cut back to at most %d (was %d)", st.Size(), err, growStep+spoolReserve, grown.Size())
	}
}
