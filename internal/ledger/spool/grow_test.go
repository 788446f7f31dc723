package spool

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// memFile is a File in memory that records what was done to it, so that
// a test sees each write, sync and truncation the spool makes.
type memFile struct {
	b           []byte
	ops         []string
	truncateErr error
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	return bytes.NewReader(f.b).ReadAt(p, off)
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(f.b)) {
		f.b = append(f.b, make([]byte, end-int64(len(f.b)))...)
	}
	copy(f.b[off:], p)
	if allZero(p) {
		f.ops = append(f.ops, "zeros")
	} else {
		f.ops = append(f.ops, fmt.Sprintf("write %d+%d", off, len(p)))
	}
	return len(p), nil
}

func (f *memFile) Truncate(n int64) error {
	if f.truncateErr != nil {
		return f.truncateErr
	}
	f.b = f.b[:min(n, int64(len(f.b)))]
	f.b = append(f.b, make([]byte, n-int64(len(f.b)))...)
	f.ops = append(f.ops, fmt.Sprintf("truncate %d", n))
	return nil
}

func (f *memFile) Sync() error     { f.ops = append(f.ops, "sync"); return nil }
func (f *memFile) SyncData() error { f.ops = append(f.ops, "syncdata"); return nil }
func (f *memFile) Close() error    { return nil }

var _ io.ReaderAt = (*memFile)(nil)

// sized is a memFile already holding size bytes, and its spool.
func sized(size int64, off int64) (*memFile, *spool) {
	f := &memFile{b: make([]byte, size)}
	return f, &spool{f: f, size: size, off: off, gen: 1, rewindAt: DefaultRewindAt}
}

func wantOps(t *testing.T, step string, f *memFile, want ...string) {
	t.Helper()
	if !slices.Equal(f.ops, want) {
		t.Fatalf("%s: %q; want %q", step, f.ops, want)
	}
	f.ops = nil
}

// TestGrowToTheStep: the spool grows to the growStep at or past what it
// needs, from any size it had, writing zeros exactly up to there, then
// syncs it with its metadata.
func TestGrowToTheStep(t *testing.T) {
	for _, c := range []struct{ from, end, want int64 }{
		{0, 1, growStep},
		{1000, 2 * growStep, 2 * growStep},
		{1000, 2*growStep + 1, 3 * growStep},
		{growStep, growStep + 1, 2 * growStep},
	} {
		f, s := sized(c.from, frameStart)
		if err := s.grow(c.end); err != nil {
			t.Fatal(err)
		}
		if s.size != c.want || int64(len(f.b)) != c.want {
			t.Errorf("grow(%d) from %d: size %d, file %d bytes; want %d", c.end, c.from, s.size, len(f.b), c.want)
		}
		if f.ops[len(f.ops)-1] != "sync" || slices.Contains(f.ops, "syncdata") {
			t.Errorf("grow(%d) from %d: %q; want zeros, then a sync", c.end, c.from, f.ops)
		}
	}
}

// TestWriteKeepsTheReserve: a batch is written with one write and one
// fdatasync while the reserve past it is grown already — up to the last
// byte — and grows the file first otherwise.
func TestWriteKeepsTheReserve(t *testing.T) {
	size := 2*growStep + spoolReserve
	frames := filled(100)

	f, s := sized(size, 2*growStep-100)
	if err := s.write(frames); err != nil {
		t.Fatal(err)
	}
	wantOps(t, "a batch ending where the reserve fits exactly", f, fmt.Sprintf("write %d+100", 2*growStep-100), "syncdata")
	if s.off != 2*growStep || s.low != nil {
		t.Fatalf("after the write: off %d, low %v; want %d, nil", s.off, s.low, 2*growStep)
	}

	f, s = sized(size, 2*growStep-99)
	if err := s.write(frames); err != nil {
		t.Fatal(err)
	}
	if s.size <= size || f.ops[0] != "zeros" || !slices.Contains(f.ops, "sync") || f.ops[len(f.ops)-1] != "syncdata" {
		t.Fatalf("a batch one byte into the reserve: %q, size %d; want the file grown and synced, then the batch", f.ops, s.size)
	}
}

// TestWriteIntoTheReserve: when the disk refuses to grow the spool, a
// batch that fits in what is left — up to the file's last byte — is
// written durably and the spool is low; one that does not fit fails.
func TestWriteIntoTheReserve(t *testing.T) {
	full := errors.New("no space left on device")
	frames := filled(100)
	size := int64(2 * growStep)

	f, s := sized(size, size-100)
	s.fault = func(string) error { return full }
	if err := s.write(frames); err != nil {
		t.Fatalf("a batch ending at the file's last byte: %v; want it written into the reserve", err)
	}
	wantOps(t, "into the reserve", f, fmt.Sprintf("write %d+100", size-100), "syncdata")
	if !errors.Is(s.low, full) {
		t.Fatalf("low = %v; want the disk's error", s.low)
	}

	f, s = sized(size, size-99)
	s.fault = func(string) error { return full }
	if err := s.write(frames); !errors.Is(err, full) {
		t.Fatalf("a batch one byte past the file: %v; want the disk's error", err)
	}
	wantOps(t, "past the reserve", f)
	if s.off != size-99 {
		t.Fatalf("off moved to %d by a failed write", s.off)
	}

	// The disk has room again: regrow restores the reserve past the frames.
	_, s = sized(size, size-100)
	s.low = full
	s.regrow()
	if s.low != nil || s.size < s.off+spoolReserve {
		t.Fatalf("regrow with room: low %v, size %d; want nil and at least %d", s.low, s.size, s.off+spoolReserve)
	}
	// And while it has none, the spool stays low.
	_, s = sized(size, size-100)
	s.low = full
	s.fault = func(string) error { return full }
	s.regrow()
	if !errors.Is(s.low, full) || s.size != size {
		t.Fatalf("regrow on a full disk: low %v, size %d; want the disk's error and %d", s.low, s.size, size)
	}
}

