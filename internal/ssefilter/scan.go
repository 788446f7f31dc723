package ssefilter

// scanner reads an event's data as it arrives, in pieces, and tells as
// early as it can that the data is not a usage chunk: a JSON object
// whose top-level members include "choices", every one an empty array,
// and "usage", every one an object. It follows JSON's structure only as
// far as that needs (nested values are skipped by depth and strings,
// numbers and literals by their delimiters), so it is exact on valid
// JSON; whether the data is valid JSON at all is checked once the event
// is complete (Filter.validJSON). Rejecting is always safe — the event
// is then kept — so any doubt rejects.
type scanner struct {
	state  scanState
	depth  int // nesting inside a skipped value
	key    [len("choices")]byte
	keyLen int
	keyBig bool // longer than "choices"
	hex    int  // hex digits of a \u escape in a key read so far
	hexVal int
	value  valueKind // what the member being read is
	// choices and usage: the members seen (each one checked as it came).
	choices, usage bool
}

type scanState uint8

const (
	sStart      scanState = iota // before the top-level value
	sKeyOrEnd                    // after '{'
	sNextKey                     // after ','
	sKey                         // in a top-level key
	sKeyEsc                      // after '\' in a key
	sKeyHex                      // in a \u escape in a key
	sColon                       // after a key
	sValue                       // after ':'
	sChoices                     // after "choices": [
	sSkip                        // in a nested value (depth > 0)
	sSkipStr                     // in a string being skipped
	sSkipEsc                     // after '\' in a string being skipped
	sScalar                      // in a number or literal
	sAfterValue                  // after a member's value
	sDone                        // after the top-level '}'
	sRejected
)

type valueKind uint8

const (
	otherValue valueKind = iota
	choicesValue
	usageValue
)

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// feed reads the next piece of the data; false once it is ruled out.
func (s *scanner) feed(b []byte) bool {
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch s.state {
		case sStart:
			if isSpace(c) {
				continue
			}
			if c != '{' {
				return s.reject()
			}
			s.state = sKeyOrEnd
		case sKeyOrEnd, sNextKey:
			switch {
			case isSpace(c):
			case c == '"':
				s.state, s.keyLen, s.keyBig = sKey, 0, false
			case c == '}' && s.state == sKeyOrEnd:
				s.state = sDone
			default:
				return s.reject()
			}
		case sKey:
			switch {
			case c == '"':
				if !s.endKey() {
					return false
				}
			case c == '\\':
				s.state = sKeyEsc
			case c >= 0x80: // not ASCII: see endKey
				return s.reject()
			default:
				s.addKey(c)
			}
		case sKeyEsc:
			switch c {
			case 'u':
				s.state, s.hex, s.hexVal = sKeyHex, 0, 0
			case '"', '\\', '/':
				s.addKey(c)
				s.state = sKey
			case 'b', 'f', 'n', 'r', 't':
				s.addKey(0x1f) // a control character: matches no name
				s.state = sKey
			default:
				return s.reject()
			}
		case sKeyHex:
			d := hexDigit(c)
			if d < 0 {
				return s.reject()
			}
			s.hexVal = s.hexVal<<4 | d
			if s.hex++; s.hex == 4 {
				if s.hexVal >= 0x80 {
					return s.reject()
				}
				s.addKey(byte(s.hexVal))
				s.state = sKey
			}
		case sColon:
			if isSpace(c) {
				continue
			}
			if c != ':' {
				return s.reject()
			}
			s.state = sValue
		case sValue:
			if isSpace(c) {
				continue
			}
			switch s.value {
			case choicesValue:
				if c != '[' {
					return s.reject()
				}
				s.state = sChoices
			case usageValue:
				if c != '{' {
					return s.reject() // null, or not an object
				}
				s.usage = true
				s.state, s.depth = sSkip, 1
			default:
				switch c {
				case '{', '[':
					s.state, s.depth = sSkip, 1
				case '"':
					s.state, s.depth = sSkipStr, 0
				case ',', '}', ']', ':':
					return s.reject()
				default:
					s.state = sScalar
				}
			}
		case sChoices:
			if isSpace(c) {
				continue
			}
			if c != ']' {
				return s.reject() // a choice: not a usage chunk
			}
			s.choices = true
			s.state = sAfterValue
		case sSkip:
			switch c {
			case '"':
				s.state = sSkipStr
			case '{', '[':
				s.depth++
			case '}', ']':
				if s.depth--; s.depth == 0 {
					s.state = sAfterValue
				}
			}
		case sSkipStr:
			for c != '"' && c != '\\' {
				if i++; i == len(b) {
					return true
				}
				c = b[i]
			}
			switch {
			case c == '\\':
				s.state = sSkipEsc
			case s.depth > 0:
				s.state = sSkip
			default:
				s.state = sAfterValue
			}
		case sSkipEsc:
			s.state = sSkipStr
		case sScalar:
			if c == ',' || c == '}' || c == ']' || isSpace(c) {
				s.state = sAfterValue
				i-- // the delimiter is read after the value
			}
		case sAfterValue:
			switch {
			case isSpace(c):
			case c == ',':
				s.state = sNextKey
			case c == '}':
				s.state = sDone
			default:
				return s.reject()
			}
		case sDone:
			if !isSpace(c) {
				return s.reject()
			}
		default: // sRejected
			return false
		}
	}
	return s.state != sRejected
}

func (s *scanner) reject() bool {
	s.state = sRejected
	return false
}

func (s *scanner) addKey(c byte) {
	if s.keyLen == len(s.key) {
		s.keyBig = true
		return
	}
	s.key[s.keyLen] = c
	s.keyLen++
}

// endKey classifies the key just read. A key that equals "choices" or
// "usage" only ignoring case rejects: some decoders (Go's encoding/json
// among them) match member names case-insensitively, so they would read
// a choices or usage there. Non-ASCII keys were rejected as they came,
// for the same reason (Unicode folding maps 'ſ' to 's' and 'K' to 'k').
func (s *scanner) endKey() bool {
	s.state, s.value = sColon, otherValue
	if s.keyBig {
		return true
	}
	switch k := s.key[:s.keyLen]; {
	case string(k) == "choices":
		s.value = choicesValue
	case string(k) == "usage":
		s.value = usageValue
	case asciiEqualFold(k, "choices"), asciiEqualFold(k, "usage"):
		return s.reject()
	}
	return true
}

// usageOnly reports whether the data read is, if valid JSON, a usage
// chunk.
func (s *scanner) usageOnly() bool { return s.state == sDone && s.choices && s.usage }

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		if lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func hexDigit(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
