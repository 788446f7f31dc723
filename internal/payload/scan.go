package payload

import (
	"bytes"
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
	refs   Refs     // the kinds of input by reference seen so far (ref.go)
	ctx    uint8    // where the next object sits (ctxNone, ctxImageURL, ctxAudio)
	keyBuf [64]byte // an escaped key, decoded
}

// mode says what a value costs in the input-token estimate.
type mode uint8

const (
	modeSkip  mode = iota // costs nothing (validated only)
	modeText              // prompt text: strings ceil(units/4), numbers 1
	modeMedia             // a string is media: mediaString
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
			// reached only outside an object (object calls mediaString)
			s.tokens += dataTokens(u)
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
	here := s.ctx
	s.ctx = ctxNone
	cm := childMode(m)
	var med media // this object's media strings whose class its siblings decide
	// A "url" beside "type": "url" is a source by URL (Anthropic's).
	var hasURL, typeURL bool
	for more := s.firstMember(); more; more = s.nextMember() {
		key, ok := s.memberKey()
		if !ok {
			return false
		}
		vm := cm
		if cm == modeText {
			vm = keyMode(key)
			if here == ctxAudio && string(key) == "id" && s.peek() != 'n' {
				s.refs |= RefAudioID
			}
			if s.peek() == '"' {
				if vm == modeMedia {
					switch string(key) {
					case "file_id":
						s.refs |= RefFileID
					case "file_url":
						s.refs |= RefFileURL
					case "url":
						hasURL = hasURL || here != ctxImageURL
					}
					if !s.mediaString(key, &med) {
						return false
					}
					continue
				}
				if string(key) == "type" {
					start := s.pos
					if !s.value(depth, vm) {
						return false
					}
					var buf [16]byte
					item, src := typeRef(decodedPrefix(buf[:], s.buf[start+1:s.pos-1]))
					if item {
						s.refs |= RefItemReference
					}
					typeURL = typeURL || src
					continue
				}
				if isHintKey(key) {
					start := s.pos
					if !s.value(depth, vm) {
						return false
					}
					med.hint(key, s.buf[start+1:s.pos-1])
					continue
				}
			}
		}
		if cm == modeText && s.peek() == '{' {
			switch string(key) {
			case "image_url":
				s.ctx = ctxImageURL
			case "audio":
				s.ctx = ctxAudio
			}
		}
		if !s.value(depth, vm) {
			return false
		}
	}
	if s.err != nil {
		return false
	}
	if hasURL && typeURL {
		s.refs |= RefURL
	}
	s.tokens += med.cost()
	return true
}

// mediaString scans the string under the media key key (README.md, "Media"):
// a URL or file id, or an inline image, costs mediaTokens; other inline
// data marked by its own data: URL costs mediaTokens or its length as
// text, whichever is more; a string nothing marks is left to med, which
// its object's media_type, mime_type or format decides.
func (s *scanner) mediaString(key []byte, med *media) bool {
	start := s.pos
	u, _, ok := s.str()
	if !ok {
		return false
	}
	var buf [16]byte
	p, _ := decodedPrefix(buf[:], s.buf[start+1:s.pos-1])
	switch mediaClassOf(key, p) {
	case mediaRef, mediaImage:
		s.tokens += mediaTokens
	case mediaData:
		s.tokens += dataTokens(u)
	default:
		med.add(u)
	}
	return true
}

// mediaClass is what a media string is, for the estimate.
type mediaClass uint8

const (
	mediaRaw   mediaClass = iota // nothing in the string says: its object decides
	mediaRef                     // a URL or a file id: the content is elsewhere
	mediaImage                   // an inline image
	mediaAudio                   // inline audio (only by its object's format)
	mediaData                    // any other inline data: documents, text, PDFs, unknown
)

// mediaClassOf classifies the string under media key key by the first
// bytes p of its decoded content.
func mediaClassOf(key, p []byte) mediaClass {
	switch {
	case string(key) == "file_id":
		return mediaRef
	case bytes.HasPrefix(p, []byte("https://")), bytes.HasPrefix(p, []byte("http://")):
		return mediaRef
	case bytes.HasPrefix(p, []byte("data:image/")):
		return mediaImage
	case bytes.HasPrefix(p, []byte("data:")):
		return mediaData
	}
	return mediaRaw
}

// isHintKey reports the keys whose string value tells what a raw media
// string beside them is.
func isHintKey(key []byte) bool {
	switch string(key) {
	case "media_type", "mime_type", "format":
		return true
	}
	return false
}

// audioFormats are the "format" values that make a raw media string audio
// (OpenAI's input_audio: {"data": base64, "format": "wav"}).
func isAudioFormat(v []byte) bool {
	switch string(v) {
	case "wav", "mp3", "flac", "opus", "ogg", "aac", "m4a", "webm", "pcm16":
		return true
	}
	return false
}

// Media estimate constants (README.md).
const (
	// audioUnitsPerToken: base64 audio at 8 kbit/s is 1,333 characters a
	// second; providers charge at most ~20 audio tokens a second.
	audioUnitsPerToken = 64
)

// dataTokens is the cost of inline data of u units: its length as text,
// at least one image's worth.
func dataTokens(u int64) int64 { return max(mediaTokens, (u+3)/4) }

// media collects the raw media strings of one object and the hints its
// siblings give, to cost them when the object ends.
type media struct {
	n, units, data int64 // raw strings: count, units, Σ dataTokens
	class          mediaClass
	hinted         bool
}

func (m *media) add(u int64) {
	m.n++
	m.units += u
	m.data += dataTokens(u)
}

// hint notes the value raw (undecoded content) of the hint key key: an
// image media type, or an audio format; any other value, or hints that
// disagree, make the raw strings data.
func (m *media) hint(key, raw []byte) {
	var buf [16]byte
	p, whole := decodedPrefix(buf[:], raw)
	c := mediaData
	switch {
	case string(key) == "format":
		if whole && isAudioFormat(p) {
			c = mediaAudio
		}
	case bytes.HasPrefix(p, []byte("image/")):
		c = mediaImage
	}
	if m.hinted && m.class != c {
		c = mediaData
	}
	m.class, m.hinted = c, true
}

// cost is what the raw strings cost: an image each, audio by length, or
// else data.
func (m *media) cost() int64 {
	switch {
	case m.n == 0:
		return 0
	case m.hinted && m.class == mediaImage:
		return m.n * mediaTokens
	case m.hinted && m.class == mediaAudio:
		return (m.units + audioUnitsPerToken - 1) / audioUnitsPerToken
	}
	return m.data
}

// decodedPrefix decodes the start of the string content raw (escapes
// resolved) into dst, up to len(dst) bytes or the first escape of a
// non-ASCII rune; whole reports that all of raw was decoded.
func decodedPrefix(dst, raw []byte) (p []byte, whole bool) {
	n, i := 0, 0
	for i < len(raw) && n < len(dst) {
		c := raw[i]
		if c != '\\' {
			dst[n] = c
			n, i = n+1, i+1
			continue
		}
		end, r, prob := jsonlex.Escape(raw, i)
		if prob != jsonlex.OK || r >= utf8.RuneSelf {
			return dst[:n], false
		}
		dst[n] = byte(r)
		n, i = n+1, end
	}
	return dst[:n], i == len(raw)
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
		e := invalid(apierr.CodeInvalidJSON, "invalid JSON at byte %d: %s", at, msg)
		// OpenAI's words for a body it cannot parse, with where.
		s.err = openAI(e, "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. "+
			"The OpenAI API expects a JSON payload, but what was sent was not valid JSON: "+e.Message+".)")
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
