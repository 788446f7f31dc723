package spool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// The spool is the file (Options.Path; the SQLite ledger's file path plus
// Suffix) that makes a record durable before the sink has it: the committer writes
// each batch to it as frames, with one write and one fdatasync, and
// acknowledges the batch's Appends; the ingester then inserts the records
// into the sink in larger transactions, off the reply path. Once the sink
// holds every record written since the last rewind and the spool has
// grown past rewindAt, the committer rewinds it: the header gets the next
// generation and frames start again at frameStart. At Open, the frames of
// the header's generation are replayed into the sink (a RequestID already
// there is skipped, so a frame ingested before a crash is not counted
// again), and the spool is rewound.
//
// Layout: a header at offset 0 — magic, generation (uint64 LE), CRC-32C
// of both — then, from frameStart, frames: payload length (uint32 LE),
// generation (uint64 LE), CRC-32C (uint32 LE) of the length, the
// generation and the payload, then the payload (appendRecord's encoding).
// Frames are written in order, a batch only after the previous one's
// fdatasync returned, so a crash can tear only the tail, and a frame left
// from an earlier generation is never taken for a new one.
//
// Replay (replayFrames) reads frames from frameStart. A position where
// no frame of the generation verifies is either the tail (what follows
// is zeros, older generations' frames, or a frame torn by the crash, never
// acknowledged) or damage (a flipped bit, a bad sector) with acknowledged
// frames after it. Replay tells the two apart by resynchronizing: it
// scans forward, byte by byte (a search for the generation's 8 bytes, then
// the length and the CRC checked), for the next position where a frame of
// the generation verifies, and continues from there; only a position with
// no verifying frame anywhere after it ends replay. A flipped bit so loses
// the one frame it hit (TestReplayEveryBitFlip), not the frames after it.
// A false resync — bytes inside a damaged frame's payload, or in what
// follows the tail, taken for a frame — needs those bytes to hold this
// generation, a length within the file, and a CRC-32C over length,
// generation and payload that matches: 2⁻³² for a candidate that carries
// the generation, and the generation's 8 bytes themselves seldom occur in
// a record (whose strings are ids and names, and whose integers are
// varints). And a frame found that way is a whole, checksummed record, which
// the sink takes once (a RequestID already there is skipped).
//
// A header that does not verify (a flipped bit, or a crash while it was
// rewritten) no longer hides the frames: the generation is taken from a
// frame at frameStart whose CRC verifies (the first frame of the
// generation always starts there). If none does, the generation cannot be
// known: a frame's CRC covers its generation, but without the header any
// verifying frame in the file could be an older generation's, so nothing
// is replayed; if the file holds anything but zeros, it is kept aside
// (below) for a person to look at. A crash during a rewind that tore the
// header finds the previous generation's frames, all already in the sink:
// replaying them skips every one.
//
// When replay skipped anything (damage), or the header did not verify, or
// the tail is a frame of the generation that does not verify (torn by a
// crash while it was written, and so never acknowledged — or damaged, and
// lost), Open copies the spool to <spool>-damaged-<unix time> beside it,
// synced, before it rewinds it, and logs what it found: nothing
// acknowledged is destroyed, even by a bug in this reasoning
// (TestOpenKeepsDamagedSpool). Each stretch skipped, and a header whose
// frames' generation is lost, counts as damage (Ledger.DamagedFrames); a
// header whose generation the first frame gave back lost nothing, and is
// logged at error level uncounted; a torn tail is also what a power loss
// during a write leaves, and is logged at warn level.
//
// The file is grown in growStep steps of written zeros, and synced with
// its metadata once per step, so that the fdatasync of a batch has no
// metadata to write; it is kept spoolReserve bytes ahead of the frames,
// so that a full disk still takes the records of requests already
// answered (spool.low, Ledger.Degraded).
const (
	spoolMagic  = "SLSPOOL\x01"
	headerSize  = len(spoolMagic) + 8 + 4
	frameStart  = 512 // the header's sector, alone
	frameHeader = 4 + 8 + 4
	growStep    = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// File is what the spool does to its file: *os.File's methods, and
// SyncData, an fdatasync. It is the seam through which tests watch the
// order of writes and syncs (Options.File): which bytes a power loss
// would keep.
type File interface {
	io.ReaderAt
	io.WriterAt
	Truncate(size int64) error
	Sync() error     // the data and the metadata (fsync)
	SyncData() error // the data, and only the metadata reading it needs (fdatasync)
	Close() error
}

// osFile is a File on the disk.
type osFile struct{ *os.File }

func (f osFile) SyncData() error { return syncData(f.File) }

// spool is the open spool file, locked by this process. Only the
// committer writes it once Open returned.
type spool struct {
	f    File
	path string
	gen  uint64
	off  int64 // where the next frame goes
	size int64 // bytes the file holds
	buf  []byte
	zero []byte
	// low is why the spool could not grow its reserve (a full disk): it
	// is writing into the reserve it grew earlier; nil otherwise.
	low error
	// rewindAt is Options.RewindAt: see rewind.
	rewindAt int64
	// fault, for tests, is called before the spool grows (op "grow"):
	// an error fails the growth as the disk's would.
	fault func(op string) error
	// wrap, for tests (Options.File), wraps each file the spool opens.
	wrap func(File) File
}

// spoolReserve is how much space, past the frames written, the spool
// keeps grown and synced ahead of them (a variable, which tests shrink): when the
// disk fills, the records of requests already answered are still written
// there, durably, while the ledger refuses new requests
// (Ledger.Degraded). At a few hundred bytes a record it holds thousands,
// more than the requests in flight when the disk fills.
var spoolReserve int64 = growStep

// ErrInUse is what Open returns, in an *InUseError, when another Ledger —
// in another process, or in this one — holds the spool: that one writes
// the ledger, and a second writer would admit every budget a second time.
var ErrInUse = errors.New("the ledger is in use by another writer")

// InUseError says which file is in use, and by which process if that can
// be learnt (PID 0 if not: /proc/locks names the holder of a flock on
// Linux only).
type InUseError struct {
	Path string // the spool's
	PID  int
}

func (e *InUseError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("%s is locked by process %d", e.Path, e.PID)
	}
	return fmt.Sprintf("%s is locked by another process", e.Path)
}

