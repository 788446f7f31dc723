package usage

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/sluicegw/sluice/internal/jsonlex"
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
// are passed unescaped. Its tokens (whitespace, strings, literals,
// numbers) are read by package jsonlex; the structure and the depth limit
// are its own.
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
		return // compact JSON: most calls find no whitespace
	}
	l.i = jsonlex.SkipSpace(l.b, l.i)
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
		end, _, p := jsonlex.String(l.b, l.i)
		l.i = end
		return p == jsonlex.OK
	case 't', 'f', 'n': // a failed read leaves l.i anywhere: the document ends
		word := "null"
		switch l.b[l.i] {
		case 't':
			word = "true"
		case 'f':
			word = "false"
		}
		var p jsonlex.Problem
		l.i, p = jsonlex.Literal(l.b, l.i, word)
		return p == jsonlex.OK
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
		end, esc, p := jsonlex.String(l.b, l.i)
		if p != jsonlex.OK {
			return false
		}
		key := l.b[l.i+1 : end-1] // between the quotes, still escaped
		l.i = end
		if fn != nil && (esc || !utf8.Valid(key)) {
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

// number reads a number per the JSON grammar.
func (l *lexer) number() bool {
	var p jsonlex.Problem
	l.i, p = jsonlex.Number(l.b, l.i)
	return p == jsonlex.OK
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
	dst, _ = jsonlex.Unescape(dst, raw, math.MaxInt) // no limit: always true
	return dst
}

// parseCount reads a raw value as a token count: present (ok) when it is
// a whole number in [0, maxCount] (12, 12.0, 1.2e1); bad when it is a
// number that cannot be a count — negative, a fraction, above maxCount
// (overflowing int64 or not); absent when it is null, a string or anything
// else.
func parseCount(raw []byte) count {
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return count{}
	}
	if n, overflow, ok := jsonlex.ParseInt(raw); ok {
		if overflow || n < 0 || n > maxCount {
			return count{bad: true}
		}
		return count{v: n, ok: true}
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return count{}
	}
	if err != nil || f != math.Trunc(f) || f < 0 || f > maxCount {
		return count{bad: true}
	}
	return count{v: int64(f), ok: true}
}

// parseDigits parses an integer literal without allocating, clamped to
// [0, maxCount] (a negative one is 0, a larger one maxCount, overflowing
// int64 or not).
func parseDigits(b []byte) (int64, bool) {
	n, _, ok := jsonlex.ParseInt(b) // 0 when not ok
	return min(max(n, 0), maxCount), ok
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