// TestRewindCutsBackOnlyPastFourTimes: a rewind writes the next
// generation's header, and cuts the file back to one growStep — synced
// — only when it grew past four times the rewind point; a new spool is
// allocated first, one already a growStep long is not grown again.
func TestRewindCutsBackOnlyPastFourTimes(t *testing.T) {
	const rewindAt = growStep
	header := func(f *memFile) uint64 {
		t.Helper()
		g, ok := parseHeader(f.b[:headerSize])
		if !ok {
			t.Fatal("the rewound spool's header does not verify")
		}
		return g
	}

	f, s := sized(4*rewindAt, 3*growStep)
	s.rewindAt = rewindAt
	if err := s.rewind(false); err != nil {
		t.Fatal(err)
	}
	wantOps(t, "rewind at four times the rewind point", f, fmt.Sprintf("write 0+%d", headerSize))
	if s.size != 4*rewindAt || s.off != frameStart || header(f) != 2 {
		t.Fatalf("after the rewind: size %d, off %d, generation %d; want %d, %d, 2", s.size, s.off, header(f), 4*rewindAt, frameStart)
	}

	f, s = sized(4*rewindAt+1, 3*growStep)
	s.rewindAt = rewindAt
	if err := s.rewind(false); err != nil {
		t.Fatal(err)
	}
	wantOps(t, "rewind past four times the rewind point", f, fmt.Sprintf("write 0+%d", headerSize), fmt.Sprintf("truncate %d", growStep), "sync")
	if s.size != growStep || len(f.b) != growStep {
		t.Fatalf("after the cut: size %d, file %d; want %d", s.size, len(f.b), growStep)
	}

	f, s = sized(4*rewindAt+1, 3*growStep)
	s.rewindAt = rewindAt
	f.truncateErr = errors.New("input/output error")
	if err := s.rewind(false); !errors.Is(err, f.truncateErr) {
		t.Fatalf("rewind with a failing truncate: %v; want its error", err)
	}

	f, s = sized(growStep, frameStart)
	if err := s.rewind(false); err != nil {
		t.Fatal(err)
	}
	wantOps(t, "rewind of a spool one growStep long", f, fmt.Sprintf("write 0+%d", headerSize))

	f, s = sized(0, frameStart)
	if err := s.rewind(true); err != nil {
		t.Fatal(err)
	}
	if s.size != growStep || f.ops[0] != "zeros" || f.ops[len(f.ops)-1] != "sync" {
		t.Fatalf("rewind of a new spool: %q, size %d; want it allocated, the header written, synced", f.ops, s.size)
	}
}

// TestOpenAllocatedSpool: a crash after a new spool was allocated and
// before its first header was written leaves a file of zeros; opening it
// finds nothing, no damage, and keeps no copy. One byte more than zeros,
// and it is kept.
func TestOpenAllocatedSpool(t *testing.T) {
	path := spoolPath(t)
	if err := os.WriteFile(path, make([]byte, growStep), 0o600); err != nil {
		t.Fatal(err)
	}
	l := openTest(t, Options{Path: path})
	if kept, _ := filepath.Glob(path + "-damaged-*"); len(kept) != 0 || l.DamagedFrames() != 0 {
		t.Errorf("a spool of zeros: kept %v, %d damaged; want no copy and no damage", kept, l.DamagedFrames())
	}

	// Zeros but for one byte, anywhere past the header's sector — its
	// last byte too: something was written whose generation is lost, and
	// the file is kept aside.
	for _, at := range []int{frameStart, windowSize + 7, growStep - 1} {
		path := spoolPath(t)
		b := make([]byte, growStep)
		b[at] = 0x5a
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		l := openTest(t, Options{Path: path})
		if kept, _ := filepath.Glob(path + "-damaged-*"); len(kept) != 1 || l.DamagedFrames() != 1 {
			t.Errorf("zeros but a byte at %d: kept %v, %d damaged; want the file kept aside, one damage", at, kept, l.DamagedFrames())
		}
	}
}

// TestInUseErrorNamesTheHolder: the holder's process is named when it is
// known, and only then.
func TestInUseErrorNamesTheHolder(t *testing.T) {
	for _, c := range []struct {
		pid  int
		want string
	}{{0, "/s is locked by another process"}, {1, "/s is locked by process 1"}, {4321, "/s is locked by process 4321"}} {
		err := &InUseError{Path: "/s", PID: c.pid}
		if err.Error() != c.want || !errors.Is(err, ErrInUse) {
			t.Errorf("PID %d: %q; want %q, and ErrInUse", c.pid, err.Error(), c.want)
		}
	}
}