func (e *InUseError) Unwrap() error { return ErrInUse }

// openSpool opens (creating it) and locks the spool at path. It returns
// an *InUseError when another Ledger, in this process or another, holds
// the lock, and nil, nil where files cannot be locked (lock_other.go):
// there no Ledger has a spool. wrap, if not nil, is given the file to
// wrap (tests).
func openSpool(path string, wrap func(File) File) (*spool, error) {
	if !canLock {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	locked, err := lockFile(f)
	if err == nil && !locked {
		err = &InUseError{Path: path, PID: lockHolder(f)}
	}
	if err != nil {
		return nil, errors.Join(err, f.Close())
	}
	st, err := f.Stat()
	if err != nil {
		return nil, errors.Join(err, f.Close())
	}
	if st.Size() == 0 {
		// New (or never written): make its directory entry durable before
		// any frame in it is acknowledged.
		if err := syncDir(filepath.Dir(path), wrap); err != nil {
			return nil, errors.Join(err, f.Close())
		}
	}
	return &spool{f: wrapFile(f, wrap), path: path, size: st.Size(), off: frameStart, rewindAt: DefaultRewindAt, wrap: wrap}, nil
}

// wrapFile is f as a File, wrapped by wrap if it is not nil.
func wrapFile(f *os.File, wrap func(File) File) File {
	var sf File = osFile{f}
	if wrap != nil {
		sf = wrap(sf)
	}
	return sf
}

// syncDir makes the entries of directory dir durable (an fsync of it).
func syncDir(dir string, wrap func(File) File) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	f := wrapFile(d, wrap)
	return errors.Join(f.Sync(), f.Close())
}

