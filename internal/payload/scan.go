package payload

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sluicegw/sluice/internal/apierr"
)

// maxDepth is the deepest nesting of objects and arrays accepted (the
// top-level object is depth 1).
const maxDepth = 128

// scanner validates JSON in one pass over buf while its callers pick out
// the values they need. The first syntax error is kept in err; every
// method returning bool returns false once there is one.
type scanner struct {
	buf    []byte
	pos    int
	err    *apierr.Error
	tokens int64    // input-token estimate so far (modeText values)
	keyBuf [64]byte // an escaped key, decoded
}

// mode says what a value costs in the input-token estimate.
type mode uint8

const (
	modeSkip  mode = iota // costs nothing (validated only)
	modeText              // prompt text: strings ceil(units/4), numbers 1
	modeMedia             // a string costs mediaTokens flat
	modeMeta              // a string costs nothing
)

// keyMode is the mode of a value, inside prompt text, under key.
func keyMode(key []byte) mode {
	switch string(key) {
	case "type", "role", "id", "call_id", "tool_call_id", "tool_use_id", "status", "detail", "signature", "media_type", "mime_type":
		return modeMeta
	case "url", "image_url", "data", "file_data", "file_url", "file_id":
		return modeMedia
	}
	return modeText
}

// childMode is the mode of the members or elements of a container value
// in mode m: inside text (or media, e.g. "image_url":{"url":…}) they are
// text again.
func childMode(m mode) mode {
	if m == modeText || m == modeMedia {
		return modeText
	}
	return modeSkip
}

// begin checks the body is a JSON object and moves past its '{'.
func (s *scanner) begin() error {
	s.skipSpace()
	if s.pos == len(s.buf) {
		return invalid(apierr.CodeEmptyBody, "the request body is empty")
	}
	if s.buf[s.pos] == '{' {
		s.pos++
		return nil
	}
	start := s.pos
	if s.value(0, modeSkip) {
		s.skipSpace()
		if s.pos < len(s.buf) {
			s.failChar("after top-level value")
		}
	}
	if s.err != nil {
		return s.err
	}
	return invalid(apierr.CodeNotAnObject, "the request body must be a JSON object, got "+kindOf(s.buf[start]))
}

// end checks nothing but whitespace follows the top-level value.
func (s *scanner) end() error {
	if s.err == nil {
		s.skipSpace()
		if s.pos < len(s.buf) {
			s.failChar("after top-level value")
		}
	}
	if s.err != nil {
		return s.err
	}
	return nil
}

