package wiredecode

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Wire-level rewriting of encoded messages: the same message in another
// field order, with fields repeated or dropped, varints padded, and
// foreign fields added, at any depth the schema says holds a message.

// wireField is one encoded field.
type wireField struct {
	num protowire.Number
	typ protowire.Type
	tag []byte // the tag's encoding
	pre []byte // a length-delimited field's length encoding
	val []byte // its content; otherwise the value's encoding
}

func (f wireField) appendTo(b []byte) []byte {
	b = append(b, f.tag...)
	b = append(b, f.pre...)
	return append(b, f.val...)
}

// split cuts b into its fields, false when b is not a well-formed
// sequence of them.
func split(b []byte) ([]wireField, bool) {
	var fs []wireField
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		f := wireField{num: num, typ: typ, tag: b[:n]}
		b = b[n:]
		if typ == protowire.BytesType {
			l, k := protowire.ConsumeVarint(b)
			if k < 0 || l > uint64(len(b)-k) {
				return nil, false
			}
			f.pre, f.val = b[:k], b[k:k+int(l)]
			b = b[k+int(l):]
		} else {
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return nil, false
			}
			f.val = b[:m]
			b = b[m:]
		}
		fs = append(fs, f)
	}
	return fs, true
}

func join(fs []wireField) []byte {
	var b []byte
	for _, f := range fs {
		b = f.appendTo(b)
	}
	return b
}

// withContent is f holding v, its length re-encoded.
func withContent(f wireField, v []byte) wireField {
	f.val = v
	f.pre = protowire.AppendVarint(nil, uint64(len(v)))
	return f
}

// messageOf is the descriptor of the message field num of md holds (a
// map's entry for a map field), nil when it holds none.
func messageOf(md protoreflect.MessageDescriptor, num protowire.Number) protoreflect.MessageDescriptor {
	if md == nil {
		return nil
	}
	fd := md.Fields().ByNumber(num)
	if fd == nil || (fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind) {
		return nil
	}
	return fd.Message()
}

// rewrite applies edit to the fields of b, or (each time with
// probability 1-here) to those of one of its message fields, chosen at
// random, and so on down. b that is not well-formed is returned as it is.
func rewrite(g *gen, b []byte, md protoreflect.MessageDescriptor, here float64, edit func([]wireField, protoreflect.MessageDescriptor) []wireField) []byte {
	fs, ok := split(b)
	if !ok {
		return b
	}
	var inner []int
	for i, f := range fs {
		if f.typ == protowire.BytesType && messageOf(md, f.num) != nil {
			inner = append(inner, i)
		}
	}
	if len(inner) == 0 || g.chance(here) {
		return join(edit(fs, md))
	}
	i := inner[g.r.IntN(len(inner))]
	fs[i] = withContent(fs[i], rewrite(g, fs[i].val, messageOf(md, fs[i].num), here, edit))
	return join(fs)
}

// shuffle reorders the fields of b and, recursively, of every message in
// it.
func shuffle(g *gen, b []byte, md protoreflect.MessageDescriptor) []byte {
	fs, ok := split(b)
	if !ok {
		return b
	}
	for i, f := range fs {
		if f.typ == protowire.BytesType && messageOf(md, f.num) != nil {
			fs[i] = withContent(f, shuffle(g, f.val, messageOf(md, f.num)))
		}
	}
	g.r.Shuffle(len(fs), func(i, j int) { fs[i], fs[j] = fs[j], fs[i] })
	return join(fs)
}

// duplicate repeats one field of b somewhere among its fields, at some
// depth: a scalar given twice, a message merged, a map entry twice.
func duplicate(g *gen, b []byte, md protoreflect.MessageDescriptor) []byte {
	return rewrite(g, b, md, 0.4, func(fs []wireField, _ protoreflect.MessageDescriptor) []wireField {
		if len(fs) == 0 {
			return fs
		}
		f := fs[g.r.IntN(len(fs))]
		at := g.r.IntN(len(fs) + 1)
		return append(fs[:at:at], append([]wireField{f}, fs[at:]...)...)
	})
}

// drop removes one field of b at some depth: a map entry without its
// key or value, a message without one of its fields.
func drop(g *gen, b []byte, md protoreflect.MessageDescriptor) []byte {
	return rewrite(g, b, md, 0.4, func(fs []wireField, _ protoreflect.MessageDescriptor) []wireField {
		if len(fs) == 0 {
			return fs
		}
		i := g.r.IntN(len(fs))
		return append(fs[:i:i], fs[i+1:]...)
	})
}

