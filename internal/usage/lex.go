package usage

import (
	"bytes"
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds nesting, as encoding/json does.
const maxDepth = 10000

// lexer reads one complete JSON document in place, without allocating.
// It accepts exactly what encoding/json accepts (RFC 8259; invalid UTF-8
// inside strings is tolerated and, when a string is unescaped, replaced by
// U+FFFD byte by byte), so "the event decoded" means what it would with
// encoding/json. Objects are read as (key, raw value) pairs: a caller
// keeps the raw values it wants (the last of duplicate keys wins, as when
// decoding into a map) and reads them with a lexer of their own. Keys
// are passed unescaped.
//
// It replaces encoding/json on the hot path: decoding each 300-byte chunk
// of an OpenAI stream with encoding/json costs ~5 µs; this costs a
// fraction of that.
type lexer struct {
	b     []byte
	i     int
	depth int
}

// document reads b as one object, calling fn for each top-level key. It
// reports whether b is a valid JSON object (nothing but whitespace after).
func document(b []byte, fn func(key, val []byte)) bool {
	l := lexer{b: b}
	l.ws()
	if l.i >= len(l.b) || l.b[l.i] != '{' {
		return false
	}
	if !l.object(fn) {
		return false
	}
	l.ws()
	return l.i == len(l.b)
}

// eachObject reads raw as an object, calling fn for each key; false if raw
// is anything else.
func eachObject(raw []byte, fn func(key, val []byte)) bool {
	if len(raw) == 0 || raw[0] != '{' {
		return false
	}
	l := lexer{b: raw}
	return l.object(fn)
}

// eachElement reads raw as an array, calling fn for each element; false if
// raw is anything else.
func eachElement(raw []byte, fn func(val []byte)) bool {
	if len(raw) == 0 || raw[0] != '[' {
		return false
	}
	l := lexer{b: raw}
	return l.array(fn)
}

func (l *lexer) ws() {
	if l.i < len(l.b) && l.b[l.i] > ' ' {
		return
	}
	for l.i < len(l.b) {
		switch l.b[l.i] {
		case ' ', '\t', '\n', '\r':
			l.i++
		default:
			return
		}
	}
}

// skip reads one value.
func (l *lexer) skip() bool {
	if l.i >= len(l.b) {
		return false
	}
	switch l.b[l.i] {
	case '{':
		return l.object(nil)
	case '[':
		return l.array(nil)
	case '"':
		_, ok := l.str()
		return ok
	case 't':
		return l.lit("true")
	case 'f':
		return l.lit("false")
	case 'n':
		return l.lit("null")
	}
	return l.number()
}

// object reads an object at l.i, calling fn (if not nil) with each key
// (unescaped, valid only during the call) and its raw value.
func (l *lexer) object(fn func(key, val []byte)) bool {
	if l.depth++; l.depth > maxDepth {
		return false
	}
	l.i++ // '{'
	l.ws()
	if l.i < len(l.b) && l.b[l.i] == '}' {
		l.i++
		l.depth--
		return true
	}
	for {
		l.ws()
		if l.i >= len(l.b) || l.b[l.i] != '"' {
			return false
		}
		key, ok := l.str()
		if !ok {
			return false
		}
		if fn != nil && (bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key)) {
			key = unescape(nil, key) // rare: allocates
		}
		l.ws()
		if l.i >= len(l.b) || l.b[l.i] != ':' {
			return false
		}
		l.i++
		l.ws()
		start := l.i
		if !l.skip() {
			return false
		}
		if fn != nil {
			fn(key, l.b[start:l.i])
		}
		l.ws()
		if l.i >= len(l.b) {
			return false
		}
		switch l.b[l.i] {
		case ',':
			l.i++
		case '}':
			l.i++
			l.depth--
			return true
		default:
			return false
		}
	}
}

// array reads an array at l.i, calling fn (if not nil) with each raw
// element.
func (l *lexer) array(fn func(val []byte)) bool {
	if l.depth++; l.depth > maxDepth {
		return false
	}
	l.i++ // '['
	l.ws()
	if l.i < len(l.b) && l.b[l.i] == ']' {
		l.i++
		l.depth--
		return true
	}
	for {
		l.ws()
		start := l.i
		if !l.skip() {
			return false
		}
		if fn != nil {
			fn(l.b[start:l.i])
		}
		l.ws()
		if l.i >= len(l.b) {
			return false
		}
		switch l.b[l.i] {
		case ',':
			l.i++
		case ']':
			l.i++
			l.depth--
			return true
		default:
			return false
		}
	}
}

