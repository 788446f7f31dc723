package payload

import (
	"fmt"
	"unicode/utf8"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/jsonlex"
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

func (s *scanner) skipSpace() { s.pos = jsonlex.SkipSpace(s.buf, s.pos) }

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
		key, ok = jsonlex.Unescape(s.keyBuf[:0], key, len(s.keyBuf))
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
	start := s.pos
	end, p := jsonlex.Literal(s.buf, s.pos, word)
	s.pos = end
	if p != jsonlex.OK {
		if p == jsonlex.EOF {
			return s.eof()
		}
		return s.failChar("in literal " + word + " (expecting " + quoteChar(word[end-start]) + ")")
	}
	return true
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	end, p := jsonlex.Number(s.buf, s.pos)
	s.pos = end
	if p != jsonlex.OK {
		return s.failChar(where(p))
	}
	return true
}

// where says, in a syntax error, where jsonlex found a problem (the
// input's end, jsonlex.EOF, is reported by failChar itself).
func where(p jsonlex.Problem) string {
	switch p {
	case jsonlex.BadEscape:
		return "in string escape code"
	case jsonlex.BadHex:
		return `in \u hexadecimal character escape`
	case jsonlex.BadFraction:
		return "after decimal point in numeric literal"
	case jsonlex.BadExponent:
		return "in exponent of numeric literal"
	}
	return "in numeric literal"
}

// str scans the string at s.pos (its opening quote) and moves past it.
// units measures its decoded content: 1 per rune below U+0800, 4 per rune
// at or above it (jsonlex.Units); esc reports whether it holds escapes. It
// allocates nothing. Unlike jsonlex.String it refuses invalid UTF-8.
func (s *scanner) str() (units int64, esc bool, ok bool) {
	b := s.buf
	i := s.pos + 1
	for {
		j := jsonlex.PlainRun(b, i)
		units += int64(j - i)
		i = j
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
			n, r, p := jsonlex.Escape(b, i)
			if p != jsonlex.OK {
				s.pos = n
				return 0, false, s.failChar(where(p))
			}
			i = n
			units += jsonlex.Units(r)
		case c < 0x20:
			s.pos = i
			return 0, false, s.failChar("in string literal")
		case c < utf8.RuneSelf:
			i++
			units++
		default:
			n, u := jsonlex.UTF8Run(b, i)
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