// padVarint re-encodes one tag or length of b at some depth with more
// bytes than it needs, which protobuf accepts.
func padVarint(g *gen, b []byte, md protoreflect.MessageDescriptor) []byte {
	return rewrite(g, b, md, 0.4, func(fs []wireField, _ protoreflect.MessageDescriptor) []wireField {
		if len(fs) == 0 {
			return fs
		}
		i := g.r.IntN(len(fs))
		f := fs[i]
		if f.typ == protowire.BytesType && g.chance(0.5) {
			f.pre = pad(f.pre, 1+g.r.IntN(3))
		} else {
			f.tag = pad(f.tag, 1+g.r.IntN(3))
		}
		fs[i] = f
		return fs
	})
}

// pad is the varint v with extra bytes, at most 10 in all.
func pad(v []byte, extra int) []byte {
	if len(v)+extra > maxVarintLen {
		extra = maxVarintLen - len(v)
	}
	if extra <= 0 {
		return v
	}
	out := append([]byte(nil), v...)
	out[len(out)-1] |= 0x80
	for range extra - 1 {
		out = append(out, 0x80)
	}
	return append(out, 0x00)
}

// foreign adds to b, at some depth, a field the decoder does not expect
// there: an unknown number, a known one in another wire type, or a
// group.
func foreign(g *gen, b []byte, md protoreflect.MessageDescriptor) []byte {
	return rewrite(g, b, md, 0.4, func(fs []wireField, md protoreflect.MessageDescriptor) []wireField {
		num := protowire.Number(1 + g.r.IntN(16))
		var f []byte
		switch g.r.IntN(5) {
		case 0:
			f = protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), g.r.Uint64())
		case 1:
			f = protowire.AppendFixed64(protowire.AppendTag(nil, num, protowire.Fixed64Type), g.r.Uint64())
		case 2:
			f = protowire.AppendFixed32(protowire.AppendTag(nil, num, protowire.Fixed32Type), g.r.Uint32())
		case 3:
			f = protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), []byte{0x08, 0x01})
		case 4:
			f = protowire.AppendTag(protowire.AppendTag(nil, num, protowire.StartGroupType), num, protowire.EndGroupType)
		}
		add, _ := split(f)
		at := g.r.IntN(len(fs) + 1)
		return append(fs[:at:at], append(add, fs[at:]...)...)
	})
}

// badUTF8 puts a byte that is never valid UTF-8 into one
// length-delimited field of b that is not a message, at some depth.
func badUTF8(g *gen, b []byte, md protoreflect.MessageDescriptor) []byte {
	return rewrite(g, b, md, 0.4, func(fs []wireField, md protoreflect.MessageDescriptor) []wireField {
		var leaves []int
		for i, f := range fs {
			if f.typ == protowire.BytesType && messageOf(md, f.num) == nil {
				leaves = append(leaves, i)
			}
		}
		if len(leaves) == 0 {
			return fs
		}
		i := leaves[g.r.IntN(len(leaves))]
		v := append([]byte(nil), fs[i].val...)
		at := g.r.IntN(len(v) + 1)
		v = append(v[:at:at], append([]byte{0xff}, v[at:]...)...)
		fs[i] = withContent(fs[i], v)
		return fs
	})
}

// maxVarintLen is the most bytes a varint takes.
const maxVarintLen = 10

// retyped is b with one field, at any depth, given each other wire type
// in turn (its value replaced by one of that type): every variant.
func retyped(b []byte, md protoreflect.MessageDescriptor) [][]byte {
	fs, ok := split(b)
	if !ok {
		return nil
	}
	with := func(i int, f wireField) []byte {
		c := append([]wireField(nil), fs...)
		c[i] = f
		return join(c)
	}
	var out [][]byte
	for i, f := range fs {
		for _, typ := range []protowire.Type{protowire.VarintType, protowire.Fixed32Type, protowire.Fixed64Type, protowire.BytesType, protowire.StartGroupType} {
			if typ == f.typ {
				continue
			}
			alt, _ := split(otherValue(f.num, typ))
			out = append(out, with(i, alt[0]))
		}
		if md := messageOf(md, f.num); f.typ == protowire.BytesType && md != nil {
			for _, inner := range retyped(f.val, md) {
				out = append(out, with(i, withContent(f, inner)))
			}
		}
	}
	return out
}

// otherValue is field num with a value of wire type typ.
func otherValue(num protowire.Number, typ protowire.Type) []byte {
	b := protowire.AppendTag(nil, num, typ)
	switch typ {
	case protowire.VarintType:
		return protowire.AppendVarint(b, 1)
	case protowire.Fixed32Type:
		return protowire.AppendFixed32(b, 1)
	case protowire.Fixed64Type:
		return protowire.AppendFixed64(b, 1)
	case protowire.BytesType:
		return protowire.AppendBytes(b, nil)
	}
	return protowire.AppendTag(b, num, protowire.EndGroupType)
}