// replay calls fn with the payload of every frame of the generation, in
// order (replayFrames), sets the spool's generation, and leaves it
// positioned after the last frame replayed.
func (s *spool) replay(fn func(payload []byte) error) (replayReport, error) {
	rep, err := replayFrames(s.f, s.size, func(_ int64, p []byte) error { return fn(p) })
	s.gen, s.off = rep.gen, rep.end
	return rep, err
}

// replayReport is what replayFrames found.
type replayReport struct {
	gen    uint64 // the header's, or the one recovered from the first frame
	end    int64  // after the last frame replayed; frameStart if none was
	frames int    // replayed
	// headerBad: the header did not verify. genRecovered: the generation
	// was then taken from the frame at frameStart; lostGen: it could not
	// be, and the file holds more than zeros.
	headerBad, genRecovered, lostGen bool
	skips                            []skipped
	// tornTail is where a frame of the generation that does not verify
	// ends replay (no frame verifies after it), 0 if none does.
	tornTail int64
}

// skipped is a stretch of the file replay skipped: at, n bytes, and the
// frames replayed after it (up to the next stretch).
type skipped struct {
	at, n  int64
	frames int
}

// damaged reports whether a copy of the spool must be kept before it is
// rewound.
func (r replayReport) damaged() bool {
	return r.headerBad && (r.genRecovered || r.lostGen) || len(r.skips) > 0 || r.tornTail > 0
}

// damagedFrames is what the spool's damage counter counts: each stretch
// skipped (at least one frame: how many it held cannot be known), and a
// header whose frames' generation is lost.
func (r replayReport) damagedFrames() int64 {
	n := int64(len(r.skips))
	if r.lostGen {
		n++
	}
	return n
}

// replayFrames calls fn with the offset and payload of every frame of the
// spool's generation, in order, resynchronizing past damage (see the
// spool's comment). The payload is valid only during the call. A file
// without a valid header and without a verifying frame at frameStart
// (new, or torn while being rewound, when nothing was unacknowledged in
// it) has no frames. It fails only if reading fails, or fn does.
func replayFrames(r io.ReaderAt, size int64, fn func(off int64, payload []byte) error) (replayReport, error) {
	rep := replayReport{end: frameStart}
	w := &window{r: r, size: size}
	h, err := w.bytes(0, headerSize)
	if h == nil || err != nil {
		return rep, err // shorter than a header: nothing written yet
	}
	gen, ok := parseHeader(h)
	rep.gen = gen
	if !ok {
		rep.headerBad = true
		fh, err := w.bytes(frameStart, frameHeader)
		if err != nil {
			return rep, err
		}
		if fh != nil {
			g := binary.LittleEndian.Uint64(fh[4:])
			if _, ok, err := w.frameAt(frameStart, g); err != nil {
				return rep, err
			} else if ok && g != 0 {
				rep.gen, rep.genRecovered = g, true
			}
		}
		if !rep.genRecovered {
			rep.lostGen, err = w.holdsData()
			return rep, err
		}
	}
	for off := int64(frameStart); ; {
		n, ok, err := w.frameAt(off, rep.gen)
		if err != nil {
			return rep, err
		}
		if ok {
			p, err := w.bytes(off+frameHeader, int(n))
			if err != nil {
				return rep, err
			}
			if err := fn(off, p); err != nil {
				return rep, err
			}
			off += frameHeader + int64(n)
			rep.end, rep.frames = off, rep.frames+1
			if len(rep.skips) > 0 {
				rep.skips[len(rep.skips)-1].frames++
			}
			continue
		}
		next, err := w.next(off+1, rep.gen)
		if err != nil {
			return rep, err
		}
		if next < 0 { // the tail
			if fh, err := w.bytes(off, frameHeader); err != nil {
				return rep, err
			} else if fh != nil && binary.LittleEndian.Uint64(fh[4:]) == rep.gen {
				rep.tornTail = off
			}
			return rep, nil
		}
		rep.skips = append(rep.skips, skipped{at: off, n: next - off})
		off = next
	}
}

