package blockyaml

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

const (
	// maxDepth bounds the nesting Parse follows; deeper documents are
	// declined (yaml.v3 has its own, larger, bound).
	maxDepth = 64
	// maxKeyLen bounds a mapping key, in a block or a flow mapping:
	// yaml.v3 refuses a simple key longer than 1024 characters.
	maxKeyLen = 1000
	// maxInterned bounds the distinct mapping keys shared between nodes.
	maxInterned = 4096
)

// parser reads data one line at a time. A line is "content" when it holds
// more than spaces and a comment; the current content line is described by
// ls, le, cs and ind. After "- " the rest of a line can be taken as a line
// of its own, indented to where the rest starts (cs and ind move).
type parser struct {
	data []byte
	bad  bool // the document is outside the subset: give up
	eof  bool // no content line is left

	ls, le int // the current line's start and end (its '\n', or len(data))
	cs     int // where its content starts
	ind    int // cs-ls: the content's column, from 0
	line   int // its number, from 1
	after  int // where the line after it starts

	depth   int
	nodes   []yaml.Node  // nodes are handed out from this slab
	ptrs    []*yaml.Node // Content slices are cut from this slab
	scratch []*yaml.Node // the children of the collections being parsed
	keys    map[string]string
	slabs   int // how many node slabs were made: a release's mark
	pslabs  int // how many pointer slabs were made

	stream Stream
	top    *yaml.Node // the document's top-level mapping, once made
}

// Stream names a list that ParseStream hands over item by item rather than
// holding it in the tree: a list of many items, each of which the caller
// turns into a value of its own, need not be in memory whole.
type Stream struct {
	// Key is a key of the document's top-level mapping (plain, as
	// written); when its value is a block list, that list is streamed.
	// The tree keeps the list's node, with no Content.
	Key string
	// Item is called with each item of the list, in order, and i its
	// index. It returns whether it is done with the item's nodes, which
	// the parser then reuses for the next items. It may be called for
	// items of a document that turns out to be outside the subset: when
	// ParseStream's ok is false, what Item was given means nothing.
	Item func(i int, item *yaml.Node) (release bool)
	// Size, if set, is called once before the first item with how many
	// items the list holds, when the document is in the subset: room can
	// be made for them at once.
	Size func(n int)
}

// Parse parses data as one YAML document and returns its document node,
// or ok false when data is outside the subset this package reads (see the
// package doc); then nothing is known about data, not even that it is
// invalid, and yaml.v3 must parse it.
func Parse(data []byte) (doc *yaml.Node, ok bool) { return ParseStream(data, Stream{}) }

// ParseStream is Parse, handing over the items of the list s names one at
// a time (see Stream). Only the first value of s.Key is streamed, if it is a
// block list; a zero Stream streams nothing.
func ParseStream(data []byte, s Stream) (doc *yaml.Node, ok bool) {
	p := &parser{data: data, keys: make(map[string]string), stream: s}
	p.next()
	if p.bad || p.eof {
		return nil, false
	}
	doc = p.node(yaml.DocumentNode, "", p.line, p.ind+1)
	root := p.block()
	if p.bad || !p.eof {
		return nil, false
	}
	doc.Content = []*yaml.Node{root}
	return doc, true
}

func (p *parser) fail() { p.bad = true }

// next moves to the next content line. Bytes outside printable ASCII (tabs
// and carriage returns among them) decline the document.
func (p *parser) next() {
	off := p.after
	for {
		if off >= len(p.data) {
			p.eof = true
			return
		}
		p.line++
		end := len(p.data)
		if i := bytes.IndexByte(p.data[off:], '\n'); i >= 0 {
			end = off + i
		}
		cs := off
		for cs < end && p.data[cs] == ' ' {
			cs++
		}
		le := end
		for j := cs; j < end; j++ {
			if c := p.data[j]; c < 0x20 || c > 0x7e {
				// Only a comment may hold more than printable ASCII: the
				// line's content stops where the first one starts.
				h := commentStart(p.data[cs:j])
				if c < 0x80 || h < 0 || !commentText(p.data[j:end]) {
					p.fail()
					return
				}
				le = cs + h
				break
			}
		}
		if cs == le || p.data[cs] == '#' {
			off = end + 1
			continue
		}
		p.ls, p.le, p.cs, p.ind, p.after = off, le, cs, cs-off, end+1
		return
	}
}

