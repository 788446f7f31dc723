package sqlite

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// The spool is the file beside the ledger (its path plus spoolSuffix)
// that makes a record durable before SQLite has it: the committer writes
// each batch to it as frames, with one write and one fdatasync, and
// acknowledges the batch's Appends; the ingester then inserts the records
// into SQLite in larger transactions, off the reply path. Once SQLite
// holds every record written since the last rewind and the spool has
// grown past rewindAt, the committer rewinds it: the header gets the next
// generation and frames start again at frameStart. At Open, the frames of
// the header's generation are replayed into SQLite (a RequestID already
// there is skipped, so a frame ingested before a crash is not counted
// again), and the spool is rewound.
//
// Layout: a header at offset 0 — magic, generation (uint64 LE), CRC-32C
// of both — then, from frameStart, frames: payload length (uint32 LE),
// generation (uint64 LE), CRC-32C (uint32 LE) of the length, the
// generation and the payload, then the payload (appendRecord's encoding).
// Replay reads frames until one is short, fails its CRC, or carries
// another generation: frames are written in order, a batch only after the
// previous one's fdatasync returned, so only the tail can be torn, and a
// frame left from an earlier generation is never taken for a new one.
//
// The file is grown in growStep steps of written zeros, and synced with
// its metadata once per step, so that the fdatasync of a batch has no
// metadata to write.
const (
	spoolSuffix = "-spool"
	spoolMagic  = "SLSPOOL\x01"
	headerSize  = len(spoolMagic) + 8 + 4
	frameStart  = 512 // the header's sector, alone
	frameHeader = 4 + 8 + 4
	growStep    = 1 << 20
)

// rewindAt is how far the spool grows before it is rewound (a variable
// for tests).
var rewindAt int64 = 1 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// spool is the open spool file, locked by this process. Only the
// committer writes it once Open returned.
type spool struct {
	f    *os.File
	path string
	gen  uint64
	off  int64 // where the next frame goes
	size int64 // bytes the file holds
	buf  []byte
	zero []byte
}

// openSpool opens (creating it) and locks the spool at path. It returns
// nil, nil when another Ledger, in this process or another, holds the
// lock: that one owns the spool, and this one commits to SQLite directly.
func openSpool(path string) (*spool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	locked, err := lockFile(f)
	if err != nil || !locked {
		return nil, errors.Join(err, f.Close())
	}
	st, err := f.Stat()
	if err != nil {
		return nil, errors.Join(err, f.Close())
	}
	if st.Size() == 0 {
		// New (or never written): make its directory entry durable before
		// any frame in it is acknowledged.
		if err := syncDir(filepath.Dir(path)); err != nil {
			return nil, errors.Join(err, f.Close())
		}
	}
	return &spool{f: f, path: path, size: st.Size(), off: frameStart}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// replay calls fn with the payload of every frame of the header's
// generation, in order, and leaves the spool positioned after them. A
// file without a valid header (new, or torn while being rewound, when
// nothing was unacknowledged in it) has no frames.
func (s *spool) replay(fn func(payload []byte) error) error {
	r := bufio.NewReaderSize(io.NewSectionReader(s.f, 0, s.size), 64<<10)
	var h [headerSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil // shorter than a header: nothing written yet
	}
	gen, ok := parseHeader(h[:])
	s.gen = gen
	if !ok {
		return nil
	}
	if _, err := r.Discard(frameStart - headerSize); err != nil {
		return nil
	}
	var fh [frameHeader]byte
	payload := make([]byte, 0, 4096)
	for {
		if _, err := io.ReadFull(r, fh[:]); err != nil {
			return nil
		}
		// A length past the file's end is a torn or foreign frame; any
		// shorter one may be a record's (Append bounds no field).
		n := binary.LittleEndian.Uint32(fh[0:])
		if int64(n) > s.size-s.off-frameHeader || binary.LittleEndian.Uint64(fh[4:]) != gen {
			return nil
		}
		if cap(payload) < int(n) {
			payload = make([]byte, n)
		}
		payload = payload[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			return nil
		}
		if frameCRC(fh[:12], payload) != binary.LittleEndian.Uint32(fh[12:]) {
			return nil
		}
		if err := fn(payload); err != nil {
			return err
		}
		s.off += int64(frameHeader + len(payload))
	}
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
	if end > s.size {
		if err := s.grow(end); err != nil {
			return err
		}
	}
	if _, err := s.f.WriteAt(frames, s.off); err != nil {
		return err
	}
	if err := syncData(s.f); err != nil {
		return err
	}
	s.off = end
	return nil
}

// grow writes zeros up to the next growStep past end and syncs the file
// with its metadata.
func (s *spool) grow(end int64) error {
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

// rewind starts the next generation: its header at offset 0, frames from
// frameStart. It is called only when SQLite holds every frame written, so
// it needs no sync of its own: until the next batch's fdatasync, a crash
// leaves either header, and either way no frame that replay must find.
// With sync, it is made durable now (Open and Run's end use it so that
// the next Open replays nothing). A spool grown past four times rewindAt (the
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
	if s.size > 4*rewindAt {
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
