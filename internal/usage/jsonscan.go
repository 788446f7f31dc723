package usage

import (
	"bytes"

	"github.com/sluicegw/sluice/internal/jsonlex"
)

// capKind names a captured top-level key.
type capKind int8

const (
	capNone  capKind = -1
	capUsage capKind = 0
	capError capKind = 1
)

// maxCapture bounds a captured value; a larger one is dropped.
const maxCapture = 64 << 10

// structural marks the bytes that matter below depth 1.
var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

// jsonScan follows a JSON document byte by byte, without validating it,
// to find where its top-level value ends and to capture the raw values of
// the top-level object's "usage" and "error" keys (the last occurrence
// wins, as with encoding/json). It never recurses and holds only the
// captures.
type jsonScan struct {
	started, ended bool
	topObj         bool // the top-level value is an object
	depth          int
	inStr, esc     bool
	expectKey      bool // at depth 1, the next string is a key
	inKey          bool
	key            [5]byte
	keyLen         int     // -1: not a key we want
	keyKind        capKind // the last key read, awaiting ':'
	want           capKind // after ':', the value to capture starts at the next non-space byte
	capturing      capKind
	capOver        bool
	caps           [2][]byte
	capOK          [2]bool
}

func (s *jsonScan) reset() {
	*s = jsonScan{keyKind: capNone, want: capNone, capturing: capNone}
}

// scan consumes p and returns the index just past the end of the top-level
// value if it ends in p, else -1.
func (s *jsonScan) scan(p []byte) int {
	if s.ended {
		return 0
	}
	from := 0 // start of the capture within p
	for i := 0; i < len(p); i++ {
		c := p[i]
		if s.inStr {
			if s.esc {
				s.esc = false
				s.keyLen = -1
				continue
			}
			if !s.inKey {
				// Jump to the next quote or backslash.
				j := bytes.IndexByte(p[i:], '"')
				if j < 0 {
					j = len(p) - i
				}
				if k := bytes.IndexByte(p[i:i+j], '\\'); k >= 0 {
					j = k
				}
				i += j
				if i == len(p) {
					break
				}
				c = p[i]
			}
			switch c {
			case '\\':
				s.esc = true
			case '"':
				s.inStr = false
				if s.inKey {
					s.inKey = false
					s.keyKind = s.matchKey()
				}
			default:
				if s.keyLen >= 0 && s.keyLen < len(s.key) {
					s.key[s.keyLen] = c
					s.keyLen++
				} else {
					s.keyLen = -1
				}
			}
			continue
		}
		if s.depth >= 2 && !structural[c] {
			// Deep inside a value only strings and brackets matter.
			for i++; i < len(p) && !structural[p[i]]; i++ {
			}
			if i == len(p) {
				break
			}
			c = p[i]
		}
		if s.want != capNone && !jsonlex.IsSpace(c) {
			s.capturing, s.want = s.want, capNone
			s.caps[s.capturing] = s.caps[s.capturing][:0]
			s.capOK[s.capturing] = false
			s.capOver = false
			from = i
		}
		switch c {
		case '"':
			s.inStr = true
			if s.depth == 1 && s.expectKey {
				s.inKey, s.keyLen, s.expectKey = true, 0, false
			}
		case '{', '[':
			if !s.started {
				s.started, s.topObj, s.depth = true, c == '{', 1
				s.expectKey = s.topObj
				continue
			}
			s.depth++
		case '}', ']':
			s.depth--
			if s.depth <= 0 {
				s.endCapture(p[from:i])
				s.ended = true
				return i + 1
			}
		case ':':
			if s.depth == 1 {
				s.want, s.keyKind = s.keyKind, capNone
			}
		case ',':
			if s.depth == 1 {
				s.endCapture(p[from:i])
				s.expectKey, s.keyKind, s.want = s.topObj, capNone, capNone
			}
		}
	}
	if s.capturing != capNone {
		s.appendCapture(p[from:])
	}
	return -1
}

func (s *jsonScan) matchKey() capKind {
	if s.keyLen != 5 {
		return capNone
	}
	switch string(s.key[:]) {
	case "usage":
		return capUsage
	case "error":
		return capError
	}
	return capNone
}

func (s *jsonScan) appendCapture(b []byte) {
	if s.capOver {
		return
	}
	k := s.capturing
	if len(s.caps[k])+len(b) > maxCapture {
		s.capOver = true
		s.caps[k] = nil
		return
	}
	s.caps[k] = append(s.caps[k], b...)
}

func (s *jsonScan) endCapture(tail []byte) {
	if s.capturing == capNone {
		return
	}
	s.appendCapture(tail)
	s.capOK[s.capturing] = !s.capOver
	s.capturing = capNone
}

// captured returns the raw value of key k, if it was captured whole.
func (s *jsonScan) captured(k capKind) ([]byte, bool) {
	return bytes.TrimSpace(s.caps[k]), s.capOK[k]
}