// commentStart returns where the first comment in a line's content b may
// start ("#" first, or " #"), or -1. It may be inside quotes, which then
// do not close before it and decline the document.
func commentStart(b []byte) int {
	if len(b) > 0 && b[0] == '#' {
		return 0
	}
	if i := bytes.Index(b, []byte(" #")); i >= 0 {
		return i + 1
	}
	return -1
}

// commentText reports whether b is UTF-8 that yaml.v3 reads as printable
// characters on one line: no control characters, no byte order mark, and
// none of the characters YAML also breaks lines at (U+0085, U+2028,
// U+2029).
func commentText(b []byte) bool {
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size <= 1:
			return false
		case r < 0x80:
			if r < 0x20 || r > 0x7e {
				return false
			}
		case r < 0xa0, r == 0x2028, r == 0x2029, r == 0xfeff, r >= 0xd800 && r < 0xe000, r == 0xfffe, r == 0xffff:
			return false
		}
		b = b[size:]
	}
	return true
}

// node hands out a node from the slab.
func (p *parser) node(kind yaml.Kind, tag string, line, col int) *yaml.Node {
	if len(p.nodes) == cap(p.nodes) {
		size := min(max(2*cap(p.nodes), 256), 8192)
		p.nodes = make([]yaml.Node, 0, size)
		p.slabs++
	}
	p.nodes = p.nodes[:len(p.nodes)+1]
	n := &p.nodes[len(p.nodes)-1]
	*n = yaml.Node{Kind: kind, Tag: tag, Line: line, Column: col} // it may be a released one
	return n
}

// mark is where the slabs stood before a streamed item: what release
// hands back.
type mark struct{ slabs, nodes, pslabs, ptrs int }

func (p *parser) mark() mark { return mark{p.slabs, len(p.nodes), p.pslabs, len(p.ptrs)} }

// release makes the nodes handed out since m free for reuse. A slab made
// since m holds nothing older, and is reused from its start; older slabs
// made since are left to the collector.
func (p *parser) release(m mark) {
	if p.slabs == m.slabs {
		p.nodes = p.nodes[:m.nodes]
	} else {
		p.nodes = p.nodes[:0]
	}
	if p.pslabs == m.pslabs {
		p.ptrs = p.ptrs[:m.ptrs]
	} else {
		p.ptrs = p.ptrs[:0]
	}
}

// collect ends the collection whose children were pushed on scratch from
// base, and returns them as its Content.
func (p *parser) collect(base int) []*yaml.Node {
	n := len(p.scratch) - base
	if n == 0 {
		return nil
	}
	if cap(p.ptrs)-len(p.ptrs) < n {
		p.ptrs = make([]*yaml.Node, 0, max(16384, n))
		p.pslabs++
	}
	start := len(p.ptrs)
	p.ptrs = append(p.ptrs, p.scratch[base:]...)
	p.scratch = p.scratch[:base]
	return p.ptrs[start:len(p.ptrs):len(p.ptrs)]
}

// col is the column, from 1, of the byte at off on the current line.
func (p *parser) col(off int) int { return off - p.ls + 1 }

// isEntry reports whether the current content is a list entry ("- ").
func (p *parser) isEntry() bool {
	c := p.cs
	return p.data[c] == '-' && (c+1 == p.le || p.data[c+1] == ' ')
}

// block parses the block mapping or list that starts at the current
// content.
func (p *parser) block() *yaml.Node {
	if p.depth >= maxDepth {
		p.fail()
		return nil
	}
	p.depth++
	var n *yaml.Node
	if p.isEntry() {
		n = p.sequence(p.ind, false)
	} else {
		n = p.mapping(p.ind)
	}
	p.depth--
	return n
}

// mapping parses the block mapping whose keys are at column ind.
func (p *parser) mapping(ind int) *yaml.Node {
	m := p.node(yaml.MappingNode, "!!map", p.line, ind+1)
	if p.top == nil && p.depth == 1 {
		p.top = m
	}
	base := len(p.scratch)
	for !p.bad && !p.eof && p.ind == ind {
		colon := p.keyEnd(p.cs)
		if colon < 0 {
			p.fail()
			break
		}
		key := p.key(colon)
		stream := m == p.top && p.stream.Item != nil && key.Style == 0 && key.Value == p.stream.Key
		line, col := p.line, p.col(colon)
		v := skipSpaces(p.data, colon+1, p.le)
		var value *yaml.Node
		if v == p.le || p.data[v] == '#' {
			p.next()
			switch {
			case p.bad:
			case !p.eof && p.ind > ind && !(stream && p.isEntry()):
				value = p.block()
			case !p.eof && p.ind >= ind && p.isEntry():
				// A list may stand at its key's own column.
				if p.depth >= maxDepth {
					p.fail()
					break
				}
				p.depth++
				value = p.sequence(p.ind, stream)
				p.depth--
			default:
				// An empty value sits just after its colon.
				value = p.node(yaml.ScalarNode, "!!null", line, col+1)
			}
		} else {
			value = p.inline(v, ind)
		}
		if stream {
			p.stream.Item = nil // only the key's first value, list or not
		}
		if p.bad {
			break
		}
		p.scratch = append(p.scratch, key, value)
	}
	if !p.bad && !p.eof && p.ind > ind {
		p.fail()
	}
	m.Content = p.collect(base)
	return m
}

