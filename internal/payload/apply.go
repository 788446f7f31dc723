package payload

import (
	"errors"
	"unicode/utf8"
)

// Rewrite is a minimal change to a request body.
type Rewrite struct {
	// Model replaces the value of every top-level "model" member, or is
	// added as one when there is none. "" keeps the model as it is.
	Model string
	// ForceIncludeUsage makes stream_options.include_usage true: it is
	// replaced or added inside every top-level stream_options object, and a
	// stream_options that is absent, null or not an object becomes
	// {"include_usage":true}. Set it only on streaming chat/completions and
	// completions requests: OpenAI rejects stream_options unless "stream"
	// is true.
	ForceIncludeUsage bool
	// DropModel removes every top-level "model" member (Azure OpenAI takes
	// the deployment from the path). Model is then ignored.
	DropModel bool
}

// edit replaces body[start:end] with: a comma if comma, indent, key, then
// val (JSON-encoded as a string if quote, else verbatim).
type edit struct {
	start, end int
	comma      bool
	indent     []byte
	key        string
	val        string
	quote      bool
}

func (e *edit) size() int {
	n := len(e.indent) + len(e.key) + len(e.val)
	if e.quote {
		n = len(e.indent) + len(e.key) + quotedLen(e.val)
	}
	if e.comma {
		n++
	}
	return n
}

func (e *edit) appendTo(out []byte) []byte {
	if e.comma {
		out = append(out, ',')
	}
	out = append(out, e.indent...)
	out = append(out, e.key...)
	if e.quote {
		return appendQuoted(out, e.val)
	}
	return append(out, e.val...)
}

// Apply returns body with rw applied, every other byte as it was. It
// returns body itself (not a copy) when nothing changes; a zero Rewrite
// returns body without reading it. body must be a JSON object (Parse
// accepted it); otherwise Apply returns the *apierr.Error Parse would.
//
// Added members go after the last member, indented like the first one;
// include_usage is added first in its stream_options object.
func Apply(body []byte, rw Rewrite) ([]byte, error) {
	if rw.Model == "" && !rw.ForceIncludeUsage && !rw.DropModel {
		return body, nil
	}
	s := scanner{buf: body}
	if err := s.begin(); err != nil {
		return nil, err
	}
	open := s.pos // just after '{'
	var (
		store                  [8]edit
		edits                  = store[:0]
		haveModel, haveOptions bool
		members                int
		indent                 []byte // whitespace before the first key
		kept                   bool   // some member is kept
		keptEnd                int    // end of the last kept member's value
		runStart               = -1   // first key of a run of removed members
		valEnd                 = open // end of the last member's value
	)
	for more := s.firstMember(); more; more = s.nextMember() {
		keyStart := s.pos
		if members == 0 {
			indent = body[open:keyStart]
		}
		members++
		key, ok := s.memberKey()
		if !ok {
			break
		}
		start, drop := s.pos, rw.DropModel && string(key) == "model"
		if drop {
			if runStart < 0 {
				runStart = keyStart
			}
		} else if runStart >= 0 { // removed members followed by this one: cut up to its key
			edits = append(edits, edit{start: runStart, end: keyStart})
			runStart = -1
		}
		switch string(key) {
		case "model":
			haveModel = true
			if s.value(1, modeSkip) && !drop && rw.Model != "" && !isString(body[start:s.pos], rw.Model) {
				edits = append(edits, edit{start: start, end: s.pos, val: rw.Model, quote: true})
			}
		case "stream_options":
			haveOptions = true
			if rw.ForceIncludeUsage {
				edits = s.forceUsage(edits)
			} else {
				s.value(1, modeSkip)
			}
		default:
			s.value(1, modeSkip)
		}
		if s.err != nil {
			break
		}
		valEnd = s.pos
		if !drop {
			kept, keptEnd = true, valEnd
		}
	}
	if err := s.end(); err != nil {
		return nil, err
	}
	if runStart >= 0 { // the last members are removed: cut from the last kept value
		if kept {
			edits = append(edits, edit{start: keptEnd, end: valEnd})
		} else {
			edits = append(edits, edit{start: runStart, end: valEnd})
		}
	}
	if rw.Model != "" && !rw.DropModel && !haveModel {
		edits = append(edits, insertAt(valEnd, kept, indent, `"model":`, rw.Model, true))
		kept = true
	}
	if rw.ForceIncludeUsage && !haveOptions {
		edits = append(edits, insertAt(valEnd, kept, indent, `"stream_options":`, `{"include_usage":true}`, false))
	}
	if len(edits) == 0 {
		return body, nil
	}
	n := len(body)
	for i := range edits {
		n += edits[i].size() - (edits[i].end - edits[i].start)
	}
	out := make([]byte, 0, n)
	prev := 0
	for i := range edits {
		e := &edits[i]
		if e.start < prev {
			return nil, errors.New("payload: internal error: overlapping edits")
		}
		out = append(out, body[prev:e.start]...)
		out = e.appendTo(out)
		prev = e.end
	}
	return append(out, body[prev:]...), nil
}

// insertAt is a new member inserted at position at, after a comma and the
// indentation when another member precedes it.
func insertAt(at int, afterMember bool, indent []byte, key, val string, quote bool) edit {
	e := edit{start: at, end: at, key: key, val: val, quote: quote}
	if afterMember {
		e.comma, e.indent = true, indent
	}
	return e
}

// forceUsage scans the stream_options value at s.pos, adding the edits that
// make include_usage true.
func (s *scanner) forceUsage(edits []edit) []edit {
	start := s.pos
	if s.peek() != '{' {
		if s.value(1, modeSkip) {
			edits = append(edits, edit{start: start, end: s.pos, val: `{"include_usage":true}`})
		}
		return edits
	}
	s.pos++ // '{'
	open := s.pos
	found, members := false, false
	for more := s.firstMember(); more; more = s.nextMember() {
		members = true
		key, ok := s.memberKey()
		if !ok {
			return edits
		}
		vs := s.pos
		if !s.value(2, modeSkip) {
			return edits
		}
		if string(key) == "include_usage" {
			found = true
			if string(s.buf[vs:s.pos]) != "true" {
				edits = append(edits, edit{start: vs, end: s.pos, val: "true"})
			}
		}
	}
	if s.err == nil && !found {
		v := `"include_usage":true`
		if members {
			v = `"include_usage":true,`
		}
		edits = append(edits, edit{start: open, end: open, val: v})
	}
	return edits
}

// isString reports whether the JSON value v is a string literally equal to
// m (without escapes).
func isString(v []byte, m string) bool {
	if len(v) != len(m)+2 || v[0] != '"' {
		return false
	}
	for _, c := range v[1 : len(v)-1] {
		if c == '\\' {
			return false
		}
	}
	return string(v[1:len(v)-1]) == m
}

// appendQuoted appends s as a JSON string: '"' and '\\' escaped, control
// characters as \n, \r, \t or \u00XX, each byte of invalid UTF-8 as \ufffd
// (as encoding/json does), everything else verbatim.
func appendQuoted(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// quotedLen is len(appendQuoted(nil, s)).
func quotedLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20:
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			n += 6
		} else {
			n += size
		}
		i += size
	}
	return n
}

const hexDigits = "0123456789abcdef"