// windowSize is how much of the spool replay reads at a time.
const windowSize = 64 << 10

// window reads a spool through a buffer, so that replay costs about one
// read per windowSize bytes, frame by frame or scanning.
type window struct {
	r    io.ReaderAt
	size int64
	buf  []byte
	at   int64 // the offset of buf[0]
}

// bytes returns the n bytes at off, valid until the next call, or nil if
// the file ends before them. A file that shrank meanwhile (another
// Ledger's spool, rewound and cut back) ends where it ends now.
func (w *window) bytes(off int64, n int) ([]byte, error) {
	if off < 0 || off+int64(n) > w.size {
		return nil, nil
	}
	if off >= w.at && off+int64(n) <= w.at+int64(len(w.buf)) {
		return w.buf[off-w.at : off-w.at+int64(n)], nil
	}
	m := int(min(int64(max(n, windowSize)), w.size-off))
	if cap(w.buf) < m {
		w.buf = make([]byte, m)
	}
	w.buf = w.buf[:m]
	k, err := w.r.ReadAt(w.buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		w.buf = w.buf[:0]
		return nil, err
	}
	w.buf, w.at = w.buf[:k], off
	if k < n {
		w.size = off + int64(k)
		return nil, nil
	}
	return w.buf[:n], nil
}

// frameAt reports whether a frame of generation gen that verifies starts
// at off, and its payload's length. The CRC is computed window by window,
// so a corrupt length costs no allocation.
func (w *window) frameAt(off int64, gen uint64) (uint32, bool, error) {
	h, err := w.bytes(off, frameHeader)
	if h == nil || err != nil {
		return 0, false, err
	}
	n := binary.LittleEndian.Uint32(h[0:])
	// A length past the file's end is a torn or foreign frame; any
	// shorter one may be a record's (Append bounds no field).
	if binary.LittleEndian.Uint64(h[4:]) != gen || int64(n) > w.size-off-frameHeader {
		return 0, false, nil
	}
	want := binary.LittleEndian.Uint32(h[12:])
	crc := crc32.Checksum(h[:12], castagnoli)
	for at, left := off+frameHeader, int64(n); left > 0; {
		k := min(left, windowSize)
		b, err := w.bytes(at, int(k))
		if b == nil || err != nil {
			return 0, false, err
		}
		crc = crc32.Update(crc, castagnoli, b)
		at, left = at+k, left-k
	}
	return n, crc == want, nil
}

// next returns the offset of the first frame of generation gen that
// verifies at or after from, or -1: it looks for the generation's bytes,
// and checks each place they occur.
func (w *window) next(from int64, gen uint64) (int64, error) {
	var pat [8]byte
	binary.LittleEndian.PutUint64(pat[:], gen)
	for q := from; q+frameHeader <= w.size; {
		b, err := w.bytes(q, int(min(windowSize, w.size-q)))
		if b == nil || err != nil {
			return -1, err
		}
		i := bytes.Index(b[4:], pat[:])
		if i < 0 { // no frame header starts in q .. q+len(b)-12
			q += int64(len(b) - 11)
			continue
		}
		c := q + int64(i)
		if _, ok, err := w.frameAt(c, gen); err != nil || ok {
			return c, err
		}
		q = c + 1
	}
	return -1, nil
}

// holdsData reports whether the file holds anything but zeros, its
// header's sector's padding aside.
func (w *window) holdsData() (bool, error) {
	h, err := w.bytes(0, headerSize)
	if h == nil || err != nil {
		return false, err
	}
	if !allZero(h) {
		return true, nil
	}
	for at := int64(frameStart); at < w.size; {
		b, err := w.bytes(at, int(min(windowSize, w.size-at)))
		if b == nil || err != nil {
			return false, err
		}
		if !allZero(b) {
			return true, nil
		}
		at += int64(len(b))
	}
	return false, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func parseHeader(h []byte) (uint64, bool) {
	if string(h[:len(spoolMagic)]) != spoolMagic {
		return 0, false
	}
	body := h[:len(spoolMagic)+8]
	return binary.LittleEndian.Uint64(h[len(spoolMagic):]), crc32.Checksum(body, castagnoli) == binary.LittleEndian.Uint32(h[len(body):])
}

func frameCRC(head, payload []byte) uint32 {
	return crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, payload)
}

