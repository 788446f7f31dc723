package spool

import (
	"bytes"
	"testing"
)

// countingReader is an io.ReaderAt over b that records each read: replay
// promises about one read per windowSize bytes, never a read past the
// size it was given, and no allocation once its buffer is grown.
type countingReader struct {
	b     []byte
	reads []readCall
}

type readCall struct{ off, n int64 }

func (r *countingReader) ReadAt(p []byte, off int64) (int, error) {
	r.reads = append(r.reads, readCall{off, int64(len(p))})
	return bytes.NewReader(r.b).ReadAt(p, off)
}

// frameBytes is one frame of generation gen holding payload.
func frameBytes(gen uint64, payload []byte) []byte {
	s := &spool{gen: gen}
	return bytes.Clone(s.frames([][]byte{payload}))
}

func filled(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

// TestWindowReads: the window serves what it holds without reading
// again — at its first byte and up to its last — reads what it lacks
// once, within the file's size, and says nil for bytes past the end.
func TestWindowReads(t *testing.T) {
	const size = 3*windowSize + 100
	r := &countingReader{b: filled(size)}
	w := &window{r: r, size: size}
	get := func(off int64, n int) []byte {
		t.Helper()
		b, err := w.bytes(off, n)
		if err != nil {
			t.Fatalf("bytes(%d, %d): %v", off, n, err)
		}
		if b != nil && !bytes.Equal(b, r.b[off:off+int64(n)]) {
			t.Fatalf("bytes(%d, %d) returned other bytes than the file's", off, n)
		}
		return b
	}
	wantReads := func(step string, n int) {
		t.Helper()
		if len(r.reads) != n {
			t.Fatalf("%s: %d reads %v; want %d", step, len(r.reads), r.reads, n)
		}
	}

	get(0, 16)
	wantReads("first bytes", 1)
	if r.reads[0] != (readCall{0, windowSize}) {
		t.Fatalf("first read %v; want a window at 0", r.reads[0])
	}
	get(0, 16)
	wantReads("the window's first bytes again", 1)
	get(windowSize-16, 16)
	wantReads("the window's last bytes", 1)
	get(windowSize-8, 16)
	wantReads("bytes across the window's end", 2)
	if r.reads[1] != (readCall{windowSize - 8, windowSize}) {
		t.Fatalf("second read %v; want a window at %d", r.reads[1], windowSize-8)
	}

	// Near the end, a window holds what is left, not more.
	get(size-40, 16)
	wantReads("bytes near the end", 3)
	if r.reads[2] != (readCall{size - 40, 40}) {
		t.Fatalf("read near the end %v; want the 40 bytes left", r.reads[2])
	}
	get(size-16, 16)
	wantReads("the file's last bytes, in the window", 3)
	if b := get(size-15, 16); b != nil {
		t.Fatalf("bytes past the end = %d bytes; want nil", len(b))
	}
	if b := get(-1, 16); b != nil {
		t.Fatal("bytes at a negative offset; want nil")
	}
	wantReads("bytes past the end", 3)

	// More than a window: one read of exactly what was asked.
	get(10, windowSize+100)
	wantReads("more than a window", 4)
	if r.reads[3] != (readCall{10, windowSize + 100}) {
		t.Fatalf("large read %v; want one read of %d at 10", r.reads[3], windowSize+100)
	}
}

// TestWindowReusesItsBuffer: moving the window does not allocate once its
// buffer is as large as a window.
func TestWindowReusesItsBuffer(t *testing.T) {
	const size = 4 * windowSize
	w := &window{r: bytes.NewReader(filled(size)), size: size}
	if _, err := w.bytes(0, 16); err != nil {
		t.Fatal(err)
	}
	var off int64
	allocs := testing.AllocsPerRun(20, func() {
		off = (off + windowSize) % (size - windowSize)
		if b, err := w.bytes(off, 16); b == nil || err != nil {
			t.Fatalf("bytes(%d): %v", off, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations a window moved; want 0", allocs)
	}
}

// TestFrameAtBounds: a frame whose payload ends at the file's last byte
// verifies; a length one byte longer is refused from the header alone,
// without reading the payload it claims.
func TestFrameAtBounds(t *testing.T) {
	const gen = 9
	for _, at := range []int{0, 1000} {
		payload := filled(2*windowSize + 300)
		b := append(make([]byte, at), frameBytes(gen, payload)...)
		r := &countingReader{b: b}
		w := &window{r: r, size: int64(len(b))}
		if n, ok, err := w.frameAt(int64(at), gen); err != nil || !ok || int(n) != len(payload) {
			t.Fatalf("frame at %d ending at the file's end: %d, %v, %v; want %d, true", at, n, ok, err, len(payload))
		}

		// The same bytes, but a length reaching 1 and 8 bytes past the end.
		for _, over := range []uint32{1, 8} {
			long := bytes.Clone(b)
			n := uint32(len(payload)) + over
			long[at], long[at+1], long[at+2], long[at+3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
			r := &countingReader{b: long}
			w := &window{r: r, size: int64(len(long))}
			if _, ok, err := w.frameAt(int64(at), gen); ok || err != nil {
				t.Fatalf("frame at %d, %d bytes past the end: %v, %v; want refused", at, over, ok, err)
			}
			if len(r.reads) != 1 {
				t.Errorf("frame at %d, %d bytes past the end: %d reads %v; want only the header's", at, over, len(r.reads), r.reads)
			}
		}
	}
}

// TestNextFindsEveryPlace: the resync scan finds a frame wherever it
// starts — at the scan's first byte, across a window's edge at every
// offset around it, and as the file's last bytes.
func TestNextFindsEveryPlace(t *testing.T) {
	const gen = 0x1122334455667788
	fr := frameBytes(gen, []byte("payload"))
	place := func(size, at int) []byte {
		b := filled(size)
		for i := range b { // no stray copy of the generation's bytes
			b[i] &= 0x0f
		}
		copy(b[at:], fr)
		return b
	}
	check := func(b []byte, from int64, want int64) {
		t.Helper()
		w := &window{r: bytes.NewReader(b), size: int64(len(b))}
		got, err := w.next(from, gen)
		if err != nil || got != want {
			t.Fatalf("next(%d) over %d bytes = %d, %v; want %d", from, len(b), got, err, want)
		}
	}
	check(place(1000, 100), 100, 100)
	check(place(1000, 100), 101, -1)
	check(place(1000, 1000-len(fr)), 0, int64(1000-len(fr)))
	empty := frameBytes(gen, nil)
	b := append(filled(50), empty...)
	for i := range b[:50] {
		b[i] &= 0x0f
	}
	check(b, 0, 50)
	// An empty frame as the file's last 16 bytes, reached by the scan's
	// second window.
	b = filled(windowSize - 11)
	for i := range b {
		b[i] &= 0x0f
	}
	b = append(b, empty...)
	check(b, 0, windowSize-11)
	for at := windowSize - 2*frameHeader; at <= windowSize+frameHeader; at++ {
		check(place(3*windowSize, at), 0, int64(at))
	}
}