func (s *scanner) skipSpace() {
	for s.pos < len(s.buf) {
		switch s.buf[s.pos] {
		case ' ', '\n', '\t', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek is the byte at s.pos, 0 at the end.
func (s *scanner) peek() byte {
	if s.pos < len(s.buf) {
		return s.buf[s.pos]
	}
	return 0
}

// firstMember is called just after an object's '{': it reports whether a
// member follows (s.pos at its key) or consumes the '}'.
func (s *scanner) firstMember() bool {
	s.skipSpace()
	if s.pos >= len(s.buf) {
		return s.eof()
	}
	if s.buf[s.pos] == '}' {
		s.pos++
		return false
	}
	return true
}

// nextMember is called after a member's value: it consumes the ',' and
// reports true, or consumes the '}' and reports false.
func (s *scanner) nextMember() bool {
	if s.err != nil {
		return false
	}
	s.skipSpace()
	if s.pos >= len(s.buf) {
		return s.eof()
	}
	switch s.buf[s.pos] {
	case ',':
		s.pos++
		s.skipSpace()
		return true
	case '}':
		s.pos++
		return false
	}
	return s.failChar("after object key:value pair")
}

// memberKey reads a member's key and ':' and leaves s.pos at the value.
// The key is decoded; a key whose decoded form exceeds len(keyBuf) comes
// back nil (no field has such a name).
func (s *scanner) memberKey() ([]byte, bool) {
	if s.pos >= len(s.buf) {
		return nil, s.eof()
	}
	if s.buf[s.pos] != '"' {
		return nil, s.failChar("looking for beginning of object key string")
	}
	start := s.pos
	_, esc, ok := s.str()
	if !ok {
		return nil, false
	}
	key := s.buf[start+1 : s.pos-1]
	if esc {
		key, ok = unescape(s.keyBuf[:0], key, len(s.keyBuf))
		if !ok {
			key = nil
		}
	}
	s.skipSpace()
	if s.pos >= len(s.buf) {
		return nil, s.eof()
	}
	if s.buf[s.pos] != ':' {
		return nil, s.failChar("after object key")
	}
	s.pos++
	s.skipSpace()
	return key, true
}

// value scans the value at s.pos, which sits inside depth containers,
// adding its cost in mode m to the estimate.
func (s *scanner) value(depth int, m mode) bool {
	if s.pos >= len(s.buf) {
		return s.eof()
	}
	switch s.buf[s.pos] {
	case '"':
		u, _, ok := s.str()
		switch m {
		case modeText:
			s.tokens += (u + 3) / 4
		case modeMedia:
			s.tokens += mediaTokens
		}
		return ok
	case '{':
		return s.object(depth+1, m)
	case '[':
		return s.array(depth+1, m, false)
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		if m == modeText || m == modeMedia {
			s.tokens++
		}
		return s.number()
	}
	return s.failChar("looking for beginning of value")
}

func (s *scanner) object(depth int, m mode) bool {
	if depth > maxDepth {
		return s.fail(s.pos, "nested too deeply (more than 128 levels)")
	}
	s.pos++ // '{'
	cm := childMode(m)
	for more := s.firstMember(); more; more = s.nextMember() {
		key, ok := s.memberKey()
		if !ok {
			return false
		}
		vm := cm
		if cm == modeText {
			vm = keyMode(key)
		}
		if !s.value(depth, vm) {
			return false
		}
	}
	return s.err == nil
}

// array scans an array; with perItem each object element adds
// perItemTokens to the estimate.
func (s *scanner) array(depth int, m mode, perItem bool) bool {
	if depth > maxDepth {
		return s.fail(s.pos, "nested too deeply (more than 128 levels)")
	}
	s.pos++ // '['
	s.skipSpace()
	if s.pos < len(s.buf) && s.buf[s.pos] == ']' {
		s.pos++
		return true
	}
	em := childMode(m)
	for {
		if perItem && s.pos < len(s.buf) && s.buf[s.pos] == '{' {
			s.tokens += perItemTokens
		}
		if !s.value(depth, em) {
			return false
		}
		s.skipSpace()
		if s.pos >= len(s.buf) {
			return s.eof()
		}
		switch s.buf[s.pos] {
		case ',':
			s.pos++
			s.skipSpace()
			continue
		case ']':
			s.pos++
			return true
		}
		return s.failChar("after array element")
	}
}

func (s *scanner) lit(word string) bool {
	for k := 0; k < len(word); k++ {
		i := s.pos + k
		if i >= len(s.buf) {
			return s.eof()
		}
		if s.buf[i] != word[k] {
			s.pos = i
			return s.failChar("in literal " + word + " (expecting " + quoteChar(word[k]) + ")")
		}
	}
	s.pos += len(word)
	return true
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	b, i := s.buf, s.pos
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return s.eof()
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		s.pos = i
		return s.failChar("in numeric literal")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) {
			return s.eof()
		}
		if !isDigit(b[i]) {
			s.pos = i
			return s.failChar("after decimal point in numeric literal")
		}
		i = digits(b, i)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) {
			return s.eof()
		}
		if !isDigit(b[i]) {
			s.pos = i
			return s.failChar("in exponent of numeric literal")
		}
		i = digits(b, i)
	}
	s.pos = i
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func digits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

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
	ctl := (x - ones*0x20) &^ x
	q := x ^ (ones * '"')
	q = (q - ones) &^ q
	bs := x ^ (ones * '\\')
	bs = (bs - ones) &^ bs
	return (ctl | q | bs | x) & highs
}

// str scans the string at s.pos (its opening quote) and moves past it.
// units measures its decoded content: 1 per rune below U+0800, 4 per rune
// at or above it; esc reports whether it holds escapes. It allocates
// nothing.
func (s *scanner) str() (units int64, esc bool, ok bool) {
	b := s.buf
	i := s.pos + 1
	for {
		for i+8 <= len(b) {
			m := special(binary.LittleEndian.Uint64(b[i:]))
			if m != 0 {
				k := bits.TrailingZeros64(m) >> 3
				i += k
				units += int64(k)
				break
			}
			i += 8
			units += 8
		}
		if i >= len(b) {
			return 0, false, s.eof()
		}
		c := b[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return units, esc, true
		case c == '\\':
			esc = true
			n, w := s.escape(i)
			if n == 0 {
				return 0, false, false
			}
			i += n
			units += w
		case c < 0x20:
			s.pos = i
			return 0, false, s.failChar("in string literal")
		case c < utf8.RuneSelf:
			i++
			units++
		default:
			n, u := multiByte(b, i)
			if n == 0 {
				if s.err == nil {
					s.err = invalid(apierr.CodeInvalidUTF8, "invalid UTF-8 in a string at byte %d", i)
				}
				return 0, false, false
			}
			i += n
			units += u
		}
	}
}