// frames encodes payloads as frames of the current generation into the
// spool's buffer.
func (s *spool) frames(payloads [][]byte) []byte {
	b := s.buf[:0]
	for _, p := range payloads {
		var h [frameHeader]byte
		binary.LittleEndian.PutUint32(h[0:], uint32(len(p)))
		binary.LittleEndian.PutUint64(h[4:], s.gen)
		binary.LittleEndian.PutUint32(h[12:], frameCRC(h[:12], p))
		b = append(append(b, h[:]...), p...)
	}
	s.buf = b
	return b
}

// write appends frames (from frames) and makes them durable: one write,
// one fdatasync, after the file was grown to hold them if it had to be.
// The sync hands off the P (see syncData): the requests being answered
// meanwhile are the next batch.
func (s *spool) write(frames []byte) error {
	end := s.off + int64(len(frames))
	if end+spoolReserve > s.size {
		if err := s.grow(end + spoolReserve); err != nil {
			if end > s.size {
				return err // the reserve is spent too
			}
			s.low = err // written into the reserve
		} else {
			s.low = nil
		}
	}
	if _, err := s.f.WriteAt(frames, s.off); err != nil {
		return err
	}
	if err := s.f.SyncData(); err != nil {
		return err
	}
	s.off = end
	return nil
}

// grow writes zeros up to the next growStep past end and syncs the file
// with its metadata.
func (s *spool) grow(end int64) error {
	if s.fault != nil {
		if err := s.fault("grow"); err != nil {
			return err
		}
	}
	target := (end + growStep - 1) / growStep * growStep
	if s.zero == nil {
		s.zero = make([]byte, 64<<10)
	}
	for at := s.size; at < target; {
		n := min(int64(len(s.zero)), target-at)
		if _, err := s.f.WriteAt(s.zero[:n], at); err != nil {
			return err
		}
		at += n
	}
	if err := s.f.Sync(); err != nil {
		return err
	}
	s.size = target
	return nil
}

// regrow tries again to grow the reserve the spool is writing into
// (low set), so that the ledger takes new requests again once the disk
// has room.
func (s *spool) regrow() {
	if s.low == nil {
		return
	}
	if err := s.grow(s.off + spoolReserve); err != nil {
		s.low = err
		return
	}
	s.low = nil
}

// rewind starts the next generation: its header at offset 0, frames from
// frameStart. It is called only when the sink holds every frame written, so
// it needs no sync of its own: until the next batch's fdatasync, a crash
// leaves either header, and either way no frame that replay must find.
// With sync, it is made durable now (Open and Run's end use it so that
// the next Open replays nothing). A spool grown past four times its rewind point (the
// ingester fell behind) is cut back.
func (s *spool) rewind(sync bool) error {
	if s.size < growStep { // new: allocated before the header is written
		if err := s.grow(growStep); err != nil {
			return err
		}
	}
	s.gen++
	var h [headerSize]byte
	copy(h[:], spoolMagic)
	binary.LittleEndian.PutUint64(h[len(spoolMagic):], s.gen)
	binary.LittleEndian.PutUint32(h[len(spoolMagic)+8:], crc32.Checksum(h[:len(spoolMagic)+8], castagnoli))
	if _, err := s.f.WriteAt(h[:], 0); err != nil {
		return err
	}
	s.off = frameStart
	if s.size > 4*s.rewindAt {
		if err := s.f.Truncate(growStep); err != nil {
			return err
		}
		s.size = growStep
		sync = true
	}
	if !sync {
		return nil
	}
	return s.f.Sync()
}

// close releases the lock with the file.
func (s *spool) close() error {
	if err := s.f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", s.path, err)
	}
	return nil
}