// str reads a string at l.i and returns its raw contents (between the
// quotes, still escaped).
func (l *lexer) str() ([]byte, bool) {
	l.i++ // '"'
	start := l.i
	// Fast paths: a short plain string by table, a long one by IndexByte.
	for i := start; i < len(l.b) && i < start+32; i++ {
		if c := l.b[i]; strSpecial[c] {
			if c == '"' {
				l.i = i + 1
				return l.b[start:i], true
			}
			goto slow
		}
	}
	if q := bytes.IndexByte(l.b[start:], '"'); q >= 0 {
		seg := l.b[start : start+q]
		if bytes.IndexByte(seg, '\\') < 0 {
			if hasControl(seg) {
				return nil, false
			}
			l.i = start + q + 1
			return seg, true
		}
	}
slow:
	for l.i < len(l.b) {
		c := l.b[l.i]
		switch {
		case c == '"':
			l.i++
			return l.b[start : l.i-1], true
		case c == '\\':
			if l.i+1 >= len(l.b) {
				return nil, false
			}
			switch l.b[l.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				l.i += 2
			case 'u':
				if l.i+6 > len(l.b) || hex4(l.b[l.i+2:l.i+6]) < 0 {
					return nil, false
				}
				l.i += 6
			default:
				return nil, false
			}
		case c < 0x20:
			return nil, false
		default:
			l.i++
		}
	}
	return nil, false
}

// strSpecial marks the bytes that end a plain run inside a string.
var strSpecial = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// hasControl reports whether b holds a byte below 0x20, eight bytes at a
// time.
func hasControl(b []byte) bool {
	const lo, hi = 0x2020202020202020, 0x8080808080808080
	for len(b) >= 8 {
		w := binary.LittleEndian.Uint64(b)
		if (w-lo)&^w&hi != 0 {
			return true
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

func (l *lexer) lit(s string) bool {
	if len(l.b)-l.i < len(s) || string(l.b[l.i:l.i+len(s)]) != s {
		return false
	}
	l.i += len(s)
	return true
}

// number reads a number per the JSON grammar.
func (l *lexer) number() bool {
	b, i := l.b, l.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	l.i = i
	return true
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// text returns the unescaped contents of raw if it is a JSON string (dst
// is scratch space), or nil.
func text(dst, raw []byte) []byte {
	if len(raw) < 2 || raw[0] != '"' {
		return nil
	}
	return unescape(dst, raw[1:len(raw)-1])
}

// unescape returns the decoded form of a string's raw contents (already
// validated by str), the way encoding/json decodes strings: invalid UTF-8
// bytes and unpaired surrogates become U+FFFD. It appends to dst when
// there is something to decode and returns raw itself otherwise.
func unescape(dst, raw []byte) []byte {
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return raw // nothing to decode: no copy
	}
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			switch e := raw[i+1]; e {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(raw[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						if r2 := utf16.DecodeRune(r, hex4(raw[i+2:])); r2 != utf8.RuneError {
							dst = utf8.AppendRune(dst, r2)
							i += 6
							continue
						}
					}
					r = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, e)
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n == 1 {
				dst = utf8.AppendRune(dst, utf8.RuneError)
			} else {
				dst = append(dst, raw[i:i+n]...)
			}
			i += n
		}
	}
	return dst
}

// parseCount reads a raw value as a token count: present when it is a
// whole number (12, 12.0, 1.2e1), clamped to [0, maxCount]; null,
// fractions, strings and anything else are absent.
func parseCount(raw []byte) count {
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return count{}
	}
	if n, ok := parseDigits(raw); ok {
		return count{v: n, ok: true}
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f != math.Trunc(f) {
		return count{}
	}
	return count{v: int64(min(max(f, 0), maxCount)), ok: true}
}

// parseDigits parses an integer literal without allocating, clamped to
// [0, maxCount].
func parseDigits(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n <= maxCount {
			n = n*10 + int64(c-'0')
		}
	}
	if neg {
		return 0, true
	}
	return min(n, maxCount), true
}

// parseIndex reads a raw value as an index (choice, tool call, content
// block): an integer, else 0.
func parseIndex(raw []byte) int32 {
	n, ok := parseDigits(raw)
	if !ok || (len(raw) > 0 && raw[0] == '-') {
		return 0
	}
	return int32(min(n, math.MaxInt32))
}
