package wiredecode

import (
	"google.golang.org/protobuf/encoding/protowire"

	"math"

	"google.golang.org/protobuf/types/known/structpb"
)

// google.protobuf.Struct, Value and ListValue (struct.proto).

// decodeStruct merges the Struct b encodes into m: fields (1), a
// map<string, Value>.
func (d *msg) decodeStruct(b []byte, m *structpb.Struct, depth int) bool {
	if depth >= maxDepth {
		return false
	}
	var batch []structpb.Value // the entries' values, allocated at once
	return messageFields(b, func(num protowire.Number, e []byte) bool {
		if num != 1 {
			return false
		}
		if len(batch) == 0 {
			c := count(b, 1) // every field 1 of b, this one included
			batch = make([]structpb.Value, c)
			if m.Fields == nil {
				m.Fields = make(map[string]*structpb.Value, c)
			}
		}
		v := &batch[0]
		batch = batch[1:]
		k, ok := d.valueEntry(e, v, depth+1)
		if !ok {
			return false
		}
		m.Fields[k] = v
		return true
	})
}

// valueEntry decodes a map<string, Value> entry into its key and v (a
// fresh Value, left empty when the entry has none; a value given twice
// is merged).
func (d *msg) valueEntry(b []byte, v *structpb.Value, depth int) (string, bool) {
	var k string
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 || typ != bytesType {
			return "", false
		}
		b = b[n:]
		switch num {
		case 1:
			k, n = d.str(b)
		case 2:
			var e []byte
			if e, n = delimited(b); n >= 0 && !d.decodeValue(e, v, depth) {
				return "", false
			}
		default:
			return "", false
		}
		if n < 0 {
			return "", false
		}
		b = b[n:]
	}
	return k, true
}

// decodeValue merges the Value b encodes into m: the kind oneof, the
// last one winning, a struct_value or list_value after one of the same
// kind merged into it.
func (d *msg) decodeValue(b []byte, m *structpb.Value, depth int) bool {
	if depth >= maxDepth {
		return false
	}
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 3 && typ == bytesType:
			var s string
			if s, n = d.str(b); n >= 0 {
				m.Kind = &structpb.Value_StringValue{StringValue: s}
			}
		case num == 2 && typ == fixed64Type:
			var x uint64
			if x, n = fixed64(b); n >= 0 {
				m.Kind = &structpb.Value_NumberValue{NumberValue: math.Float64frombits(x)}
			}
		case num == 4 && typ == varintType:
			var x uint64
			if x, n = varint(b); n >= 0 {
				m.Kind = &structpb.Value_BoolValue{BoolValue: x != 0}
			}
		case num == 1 && typ == varintType:
			var x uint64
			if x, n = varint(b); n >= 0 {
				m.Kind = &structpb.Value_NullValue{NullValue: structpb.NullValue(int32(x))}
			}
		case num == 5 && typ == bytesType:
			var e []byte
			if e, n = delimited(b); n < 0 {
				return false
			}
			k := oneof[structpb.Value_StructValue](m.Kind)
			if !d.decodeStruct(e, orNew(&k.StructValue), depth+1) {
				return false
			}
			m.Kind = k
		case num == 6 && typ == bytesType:
			var e []byte
			if e, n = delimited(b); n < 0 {
				return false
			}
			k := oneof[structpb.Value_ListValue](m.Kind)
			if !d.decodeList(e, orNew(&k.ListValue), depth+1) {
				return false
			}
			m.Kind = k
		default:
			return false
		}
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// decodeList merges the ListValue b encodes into m: values (1), repeated
// Value, appended.
func (d *msg) decodeList(b []byte, m *structpb.ListValue, depth int) bool {
	if depth >= maxDepth {
		return false
	}
	var batch []structpb.Value
	return messageFields(b, func(num protowire.Number, e []byte) bool {
		if num != 1 {
			return false
		}
		if len(batch) == 0 {
			c := count(b, 1) // every field 1 of b, this one included
			batch = make([]structpb.Value, c)
			if m.Values == nil {
				m.Values = make([]*structpb.Value, 0, c)
			}
		}
		v := &batch[0]
		batch = batch[1:]
		if !d.decodeValue(e, v, depth+1) {
			return false
		}
		m.Values = append(m.Values, v)
		return true
	})
}

// structEntry decodes a map<string, Struct> entry (filter_metadata,
// attributes) into its key and value: an empty Struct when the entry has
// none, a value given twice merged.
func (d *msg) structEntry(b []byte, depth int) (string, *structpb.Struct, bool) {
	var k string
	v := &structpb.Struct{}
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 || typ != bytesType {
			return "", nil, false
		}
		b = b[n:]
		switch num {
		case 1:
			k, n = d.str(b)
		case 2:
			var e []byte
			if e, n = delimited(b); n >= 0 && !d.decodeStruct(e, v, depth) {
				return "", nil, false
			}
		default:
			return "", nil, false
		}
		if n < 0 {
			return "", nil, false
		}
		b = b[n:]
	}
	return k, v, true
}

// decodeStructMap merges a map<string, Struct> entry into *m, making the
// map when it is nil; a later key replaces an earlier one.
func (d *msg) decodeStructMap(e []byte, m *map[string]*structpb.Struct, depth int) bool {
	k, v, ok := d.structEntry(e, depth)
	if !ok {
		return false
	}
	if *m == nil {
		*m = make(map[string]*structpb.Struct, 1)
	}
	(*m)[k] = v
	return true
}
