package spool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/ledgertest"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/tokens"
)

// TestContractSpooled runs the ledger contract through the spool, its
// committer and its ingester, in front of a memSink (the SQLite ledger
// runs it on SQLite: internal/ledger/sqlite).
func TestContractSpooled(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledgertest.Backend {
		if !canLock {
			t.Skip("no spool where files cannot be locked")
		}
		l := openTest(t, Options{Path: spoolPath(t)})
		if l.sp == nil {
			t.Fatal("no spool")
		}
		start(t, l)
		return memBackend{l}
	})
}

// fullRecord sets every field, so that a round trip through the spool
// shows any field lost.
func fullRecord(id string) ledger.Record {
	r := record(id)
	r.ClientRequestID, r.ErrorType, r.Estimated, r.Stream = "client-"+id, "overloaded_error", true, true
	r.Tokens[tokens.CachedInput], r.Tokens[tokens.CacheWrite], r.Tokens[tokens.Reasoning] = 7, 11, 13
	r.Tokens[tokens.CacheWrite1h], r.Tokens[tokens.AudioInput], r.Tokens[tokens.AudioOutput] = 5, 3, 2
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
// and the sink's sums count it.
func TestSpoolReadsSeeAcknowledged(t *testing.T) {
	l := openTest(t, Options{Path: spoolPath(t), IngestDelay: time.Hour})
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
	recs, err := records(t.Context(), l)
	if err != nil || len(recs) != 40 {
		t.Fatalf("Records: %d records, %v; want 40", len(recs), err)
	}
	checkAggregates(t, l)
	if r, c := l.Stats(); r != 40 || c < 1 {
		t.Errorf("Stats = %d records in %d commits", r, c)
	}
}

// writeSpool writes a spool file at path of generation gen with recs'
// frames, and returns its bytes up to the end of the last frame.
func writeSpool(t testing.TB, path string, gen uint64, recs ...ledger.Record) []byte {
	t.Helper()
	sp, err := openSpool(path, nil)
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
// counts none twice: a frame the sink already holds is skipped.
func TestReplay(t *testing.T) {
	path := spoolPath(t)
	s := newMemSink(t)
	l := openOn(t, s, Options{})
	start(t, l)
	if err := l.Append(t.Context(), fullRecord("a")); err != nil { // ingested before the "crash"
		t.Fatal(err)
	}
	writeSpool(t, path, 7, fullRecord("a"), fullRecord("b"), fullRecord("c"))

	r := openOn(t, s, Options{Path: path})
	recs, err := records(t.Context(), r)
	if err != nil || len(recs) != 3 {
		t.Fatalf("after replay: %v %v, want a, b, c", ids(recs), err)
	}
	for _, got := range recs {
		if want := fullRecord(got.RequestID); got != want {
			t.Errorf("replayed %+v, want %+v", got, want)
		}
	}
	checkAggregates(t, r)
	if n := s.duplicates(); n != 1 {
		t.Errorf("%d replayed records skipped as already stored, want 1 (a)", n)
	}
	if r.sp.gen != 8 || r.sp.off != frameStart {
		t.Errorf("after replay: generation %d at %d, want 8 at %d (rewound)", r.sp.gen, r.sp.off, frameStart)
	}
}

// TestReplayResynchronizes: frames are replayed past a damaged one, and
// up to the tail — a torn frame, zeros, or an older generation's frames
// with no frame of this one after them; a corrupt header hides nothing.
func TestReplayResynchronizes(t *testing.T) {
	recs := []ledger.Record{fullRecord("a"), fullRecord("b"), fullRecord("c")}
	good := writeSpool(t, filepath.Join(t.TempDir(), "probe"), 3, recs...)
	frame := (len(good) - frameStart) / 3 // the records are of one size
	for _, tc := range []struct {
		name   string
		mangle func(b []byte) []byte
		want   []string
	}{
		{"intact", func(b []byte) []byte { return b }, []string{"a", "b", "c"}},
		{"torn in the third frame", func(b []byte) []byte { return b[:len(b)-5] }, []string{"a", "b"}},
		{"torn in the second frame's header", func(b []byte) []byte { return b[:frameStart+frame+7] }, []string{"a"}},
		{"a flipped payload byte in the second", func(b []byte) []byte { b[frameStart+frame+frameHeader+3] ^= 1; return b }, []string{"a", "c"}},
		{"a length past the file's end", func(b []byte) []byte { b[frameStart+3] = 0x7f; return b }, []string{"b", "c"}},
		{"the second of an older generation", func(b []byte) []byte {
			old := writeSpool(t, filepath.Join(t.TempDir(), "old"), 2, recs...)
			return append(b[:frameStart+frame], old[frameStart+frame:]...)
		}, []string{"a"}},
		{"a corrupt header", func(b []byte) []byte { b[2] ^= 1; return b }, []string{"a", "b", "c"}},
		{"a corrupt header and first frame", func(b []byte) []byte { b[2] ^= 1; b[frameStart+20] ^= 1; return b }, nil},
		{"header only", func(b []byte) []byte { return b[:frameStart] }, nil},
		{"empty", func([]byte) []byte { return nil }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := spoolPath(t)
			if err := os.WriteFile(path, tc.mangle(bytes.Clone(good)), 0o600); err != nil {
				t.Fatal(err)
			}
			l := openTest(t, Options{Path: path})
			if got := storedIDs(t, l); !slices.Equal(got, tc.want) {
				t.Errorf("replayed %v, want %v", got, tc.want)
			}
			checkAggregates(t, l)
		})
	}
}

// spoolImage is a spool of n records in memory, as writeSpool leaves it
// (frames up to the last, then tail zeros, as a grown spool has), with
// each frame's offset and the records' ids.
func spoolImage(t testing.TB, gen uint64, n, tail int) (b []byte, offs []int64, ids []string) {
	t.Helper()
	var recs []ledger.Record
	for i := range n {
		r := fullRecord(fmt.Sprintf("r%02d", i))
		if i%3 == 1 { // frames of several sizes
			r.Model += "-mini"
		}
		recs, ids = append(recs, r), append(ids, r.RequestID)
	}
	b = writeSpool(t, filepath.Join(t.TempDir(), "spool"), gen, recs...)
	for off := int64(frameStart); off < int64(len(b)); {
		offs = append(offs, off)
		off += frameHeader + int64(binary.LittleEndian.Uint32(b[off:]))
	}
	if len(offs) != n {
		t.Fatalf("%d frames in the image, want %d", len(offs), n)
	}
	return append(b, make([]byte, tail)...), offs, ids
}

// replayed replays b in memory and returns the ids of the records it
// yields, in order, and what replay found.
func replayed(t testing.TB, b []byte) ([]string, replayReport) {
	t.Helper()
	var got []string
	rep, err := replayFrames(bytes.NewReader(b), int64(len(b)), func(_ int64, p []byte) error {
		r, err := decodeRecord(p)
		if err != nil {
			return err
		}
		got = append(got, r.RequestID)
		return nil
	})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if rep.frames != len(got) {
		t.Fatalf("replay reports %d frames replayed; it gave %d", rep.frames, len(got))
	}
	return got, rep
}

// TestReplayEveryBitFlip: a bit flipped anywhere in the spool (one at a
// time, at every byte offset, a different bit each) loses at most the one
// frame it hit: every other frame is replayed, once, in order; and replay
// reports damage (Open then keeps a copy) whenever a frame or the header
// was hit — but for a flip in the last frame's generation, which makes it
// look like the tail's zeros or an older generation: that one frame is
// lost without a trace, as a torn tail is.
func TestReplayEveryBitFlip(t *testing.T) {
	const n = 20
	// Generation 7: no single flipped bit turns zeros into it.
	good, offs, ids := spoolImage(t, 7, n, 64)
	end := offs[n-1] + frameHeader + int64(binary.LittleEndian.Uint32(good[offs[n-1]:]))
	hit := func(at int64) int { // the frame holding byte at, -1 if none
		for i := n - 1; i >= 0; i-- {
			if at >= offs[i] {
				if at < end || i < n-1 {
					return i
				}
				return -1
			}
		}
		return -1
	}
	b := make([]byte, len(good))
	for at := range int64(len(good)) {
		copy(b, good)
		b[at] ^= 1 << (at % 8)
		got, rep := replayed(t, b)
		frame := -1
		if at >= frameStart {
			frame = hit(at)
		}
		want := ids
		if frame >= 0 {
			want = slices.Delete(slices.Clone(ids), frame, frame+1)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("bit %d of byte %d (frame %d) flipped: replayed %v, want %v", at%8, at, frame, got, want)
		}
		inGen := frame >= 0 && at-offs[frame] >= 4 && at-offs[frame] < 12
		wantDamage := at < int64(headerSize) || frame >= 0 && !(frame == n-1 && inGen)
		if rep.damaged() != wantDamage {
			t.Fatalf("bit %d of byte %d (frame %d) flipped: damage reported %v, want %v (%+v)", at%8, at, frame, rep.damaged(), wantDamage, rep)
		}
		if frame >= 0 && frame < n-1 && (len(rep.skips) != 1 || rep.skips[0].at != offs[frame] || rep.skips[0].n != offs[frame+1]-offs[frame] || rep.skips[0].frames != n-1-frame) {
			t.Fatalf("bit %d of byte %d (frame %d) flipped: skipped %+v, want frame %d's %d bytes at %d, %d frames after", at%8, at, frame, rep.skips, frame, offs[frame+1]-offs[frame], offs[frame], n-1-frame)
		}
	}
}

// TestReplayEveryTruncation: a spool cut at any offset replays the frames
// wholly before the cut, and nothing else; it is no error.
func TestReplayEveryTruncation(t *testing.T) {
	const n = 20
	good, offs, ids := spoolImage(t, 1, n, 64)
	for cut := range len(good) + 1 {
		got, rep := replayed(t, good[:cut])
		whole := 0
		for i, off := range offs {
			next := int64(len(good) - 64)
			if i+1 < n {
				next = offs[i+1]
			}
			if off < int64(cut) && next <= int64(cut) {
				whole++
			}
		}
		if !slices.Equal(got, ids[:whole]) {
			t.Fatalf("cut at %d: replayed %v, want %v", cut, got, ids[:whole])
		}
		if len(rep.skips) > 0 || rep.headerBad {
			t.Fatalf("cut at %d: %+v, want no damage but a torn tail", cut, rep)
		}
	}
}

// TestOpenKeepsDamagedSpool: Open replays every undamaged frame of a
// spool with a damaged frame into the sink, whose sums count them;
// keeps the damaged spool aside, byte for byte, before it rewinds it;
// logs the stretch skipped at error level, and counts it.
func TestOpenKeepsDamagedSpool(t *testing.T) {
	const n = 20
	good, offs, ids := spoolImage(t, 5, n, 0)
	b := bytes.Clone(good)
	b[offs[3]+frameHeader+5] ^= 0x10 // frame 3's payload
	b[2] ^= 0x01                     // and the header
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger"+Suffix)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	l := openTest(t, Options{Path: path, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	want := slices.Delete(slices.Clone(ids), 3, 4)
	recs := checkAggregates(t, l)
	if got := storedIDs(t, l); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Errorf("stored %v, want %v", got, want)
	}
	if len(recs) != n-1 {
		t.Errorf("%d records, want %d", len(recs), n-1)
	}
	if got := l.DamagedFrames(); got != 1 {
		t.Errorf("DamagedFrames = %d, want 1", got)
	}
	kept, err := filepath.Glob(path + "-damaged-*")
	if err != nil || len(kept) != 1 {
		t.Fatalf("kept aside: %v %v, want one copy", kept, err)
	}
	if c, err := os.ReadFile(kept[0]); err != nil || !bytes.Equal(c, b) {
		t.Errorf("the copy kept aside differs from the damaged spool (%v)", err)
	}
	if l.sp.off != frameStart || l.sp.gen != 6 {
		t.Errorf("spool at %d of generation %d, want rewound to %d, generation 6", l.sp.off, l.sp.gen, frameStart)
	}
	for _, s := range []string{`"level":"ERROR","msg":"damaged spool frame skipped"`, fmt.Sprintf(`"offset":%d,"bytes_skipped":%d,"frames_recovered_after":%d`, offs[3], offs[4]-offs[3], n-4),
		"header does not verify"} {
		if !strings.Contains(logs.String(), s) {
			t.Errorf("log lacks %s:\n%s", s, logs.String())
		}
	}

	// An undamaged spool is not copied.
	path2 := filepath.Join(dir, "clean"+Suffix)
	if err := os.WriteFile(path2, good, 0o600); err != nil {
		t.Fatal(err)
	}
	l2 := openTest(t, Options{Path: path2})
	if got := storedIDs(t, l2); len(got) != n {
		t.Errorf("clean spool: stored %d records, want %d", len(got), n)
	}
	if kept, _ := filepath.Glob(path2 + "-damaged-*"); len(kept) != 0 || l2.DamagedFrames() != 0 {
		t.Errorf("clean spool: kept %v, %d damaged", kept, l2.DamagedFrames())
	}
}

