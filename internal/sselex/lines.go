package sselex

import "bytes"

// Lines finds the lines of one event stream in its chunks. The zero value
// is at the start of a stream. It is not safe for concurrent use.
type Lines struct {
	// state carries what the last chunk's end leaves to the next one:
	// Cont when it ended inside a line, pendingCR when it ended in a '\r'
	// terminator, whose '\n' may start the next chunk.
	state Piece
}

// Piece says what Next found at the start of a chunk's rest: a line, or
// the part of one, or the '\n' of a split "\r\n".
type Piece uint8

const (
	// Ended: the line ends in the chunk, its terminator at stop.
	Ended Piece = 1 << iota
	// Cont: the line began in an earlier chunk.
	Cont
	// LF: only the '\n' at i, completing a "\r\n" whose '\r' ended the
	// last chunk (and with it a line already reported as Ended). It
	// belongs to no line; stop and next are i+1.
	LF

	pendingCR // in Lines.state only
)

// Next reads p from i (0 ≤ i < len(p)) to the end of a line or of p. The
// line's bytes are p[i:stop], its terminator excluded: stop is the
// terminator's index, or len(p) when the line goes on in the next chunk.
// next is where the next read starts: just past the terminator (both
// bytes of a "\r\n" found in p), or len(p). Every byte of p is read
// exactly once, so the caller moves through a chunk from 0 to len(p)
// without skipping any. A blank line (the end of an event, or nothing
// outside one) is stop == i with what == Ended.
func (l *Lines) Next(p []byte, i int) (stop, next int, what Piece) {
	what = l.state
	if what == pendingCR {
		what = 0
		if p[i] == '\n' {
			l.state = 0
			return i + 1, i + 1, LF
		}
	}
	// A blank line (every event's last) and the short pieces of a
	// stream split into small chunks are found without a call. Both
	// terminators are below ' ', so one comparison passes any other byte.
	if len(p)-i <= shortLine {
		for stop = i; stop < len(p); stop++ {
			if c := p[stop]; c <= '\r' && (c == '\n' || c == '\r') {
				return l.ended(p, stop, what)
			}
		}
	} else if c := p[i]; c == '\n' || c == '\r' {
		return l.ended(p, i, what)
	} else if e := LineEnd(p[i+1:]); e >= 0 {
		return l.ended(p, i+1+e, what)
	}
	l.state = Cont
	return len(p), len(p), what
}

// ended is Next's result for a line whose terminator is at p[stop].
func (l *Lines) ended(p []byte, stop int, what Piece) (int, int, Piece) {
	next := stop + 1
	l.state = 0
	if p[stop] == '\r' {
		if next == len(p) {
			l.state = pendingCR
		} else if p[next] == '\n' {
			next++
		}
	}
	return stop, next, what | Ended
}

// LineEnd returns the index of the first '\r' or '\n' in p, or -1.
func LineEnd(p []byte) int {
	n := bytes.IndexByte(p, '\n')
	q := p
	if n >= 0 {
		q = p[:n]
	}
	if r := bytes.IndexByte(q, '\r'); r >= 0 {
		return r
	}
	return n
}

// shortLine is the most bytes Next searches itself rather than call
// LineEnd.
const shortLine = 8

// Field splits a whole line (terminator excluded) into its field name
// and value: the name runs to the first ':', and the value is the rest
// less one leading space; a line without ':' is all name, with an empty
// value. A comment line (starting with ':') has an empty name.
func Field(line []byte) (name, value []byte) {
	c := bytes.IndexByte(line, ':')
	if c < 0 {
		return line, nil
	}
	value = line[c+1:]
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	return line[:c], value
}
