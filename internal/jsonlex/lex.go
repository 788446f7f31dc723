package jsonlex

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// Problem says what stopped a scan, at the offset it returns.
type Problem uint8

const (
	OK          Problem = iota // the token was read whole
	EOF                        // the input ended inside the token (the offset is len(b))
	BadControl                 // a control character (below U+0020) inside a string
	BadEscape                  // a backslash followed by anything but "\/bfnrtu
	BadHex                     // a \u escape with a byte that is not a hex digit
	BadLiteral                 // a byte that does not continue true, false or null
	BadNumber                  // no digit where a number's integer part must start
	BadFraction                // no digit after a number's decimal point
	BadExponent                // no digit in a number's exponent
)

// IsSpace reports whether c is JSON whitespace.
func IsSpace(c byte) bool { return c <= ' ' && (c == ' ' || c == '\n' || c == '\t' || c == '\r') }

// SkipSpace returns the offset of the first byte at or after i that is not
// whitespace (len(b) if there is none).
func SkipSpace(b []byte, i int) int {
	for i < len(b) && IsSpace(b[i]) {
		i++
	}
	return i
}

// Literal reads word (true, false or null) at b[i], i ≤ len(b). It returns
// the offset just past it, or that of the first byte that differs
// (BadLiteral) or len(b) (EOF). It inlines.
func Literal(b []byte, i int, word string) (int, Problem) {
	if string(b[i:min(i+len(word), len(b))]) == word {
		return i + len(word), OK
	}
	return notLiteral(b, i, word)
}

// notLiteral finds where b[i:] stops matching word; out of Literal's line
// so that Literal inlines.
func notLiteral(b []byte, i int, word string) (int, Problem) {
	for k := 0; k < len(word); k++ {
		if i+k >= len(b) {
			return len(b), EOF
		}
		if b[i+k] != word[k] {
			return i + k, BadLiteral
		}
	}
	return i + len(word), OK // unreachable: Literal's test matched
}

// Number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at b[i] and
// returns the offset just past it. Like any JSON decoder it stops at the
// first byte that cannot continue the number; whether that byte may follow
// a value is the caller's question.
func Number(b []byte, i int) (int, Problem) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return len(b), EOF
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return i, BadNumber
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) {
			return len(b), EOF
		}
		if !isDigit(b[i]) {
			return i, BadFraction
		}
		i = digits(b, i)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) {
			return len(b), EOF
		}
		if !isDigit(b[i]) {
			return i, BadExponent
		}
		i = digits(b, i)
	}
	return i, OK
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func digits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

// ParseInt reads b, an optional '-' and one or more decimal digits (a JSON
// integer; leading zeros are tolerated), as an int64 without allocating.
// ok is false when b is anything else, fractions and exponents included.
// A value outside the int64 range saturates at math.MinInt64 or
// math.MaxInt64 and reports overflow.
func ParseInt(b []byte) (n int64, overflow, ok bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, false, false
	}
	limit := uint64(math.MaxInt64)
	if neg {
		limit++
	}
	var u uint64
	for _, c := range b {
		if !isDigit(c) {
			return 0, false, false
		}
		if !overflow {
			if u > (limit-uint64(c-'0'))/10 {
				overflow, u = true, limit
			} else {
				u = u*10 + uint64(c-'0')
			}
		}
	}
	if neg {
		return int64(-u), overflow, true // -(MaxInt64+1) wraps to MinInt64
	}
	return int64(u), overflow, true
}

// Hex4 reads the four hex digits at the start of b.
func Hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	r := hexVal[b[0]]<<12 | hexVal[b[1]]<<8 | hexVal[b[2]]<<4 | hexVal[b[3]]
	return r, r >= 0
}

// hexVal is a hex digit's value, or -1, which stays negative however
// Hex4 shifts and combines it.
var hexVal = func() (t [256]rune) {
	for c := range t {
		switch {
		case c >= '0' && c <= '9':
			t[c] = rune(c - '0')
		case c >= 'a' && c <= 'f':
			t[c] = rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			t[c] = rune(c-'A') + 10
		default:
			t[c] = -1
		}
	}
	return t
}()

// escapes maps the byte after a backslash to what it stands for (0: not
// a simple escape).
var escapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// Escape reads the escape sequence at b[i] (a backslash inside a string)
// and returns the offset just past it and the rune it stands for. A \uXXXX
// high surrogate followed by a \uXXXX low surrogate is one rune (12 bytes);
// any other surrogate stands for U+FFFD, as encoding/json decodes it.
func Escape(b []byte, i int) (end int, r rune, p Problem) {
	if i+1 >= len(b) {
		return len(b), 0, EOF
	}
	c := b[i+1]
	if e := escapes[c]; e != 0 {
		return i + 2, rune(e), OK
	}
	if c != 'u' {
		return i + 1, 0, BadEscape
	}
	r, ok := Hex4(b[i+2:])
	if !ok {
		for k := i + 2; k < i+6; k++ {
			if k >= len(b) {
				return len(b), 0, EOF
			}
			if hexVal[b[k]] < 0 {
				return k, 0, BadHex
			}
		}
	}
	if !utf16.IsSurrogate(r) {
		return i + 6, r, OK
	}
	if r < 0xDC00 && i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
		if lo, ok := Hex4(b[i+8:]); ok && lo >= 0xDC00 && lo < 0xE000 {
			return i + 12, utf16.DecodeRune(r, lo), OK
		}
	}
	return i + 6, utf8.RuneError, OK
}

// Units is a rune's weight in a string's measure (payload's input-token
// estimate): 1 below U+0800 (the scripts of one or two UTF-8 bytes), 4 at
// or above it.
func Units(r rune) int64 {
	if r < 0x800 {
		return 1
	}
	return 4
}