// multiByte measures the run of non-ASCII runes at b[i] (b[i] ≥ 0x80):
// its length in bytes (0 if the first rune is not valid UTF-8) and units.
// Two- and three-byte runes, most non-ASCII text, are checked inline.
func multiByte(b []byte, i int) (n int, units int64) {
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
			return i - start, units // the caller fails at the invalid byte
		}
		i += size
		units += 4
	}
	return i - start, units
}

// escape scans the escape sequence at b[i] ('\\'), returning its length
// (0 on error) and its units. A \uXXXX high surrogate followed by a \uXXXX
// low surrogate is one rune; a lone surrogate decodes to U+FFFD, as
// encoding/json decodes it.
func (s *scanner) escape(i int) (n int, units int64) {
	b := s.buf
	if i+1 >= len(b) {
		s.eof()
		return 0, 0
	}
	switch b[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, 1
	case 'u':
		cp, ok := s.hex4(i + 2)
		if !ok {
			return 0, 0
		}
		if utf16.IsSurrogate(cp) && cp < 0xDC00 && i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if lo, ok := hex4(b[i+8 : i+12]); ok && lo >= 0xDC00 && lo < 0xE000 {
				return 12, 4
			}
		}
		if cp < 0x800 {
			return 6, 1
		}
		return 6, 4 // including U+FFFD for a lone surrogate
	}
	s.pos = i + 1
	s.failChar("in string escape code")
	return 0, 0
}

// hex4 reads the 4 hex digits of a \u escape at b[at:].
func (s *scanner) hex4(at int) (rune, bool) {
	var r rune
	for k := 0; k < 4; k++ {
		if at+k >= len(s.buf) {
			return 0, s.eof()
		}
		h := unhex(s.buf[at+k])
		if h < 0 {
			s.pos = at + k
			return 0, s.failChar(`in \u hexadecimal character escape`)
		}
		r = r<<4 | h
	}
	return r, true
}

func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
		h := unhex(c)
		if h < 0 {
			return 0, false
		}
		r = r<<4 | h
	}
	return r, true
}

func unhex(c byte) rune {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0')
	case c >= 'a' && c <= 'f':
		return rune(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return rune(c-'A') + 10
	}
	return -1
}

// unescape appends the decoded content of a valid JSON string (raw, between
// its quotes) to dst, reporting false if it would exceed limit bytes.
func unescape(dst, raw []byte, limit int) ([]byte, bool) {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			if len(dst) >= limit {
				return dst, false
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := rune(raw[i+1]), 2 // '"', '\\', '/'
		switch raw[i+1] {
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		case 'u':
			r, _ = hex4(raw[i+2 : i+6])
			n = 6
			if utf16.IsSurrogate(r) {
				lo := rune(0)
				if r < 0xDC00 && i+12 <= len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
					lo, _ = hex4(raw[i+8 : i+12])
				}
				if lo >= 0xDC00 && lo < 0xE000 {
					r, n = utf16.DecodeRune(r, lo), 12
				} else {
					r = utf8.RuneError
				}
			}
		}
		i += n
		if len(dst)+utf8.RuneLen(r) > limit {
			return dst, false
		}
		dst = utf8.AppendRune(dst, r)
	}
	return dst, true
}

// fail records a syntax error at byte offset at.
func (s *scanner) fail(at int, msg string) bool {
	if s.err == nil {
		s.err = invalid(apierr.CodeInvalidJSON, "invalid JSON at byte %d: %s", at, msg)
	}
	return false
}

// failChar records that the byte at s.pos is out of place (context says
// where), or that the input ended.
func (s *scanner) failChar(context string) bool {
	if s.pos >= len(s.buf) {
		return s.eof()
	}
	return s.fail(s.pos, "invalid character "+quoteChar(s.buf[s.pos])+" "+context)
}

func (s *scanner) eof() bool { return s.fail(len(s.buf), "unexpected end of input") }

// quoteChar shows one byte of the body in a message.
func quoteChar(c byte) string {
	switch {
	case c == '\'':
		return `'\''`
	case c >= 0x20 && c < 0x7f:
		return "'" + string(rune(c)) + "'"
	}
	return fmt.Sprintf("byte 0x%02X", c)
}
