package wiredecode

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// maxDepth bounds the nesting of messages (Struct inside Value inside
// Struct …) the decoder follows before it gives up and leaves the message
// to proto.Unmarshal, whose own limit (protowire.DefaultRecursionLimit,
// 10,000) then decides. Real requests nest a few levels.
const maxDepth = 100

// The wire types the decoder accepts.
const (
	varintType  = protowire.VarintType
	fixed64Type = protowire.Fixed64Type
	bytesType   = protowire.BytesType
)

// tag reads the field tag at the front of b: its number, wire type and
// length, the length negative when b does not start with a valid tag.
func tag(b []byte) (protowire.Number, protowire.Type, int) {
	if len(b) > 0 && b[0] >= 1<<3 && b[0] < 0x80 { // one byte, field number ≥ 1
		return protowire.Number(b[0] >> 3), protowire.Type(b[0] & 7), 1
	}
	return protowire.ConsumeTag(b)
}

// varint reads a varint, with its length (negative when malformed).
func varint(b []byte) (uint64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	return protowire.ConsumeVarint(b)
}

// delimited reads a length-delimited value, with the length of its
// prefix and bytes (negative when malformed).
func delimited(b []byte) ([]byte, int) {
	if len(b) > 0 && b[0] < 0x80 {
		n := int(b[0]) + 1
		if n > len(b) {
			return nil, -1
		}
		return b[1:n], n
	}
	return protowire.ConsumeBytes(b)
}

// msg is the message being decoded. Its strings are substrings of one
// copy of it, made when the first is read; its bytes fields, from the
// second on, slices of another (the first, often a body and most of the
// message, is copied alone): a few allocations a message, not one a
// field. What is decoded keeps the copies alive while it is held.
type msg struct {
	src   []byte // the message, which every b decoded is a part of
	strs  string // src as a string, once a string field was read
	own   []byte // a copy of src, once a second bytes field was read
	bytes bool   // a bytes field was read
}

// at is where v, a part of d.src, starts in it, or -1 when v is not (a
// value's capacity runs to the end of src, since the decoder only ever
// slices from the front; at checks it rather than trust it).
func (d *msg) at(v []byte) int {
	off := cap(d.src) - cap(v)
	if off < 0 || off+len(v) > len(d.src) {
		return -1
	}
	return off
}

// str reads a proto3 string: its bytes copied out of the input, which
// must be valid UTF-8 (proto.Unmarshal refuses them otherwise).
func (d *msg) str(b []byte) (string, int) {
	v, n := delimited(b)
	if n < 0 || !utf8.Valid(v) {
		return "", -1
	}
	if len(v) == 0 {
		return "", n
	}
	off := d.at(v)
	if off < 0 {
		return string(v), n
	}
	if d.strs == "" {
		d.strs = string(d.src)
	}
	s := d.strs[off : off+len(v)]
	if s != string(v) { // not at off after all: copy it on its own
		return string(v), n
	}
	return s, n
}

// bytesValue reads a proto3 bytes field: a copy, nil when empty, as
// proto.Unmarshal makes it, its capacity its length (an append to it
// never reaches another field's bytes).
func (d *msg) bytesValue(b []byte) ([]byte, int) {
	v, n := delimited(b)
	if n < 0 {
		return nil, -1
	}
	if len(v) == 0 {
		return nil, n
	}
	off := d.at(v)
	if off < 0 || !d.bytes {
		d.bytes = true
		return append([]byte(nil), v...), n
	}
	if d.own == nil {
		d.own = append([]byte(nil), d.src...)
	}
	c := d.own[off : off+len(v) : off+len(v)]
	if string(c) != string(v) {
		return append([]byte(nil), v...), n
	}
	return c, n
}

// fixed64 reads a fixed64 value.
func fixed64(b []byte) (uint64, int) {
	return protowire.ConsumeFixed64(b)
}

// count is how many length-delimited fields numbered num the field
// sequence b holds, counting up to the first malformed field. It sizes
// maps and batches of structs before they are filled.
func count(b []byte, num protowire.Number) int {
	c := 0
	for len(b) > 0 {
		n, typ, k := tag(b)
		if k < 0 {
			return c
		}
		b = b[k:]
		if typ == bytesType {
			_, m := delimited(b)
			if m < 0 {
				return c
			}
			if n == num {
				c++
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(n, typ, b)
		if m < 0 {
			return c
		}
		b = b[m:]
	}
	return c
}

// oneof is the member of type W that the oneof field holds now, or a new
// one: protobuf merges a member that comes again into the one there, and
// one of another case replaces it.
func oneof[W any](held any) *W {
	if w, ok := held.(*W); ok {
		return w
	}
	return new(W)
}

// orNew is *p, made first if it is nil: an embedded message that comes
// again merges into the one there.
func orNew[T any](p **T) *T {
	if *p == nil {
		*p = new(T)
	}
	return *p
}

// messageFields calls f with the number and content of each field of the
// message b, every one of which must be length-delimited (an embedded
// message, a string, bytes or a map entry). It reports false for bytes
// that are not such fields, or as soon as f does.
func messageFields(b []byte, f func(num protowire.Number, e []byte) bool) bool {
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 || typ != bytesType {
			return false
		}
		b = b[n:]
		e, n := delimited(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if !f(num, e) {
			return false
		}
	}
	return true
}