// String reads the string whose opening quote is at b[i] and returns the
// offset just past its closing quote and whether it holds escapes. Its
// validity is encoding/json's: a control character or a bad escape is a
// problem, invalid UTF-8 is not (Unescape turns it into U+FFFD). A caller
// that must refuse invalid UTF-8 or measure the string composes PlainRun,
// Escape and UTF8Run itself, as this does.
func String(b []byte, i int) (end int, esc bool, p Problem) {
	start := i + 1
	if start > len(b) {
		return len(b), false, EOF
	}
	// Fast paths: a short plain string by table, a long one by IndexByte.
	for j := start; j < len(b) && j < start+32; j++ {
		if c := b[j]; strSpecial[c] {
			if c == '"' {
				return j + 1, false, OK
			}
			goto slow
		}
	}
	if q := bytes.IndexByte(b[start:], '"'); q >= 0 {
		seg := b[start : start+q]
		if bytes.IndexByte(seg, '\\') < 0 {
			if k := control(seg); k >= 0 {
				return start + k, false, BadControl
			}
			return start + q + 1, false, OK
		}
	}
slow:
	for i = start; ; {
		i = PlainRun(b, i)
		if i >= len(b) {
			return len(b), false, EOF
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, esc, OK
		case c == '\\':
			esc = true
			if i, _, p = Escape(b, i); p != OK {
				return i, false, p
			}
		case c < 0x20:
			return i, false, BadControl
		case c < utf8.RuneSelf:
			i++
		default:
			n, _ := UTF8Run(b, i)
			i += max(n, 1) // an invalid byte is allowed: it decodes to U+FFFD
		}
	}
}

// strSpecial marks the bytes that end a plain run inside a string.
var strSpecial = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// SWAR constants: one in every byte, the high bit of every byte.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special marks, with its high bit, each byte of the 8 in x that needs a
// look inside a string: a control character, '"', '\\' or a non-ASCII
// byte. (v-ones*n)&^v&highs marks bytes of v below n (n ≤ 128); applied to
// v = x^(ones*c) with n = 1 it marks bytes equal to c. The borrow can mark
// a byte above a marked one falsely, never below: the lowest mark is exact.
func special(x uint64) uint64 {
	q := x ^ (ones * '"')
	bs := x ^ (ones * '\\')
	return ((x-ones*0x20)&^x | (q-ones)&^q | (bs-ones)&^bs | x) & highs
}

// control returns the index of the first byte of b below 0x20, or -1;
// eight bytes at a time.
func control(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		if (w-ones*0x20)&^w&highs != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if b[i] < 0x20 {
			return i
		}
	}
	return -1
}

// PlainRun skips, eight bytes at a time, the bytes at b[i:] that need no
// look inside a string (printable ASCII, one unit each) and returns the
// offset of the first that does ('"', '\\', a control character or a
// non-ASCII byte), or where fewer than eight bytes are left: the caller
// reads those one by one. It inlines.
func PlainRun(b []byte, i int) int {
	for ; len(b)-i >= 8; i += 8 {
		if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	return i
}

// UTF8Run measures the run of valid non-ASCII runes at b[i] (b[i] ≥ 0x80):
// its length in bytes (0 if the first rune is not valid UTF-8) and its
// units, those of Units. Two- and three-byte runes, most non-ASCII text,
// are checked inline.
func UTF8Run(b []byte, i int) (n int, units int64) {
	start := i
	for i < len(b) {
		c := b[i]
		switch {
		case c < utf8.RuneSelf:
			return i - start, units
		case c >= 0xC2 && c < 0xE0 && i+1 < len(b) && b[i+1]&0xC0 == 0x80:
			i += 2
			units++
			continue
		case c >= 0xE0 && c < 0xF0 && i+2 < len(b) && b[i+1]&0xC0 == 0x80 && b[i+2]&0xC0 == 0x80 &&
			(c != 0xE0 || b[i+1] >= 0xA0) && (c != 0xED || b[i+1] < 0xA0): // no overlongs, no surrogates
			i += 3
			units += 4
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i - start, units // the caller decides about the invalid byte
		}
		i += size
		units += 4
	}
	return i - start, units
}

// Unescape appends the decoded content of a string (raw: the bytes between
// its quotes, as String accepted them) to dst, the way
// encoding/json decodes strings: escapes decoded, surrogate pairs joined,
// unpaired surrogates and invalid UTF-8 bytes replaced by U+FFFD. It
// reports false, with dst partly appended, as soon as the decoded content
// would exceed limit bytes. Given raw that is not a valid string's content
// it does not panic: a bad escape's backslash is copied as it is.
func Unescape(dst, raw []byte, limit int) ([]byte, bool) {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c < utf8.RuneSelf && c != '\\' {
			j := i + 1
			for j < len(raw) && raw[j] < utf8.RuneSelf && raw[j] != '\\' {
				j++
			}
			if len(dst)+j-i > limit {
				return dst, false
			}
			dst = append(dst, raw[i:j]...)
			i = j
			continue
		}
		var r rune
		n := i + 1
		if c == '\\' {
			var p Problem
			if n, r, p = Escape(raw, i); p != OK {
				r, n = '\\', i+1
			}
		} else {
			var size int
			r, size = utf8.DecodeRune(raw[i:])
			if r != utf8.RuneError || size != 1 { // valid: copy the bytes
				if len(dst)+size > limit {
					return dst, false
				}
				dst = append(dst, raw[i:i+size]...)
				i += size
				continue
			}
		}
		if len(dst)+utf8.RuneLen(r) > limit {
			return dst, false
		}
		dst = utf8.AppendRune(dst, r)
		i = n
	}
	return dst, true
}