// sequence parses the block list whose dashes are at column ind; stream
// hands its items to p.stream.Item rather than to the list.
func (p *parser) sequence(ind int, stream bool) *yaml.Node {
	s := p.node(yaml.SequenceNode, "!!seq", p.line, ind+1)
	base := len(p.scratch)
	if stream && p.stream.Size != nil {
		p.stream.Size(p.entries(ind))
	}
	for i := 0; !p.bad && !p.eof && p.ind == ind && p.isEntry(); i++ {
		m := p.mark()
		dash := p.cs
		v := skipSpaces(p.data, dash+1, p.le)
		var item *yaml.Node
		switch {
		case v == p.le || p.data[v] == '#':
			line, col := p.line, p.col(dash)
			p.next()
			switch {
			case p.bad:
			case !p.eof && p.ind > ind:
				item = p.block()
			default:
				item = p.node(yaml.ScalarNode, "!!null", line, col+1)
			}
		case p.data[v] == '-' && (v+1 == p.le || p.data[v+1] == ' '):
			p.fail() // a list in a list on one line
		case p.keyEnd(v) >= 0:
			// "- key: value": the rest of the line starts a mapping at
			// its own column.
			p.cs, p.ind = v, v-p.ls
			item = p.block()
		default:
			item = p.inline(v, ind)
		}
		switch {
		case p.bad:
		case stream:
			if p.stream.Item(i, item) {
				p.release(m)
			}
			continue
		default:
			p.scratch = append(p.scratch, item)
			continue
		}
		break
	}
	if !p.bad && !p.eof && p.ind > ind {
		p.fail()
	}
	s.Content = p.collect(base)
	return s
}

// entries counts the entries of the block list whose dashes are at column
// ind, from the current one: the lines at its column, until one is not
// an entry or a line is indented less. It moves nothing.
func (p *parser) entries(ind int) int {
	q := parser{data: p.data, ls: p.ls, le: p.le, cs: p.cs, ind: p.ind, after: p.after}
	n := 0
	for !q.bad && !q.eof && q.ind >= ind {
		if q.ind == ind {
			if !q.isEntry() {
				break
			}
			n++
		}
		q.next()
	}
	return n
}

// inline parses the value that starts at v on the current line and ends
// it, then moves to the next line, which must not be indented past ind (a
// scalar continued on it is outside the subset).
func (p *parser) inline(v, ind int) *yaml.Node {
	var n *yaml.Node
	end := v
	switch p.data[v] {
	case '[', '{':
		n, end = p.flow(v, 0)
	case '"', '\'':
		n, end = p.quoted(v)
	default:
		n, end = p.blockPlain(v)
	}
	if p.bad {
		return nil
	}
	if i := skipSpaces(p.data, end, p.le); i < p.le && !(p.data[i] == '#' && i > end) {
		p.fail()
		return nil
	}
	p.next()
	if !p.bad && !p.eof && p.ind > ind {
		p.fail()
	}
	return n
}

// blockPlain parses a plain scalar outside flow collections: it runs to a
// comment or the end of the line.
func (p *parser) blockPlain(v int) (*yaml.Node, int) {
	if !plainStart(p.data, v, p.le) {
		p.fail()
		return nil, v
	}
	last := v // the last byte that is not a space
	i := v
	for ; i < p.le; i++ {
		switch c := p.data[i]; c {
		case ' ':
			continue
		case '#':
			if p.data[i-1] == ' ' {
				goto done
			}
		case ':':
			if i+1 == p.le || p.data[i+1] == ' ' {
				p.fail() // a mapping in a value's place
				return nil, v
			}
		}
		last = i
	}
done:
	n := p.node(yaml.ScalarNode, "", p.line, p.col(v))
	n.Value = string(p.data[v : last+1])
	n.Tag = plainTag(n.Value)
	return n, last + 1
}