// TestReplayDropsUndecodable: a frame whose CRC holds but whose record
// does not decode or validate is dropped and reported; the others are
// replayed.
func TestReplayDropsUndecodable(t *testing.T) {
	path := spoolPath(t)
	sp, err := openSpool(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.rewind(true); err != nil {
		t.Fatal(err)
	}
	a, neg := fullRecord("a"), fullRecord("neg")
	neg.Tokens[tokens.Input] = -1
	if err := sp.write(sp.frames([][]byte{{9, 9}, appendRecord(nil, &neg), appendRecord(nil, &a)})); err != nil {
		t.Fatal(err)
	}
	if err := sp.close(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reported []error
	onError := func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }
	// A Reader (sluice spend) inserts the frames itself on each read, and
	// reports nothing: what the spool holds is its owner's to report,
	// once.
	sink := newMemSink(t)
	reader := openOn(t, sink, Options{Path: path, Reader: true, OnError: onError})
	for range 2 {
		if got, err := records(testctx.Deadline(t), reader); err != nil || len(got) != 1 || got[0].RequestID != "a" {
			t.Errorf("a Reader read %v, %v; want [a]", got, err)
		}
	}
	if len(reported) != 0 {
		t.Errorf("a Reader reported %v; want nothing", reported)
	}
	l := openOn(t, sink, Options{Path: path, OnError: onError})
	if got := storedIDs(t, l); len(got) != 1 || got[0] != "a" {
		t.Errorf("replayed %v, want [a]", got)
	}
	if len(reported) != 2 || !errors.Is(reported[0], errRecordEncoding) || !errors.Is(reported[1], ledger.ErrInvalid) {
		t.Errorf("reported %v, want the undecodable frame and the invalid record", reported)
	}
}

// TestSecondWriterRefused: a second Ledger of a spool — another `sluice
// serve`, which would admit every budget a second time — is refused while
// the first holds it, whatever process it is in, before it touches the
// database (Open's check is not called); a Reader (`sluice spend`) is
// not, and sees the first one's records; once the first is closed, a
// writer opens.
func TestSecondWriterRefused(t *testing.T) {
	if !canLock {
		t.Skip("no spool where files cannot be locked")
	}
	path := spoolPath(t)
	s := newMemSink(t)
	a := openOn(t, s, Options{Path: path})
	if a.sp == nil {
		t.Fatal("the first Ledger has no spool")
	}
	stop := start(t, a)
	if err := a.Append(t.Context(), record("from-a")); err != nil {
		t.Fatal(err)
	}
	checked := false
	b, err := Open(t.Context(), s, Options{Path: path}, func() error { checked = true; return nil })
	var inUse *InUseError
	if !errors.Is(err, ErrInUse) || !errors.As(err, &inUse) || inUse.Path != path {
		t.Fatalf("second Open: %v %v, want an *InUseError for %s", b, err, path)
	}
	if checked {
		t.Error("the second writer's Open ran its check (it would have opened the database) before it was refused")
	}
	if _, serr := os.Stat("/proc/locks"); serr == nil && (inUse.PID != os.Getpid() || !strings.Contains(err.Error(), fmt.Sprintf("is locked by process %d", os.Getpid()))) {
		t.Errorf("the holder's pid is %d, want %d (this process), and named in %q", inUse.PID, os.Getpid(), err)
	}
	r := openOn(t, s, Options{Path: path, Reader: true})
	if got := storedIDs(t, r); len(got) != 1 || got[0] != "from-a" {
		t.Errorf("the reader sees %v, want from-a", got)
	}
	if err := errors.Join(stop(), a.Close()); err != nil {
		t.Fatal(err)
	}
	c := openOn(t, s, Options{Path: path})
	if c.sp == nil {
		t.Error("no spool once the first was closed")
	}
}

// TestSpoolRewinds: past Options.RewindAt, with the sink caught up, the
// spool starts a new generation at frameStart, so it stays small; records
// are neither lost nor counted twice, across a reopen too.
func TestSpoolRewinds(t *testing.T) {
	path := spoolPath(t)
	s := newMemSink(t)
	l := openOn(t, s, Options{Path: path, RewindAt: 4096})
	stop := start(t, l)
	gen := l.sp.gen
	for i := range 300 {
		if err := l.Append(t.Context(), record(fmt.Sprintf("r%03d", i))); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 { // let the ingester catch up now and then
			if _, err := records(t.Context(), l); err != nil {
				t.Fatal(err)
			}
		}
	}
	if l.sp.gen == gen {
		t.Errorf("no rewind in 300 records of a 4 KiB spool")
	}
	// One step of frames, and the reserve grown ahead of them.
	if st, err := os.Stat(path); err != nil || st.Size() > growStep+spoolReserve {
		t.Errorf("spool: %v %v, want at most %d bytes", st.Size(), err, growStep+spoolReserve)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil { // the next Open writes: one writer at a time
		t.Fatal(err)
	}
	r := openOn(t, s, Options{Path: path})
	if got := storedIDs(t, r); len(got) != 300 {
		t.Errorf("%d records after reopen, want 300", len(got))
	}
	checkAggregates(t, r)
	if n := s.duplicates(); n != 0 {
		t.Errorf("%d records written to the sink twice; the stop's rewind should have left none to replay", n)
	}
}

// TestBrokenSpoolCommitsDirectly: when the spool cannot be written, the
// failure is reported, and that Append and every later one commit to
// the sink directly; nothing is lost.
func TestBrokenSpoolCommitsDirectly(t *testing.T) {
	var mu sync.Mutex
	var reported []error
	// With an ingester that waits an hour for more spooled records: a
	// direct Append's caller waits for its commit, so it is committed at
	// once.
	l := openTest(t, Options{Path: spoolPath(t), IngestDelay: time.Hour, OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})
	start(t, l)
	if err := l.Append(testctx.Deadline(t), record("before")); err != nil {
		t.Fatal(err)
	}
	if err := l.sp.f.Close(); err != nil { // every write now fails
		t.Fatal(err)
	}
	for _, id := range []string{"after1", "after2"} {
		if err := l.Append(testctx.Deadline(t), record(id)); err != nil {
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
	devNull, _ := os.Open(os.DevNull)
	l.sp.f = osFile{devNull} // for Close
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
		if _, err := prepare(r); err != nil {
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

// FuzzReplay: any spool file replays without panicking, in order, each
// frame it yields within the file, after the last, and verifying; every
// record it yields decodes or is reported; through a file, too.
func FuzzReplay(f *testing.F) {
	dir := f.TempDir()
	seed := func(name string, recs ...ledger.Record) []byte {
		return writeSpool(f, filepath.Join(dir, name), 1, recs...)
	}
	f.Add(seed("one", fullRecord("a")))
	two := seed("two", fullRecord("a"), record("b"))
	f.Add(two)
	f.Add([]byte(spoolMagic))
	three := seed("three", fullRecord("a"), record("b"), fullRecord("c"))
	damaged := bytes.Clone(three) // the first frame's payload damaged
	damaged[frameStart+frameHeader+2] ^= 4
	f.Add(damaged)
	header := bytes.Clone(two) // the header damaged
	header[len(spoolMagic)] ^= 1
	f.Add(header)
	f.Fuzz(func(t *testing.T, b []byte) {
		last := int64(frameStart)
		rep, err := replayFrames(bytes.NewReader(b), int64(len(b)), func(off int64, p []byte) error {
			if off < last || off+frameHeader+int64(len(p)) > int64(len(b)) || !bytes.Equal(b[off+frameHeader:off+frameHeader+int64(len(p))], p) {
				t.Fatalf("frame at %d of %d bytes, after %d, in a file of %d", off, len(p), last, len(b))
			}
			if frameCRC(b[off:off+12], p) != binary.LittleEndian.Uint32(b[off+12:]) {
				t.Fatalf("the frame at %d does not verify", off)
			}
			last = off + frameHeader + int64(len(p))
			_, _ = decodeRecord(p)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if rep.end != last {
			t.Fatalf("replay ended at %d, its last frame at %d", rep.end, last)
		}

		path := filepath.Join(t.TempDir(), "spool")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		sp, err := openSpool(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sp.close()
		if _, err := sp.replay(func(p []byte) error { _, _ = decodeRecord(p); return nil }); err != nil {
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
	for _, spooled := range []bool{false, true} {
		t.Run(fmt.Sprintf("spool=%v", spooled), func(t *testing.T) {
			path := func() string {
				if spooled {
					return spoolPath(t)
				}
				return ""
			}
			l := openTest(t, Options{Path: path(), Linger: time.Hour})
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
			l = openTest(t, Options{Path: path(), Linger: linger})
			var wg sync.WaitGroup
			for _, id := range []string{"pair1", "pair2"} { // queued before Run: one batch of two
				wg.Go(func() {
					if err := l.Append(t.Context(), record(id)); err != nil {
						t.Error(err)
					}
				})
			}
			testctx.Wait(t, "two Appends queued before Run", func() bool { return l.Queued() >= 2 })
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

// TestReaderSeesOwnersRecords: a Ledger that does not own the spool (as
// `sluice spend` beside a running server) sees the records the owner
// acknowledged and has not ingested yet — here never, until it stops —
// and when the owner ingests them after all, nothing is counted twice.
//
// Here the owner and the reader share one memSink, as they share one
// database file (internal/ledger/sqlite runs this on SQLite too).
func TestReaderSeesOwnersRecords(t *testing.T) {
	path := spoolPath(t)
	s := newMemSink(t)
	owner := openOn(t, s, Options{Path: path, IngestDelay: time.Hour})
	stop := start(t, owner)
	for i := range 5 {
		if err := owner.Append(t.Context(), record(fmt.Sprintf("r%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := owner.Backlog(); n != 5 {
		t.Fatalf("owner's backlog %d, want 5 (the ingester must not have run)", n)
	}
	reader := openOn(t, s, Options{Path: path, Reader: true})
	if reader.sp != nil {
		t.Fatal("the reader got the spool")
	}
	if got := storedIDs(t, reader); len(got) != 5 {
		t.Errorf("the reader sees %v, want 5 records", got)
	}
	checkAggregates(t, reader)
	dups := s.duplicates()
	if err := stop(); err != nil { // the owner ingests: all duplicates
		t.Fatal(err)
	}
	if n := s.duplicates() - dups; n != 5 {
		t.Errorf("the owner's ingestion skipped %d records as already stored, want all 5", n)
	}
	if got := storedIDs(t, reader); len(got) != 5 {
		t.Errorf("after the owner ingested, %d records, want 5", len(got))
	}
	checkAggregates(t, reader) // the sums of 5 records, not 10
	lt := lifetime(t, reader)
	if len(lt) == 0 {
		t.Error("no lifetime sums")
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
	path := spoolPath(t)
	// The wait as long as a slow machine (or the race detector) may need
	// for an ingestion: the mechanism is under test, not this machine.
	l := openTest(t, Options{Path: path, RewindAt: 16 << 10, RewindWait: 10 * time.Second})
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
	if st, err := os.Stat(path); err != nil || st.Size() > growStep+spoolReserve {
		t.Errorf("spool after 12,000 records: %v %v, want at most %d bytes", st.Size(), err, growStep+spoolReserve)
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