// quoted parses a quoted scalar that ends on its line and has no escapes.
func (p *parser) quoted(v int) (*yaml.Node, int) {
	q := p.data[v]
	i := bytes.IndexByte(p.data[v+1:p.le], q)
	if i < 0 {
		p.fail()
		return nil, v
	}
	closing := v + 1 + i
	body := p.data[v+1 : closing]
	if q == '"' && bytes.IndexByte(body, '\\') >= 0 ||
		q == '\'' && closing+1 < p.le && p.data[closing+1] == '\'' {
		p.fail()
		return nil, v
	}
	n := p.node(yaml.ScalarNode, "!!str", p.line, p.col(v))
	n.Value = string(body)
	n.Style = yaml.SingleQuotedStyle
	if q == '"' {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n, closing + 1
}

// flow parses a flow list or mapping that closes on its line.
func (p *parser) flow(v, depth int) (*yaml.Node, int) {
	if p.depth+depth >= maxDepth {
		p.fail()
		return nil, v
	}
	kind, tag, closer := yaml.SequenceNode, "!!seq", byte(']')
	if p.data[v] == '{' {
		kind, tag, closer = yaml.MappingNode, "!!map", '}'
	}
	n := p.node(kind, tag, p.line, p.col(v))
	n.Style = yaml.FlowStyle
	base := len(p.scratch)
	i := skipSpaces(p.data, v+1, p.le)
	if i < p.le && p.data[i] == closer {
		return n, i + 1
	}
	for !p.bad {
		if kind == yaml.MappingNode {
			key, end := p.flowPlain(i)
			if p.bad {
				break
			}
			if end-i > maxKeyLen || end+1 >= p.le || p.data[end] != ':' || p.data[end+1] != ' ' {
				p.fail()
				break
			}
			p.scratch = append(p.scratch, key)
			i = skipSpaces(p.data, end+1, p.le)
		}
		var item *yaml.Node
		item, i = p.flowItem(i, depth)
		if p.bad {
			break
		}
		p.scratch = append(p.scratch, item)
		i = skipSpaces(p.data, i, p.le)
		switch {
		case i < p.le && p.data[i] == closer:
			n.Content = p.collect(base)
			return n, i + 1
		case i < p.le && p.data[i] == ',':
			i = skipSpaces(p.data, i+1, p.le)
			if i < p.le && (p.data[i] == closer || p.data[i] == ',') {
				p.fail() // an empty entry
			}
		default:
			p.fail()
		}
	}
	p.scratch = p.scratch[:base]
	return nil, v
}

// flowItem parses one value inside a flow collection.
func (p *parser) flowItem(i, depth int) (*yaml.Node, int) {
	if i >= p.le {
		p.fail()
		return nil, i
	}
	switch p.data[i] {
	case '[', '{':
		return p.flow(i, depth+1)
	case '"', '\'':
		return p.quoted(i)
	}
	n, end := p.flowPlain(i)
	if !p.bad && (end >= p.le || p.data[end] == ':') {
		p.fail() // unclosed, or a pair where a value belongs
	}
	return n, end
}

// flowPlain parses a plain scalar inside a flow collection. It stops
// before ',', ']', '}' or ':', or at the end of the line; a comment or a
// collection inside it declines the document.
func (p *parser) flowPlain(v int) (*yaml.Node, int) {
	if v >= p.le || !plainStart(p.data, v, p.le) {
		p.fail()
		return nil, v
	}
	last := v
	i := v
	for ; i < p.le; i++ {
		c := p.data[i]
		if c == ':' && i+1 < p.le && strings.IndexByte(" ,[]{}#", p.data[i+1]) < 0 {
			last = i // "llama3.1:8b": a colon before anything else is the scalar's
			continue
		}
		if c == ',' || c == ']' || c == '}' || c == ':' {
			break
		}
		if c == '[' || c == '{' || c == '#' || c == '?' {
			p.fail()
			return nil, v
		}
		if c != ' ' {
			last = i
		}
	}
	if last+1 != i && i < p.le && p.data[i] == ':' {
		p.fail() // a space before a key's colon
		return nil, v
	}
	n := p.node(yaml.ScalarNode, "", p.line, p.col(v))
	n.Value = string(p.data[v : last+1])
	n.Tag = plainTag(n.Value)
	return n, last + 1
}

// keyEnd returns the offset of the colon that ends the mapping key
// starting at v, or -1 when the line from v is not "key:" followed by a
// space or the end of the line. The key is plain, or quoted without
// escapes; keys that hold flow indicators or end in a space are left to
// yaml.v3.
func (p *parser) keyEnd(v int) int {
	if q := p.data[v]; q == '"' || q == '\'' {
		i := bytes.IndexByte(p.data[v+1:p.le], q)
		if i < 0 || i > maxKeyLen {
			return -1
		}
		closing := v + 1 + i
		switch {
		case q == '"' && bytes.IndexByte(p.data[v+1:closing], '\\') >= 0,
			closing+1 == p.le || p.data[closing+1] != ':',
			closing+2 < p.le && p.data[closing+2] != ' ':
			return -1
		}
		return closing + 1
	}
	if !plainStart(p.data, v, p.le) {
		return -1
	}
	for i := v; i < p.le && i-v <= maxKeyLen; i++ {
		switch p.data[i] {
		case ':':
			if i+1 == p.le || p.data[i+1] == ' ' {
				if p.data[i-1] == ' ' {
					return -1
				}
				return i
			}
		case '#':
			if p.data[i-1] == ' ' {
				return -1
			}
		case '"', '\'', '[', ']', '{', '}', ',':
			return -1
		}
	}
	return -1
}

// key makes the node of the key at the current content, which keyEnd
// found ends at colon.
func (p *parser) key(colon int) *yaml.Node {
	n := p.node(yaml.ScalarNode, "!!str", p.line, p.ind+1)
	switch p.data[p.cs] {
	case '"':
		n.Style = yaml.DoubleQuotedStyle
	case '\'':
		n.Style = yaml.SingleQuotedStyle
	default:
		n.Value = p.intern(p.data[p.cs:colon])
		n.Tag = plainTag(n.Value)
		return n
	}
	n.Value = p.intern(p.data[p.cs+1 : colon-1])
	return n
}

// intern shares the strings of mapping keys, which repeat on every entry
// of a list of mappings.
func (p *parser) intern(b []byte) string {
	if s, ok := p.keys[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(p.keys) < maxInterned {
		p.keys[s] = s
	}
	return s
}

// plainStart reports whether a plain scalar may start at data[v]: not at
// an indicator, a document marker, or a "-", "?" or ":" that stands alone.
func plainStart(data []byte, v, le int) bool {
	switch data[v] {
	case '-':
		if v+1 == le {
			return false
		}
		c := data[v+1]
		return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.'
	case '.':
		return !bytes.HasPrefix(data[v:le], []byte("..."))
	case '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`', ' ':
		return false
	}
	return true
}

// plainTag is the tag yaml.v3 gives a plain scalar (its parser.node and
// resolve): worked out here for the values that cannot be anything but a
// string, left to yaml.v3 for the rest.
func plainTag(v string) string {
	if v == "" {
		return "!!null"
	}
	switch c := v[0]; {
	case c == '<' || c == '~' || strings.IndexByte("yYnNtTfFoO", c) >= 0:
		// yaml.v3 looks these up in its table of words, and calls
		// everything else starting so a string.
		switch v {
		case "true", "True", "TRUE", "false", "False", "FALSE":
			return "!!bool"
		case "~", "null", "Null", "NULL":
			return "!!null"
		case "<<":
			return "!!merge"
		}
		return "!!str"
	case c == '+' || c == '-' || c == '.' || c >= '0' && c <= '9':
		if c >= '0' && c <= '9' && !numberLike(v) {
			return "!!str"
		}
		n := yaml.Node{Kind: yaml.ScalarNode, Value: v}
		return n.ShortTag()
	}
	return "!!str" // yaml.v3 tries nothing else on a string starting so
}

// numberLike reports whether v, which starts with a digit, might be read
// as an integer, a float or a timestamp. Those that start with a digit
// are decimal, octal, 0x/0o/0b-prefixed (underscores aside), or dates, so
// none holds a hex letter other than e and E unless such a prefix opens
// it; what holds one (most hex digests do) is a string.
func numberLike(v string) bool {
	// yaml.v3 drops underscores before it reads a number: "0_x1" is 0x1.
	second := strings.TrimLeft(v[1:], "_")
	if second != "" && strings.IndexByte("xXoObB", second[0]) >= 0 {
		return true
	}
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c >= 'a' && c <= 'd' || c == 'f' || c >= 'A' && c <= 'D' || c == 'F':
			return false
		}
	}
	return true
}

func skipSpaces(data []byte, i, end int) int {
	for i < end && data[i] == ' ' {
		i++
	}
	return i
}
