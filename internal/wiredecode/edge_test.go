package wiredecode

import (
	"bytes"
	"strings"
	"testing"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// Hand-built encodings of protobuf's corner cases.

func fLen(num protowire.Number, parts ...[]byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), bytes.Join(parts, nil))
}

func fStr(num protowire.Number, s string) []byte { return fLen(num, []byte(s)) }

func fVar(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

func fF64(num protowire.Number, v uint64) []byte {
	return protowire.AppendFixed64(protowire.AppendTag(nil, num, protowire.Fixed64Type), v)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// Builders of the messages the cases need, each taking its encoded
// fields.
func pr(fields ...[]byte) []byte                       { return cat(fields...) }
func reqHeaders(f ...[]byte) []byte                    { return fLen(2, f...) }
func respHeaders(f ...[]byte) []byte                   { return fLen(3, f...) }
func reqBody(f ...[]byte) []byte                       { return fLen(4, f...) }
func headerMapF(f ...[]byte) []byte                    { return fLen(1, f...) } // HttpHeaders.headers
func headerValue(f ...[]byte) []byte                   { return fLen(1, f...) } // HeaderMap.headers
func metadataCtx(f ...[]byte) []byte                   { return fLen(8, f...) }
func filterMD(f ...[]byte) []byte                      { return fLen(1, f...) } // Metadata.filter_metadata entry
func structF(num protowire.Number, f ...[]byte) []byte { return fLen(num, f...) }
func fieldsEntry(f ...[]byte) []byte                   { return fLen(1, f...) } // Struct.fields entry
func valueF(f ...[]byte) []byte                        { return fLen(2, f...) } // an entry's value
func check(f ...[]byte) []byte                         { return fLen(1, f...) } // CheckRequest.attributes
func httpReq(f ...[]byte) []byte                       { return fLen(4, fLen(2, f...)) }

// nested is a metadata_context whose Struct nests depth levels. It is
// built inside out, each level a prefix, so that it takes linear time.
func nested(depth int) []byte {
	inner := fVar(4, 1) // a bool Value
	prefixes := make([][]byte, 0, depth)
	size := len(inner)
	for range depth { // struct_value{fields{"k": value}}
		entry := protowire.AppendTag(nil, 1, protowire.BytesType) // fields
		key := fStr(1, "k")
		val := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.BytesType), uint64(size))
		entryLen := len(key) + len(val) + size
		entry = protowire.AppendVarint(entry, uint64(entryLen))
		p := protowire.AppendVarint(protowire.AppendTag(nil, 5, protowire.BytesType), uint64(len(entry)+entryLen))
		p = append(append(append(p, entry...), key...), val...)
		prefixes = append(prefixes, p)
		size += len(p)
	}
	var v []byte
	for i := len(prefixes) - 1; i >= 0; i-- {
		v = append(v, prefixes[i]...)
	}
	v = append(v, inner...)
	return metadataCtx(filterMD(fStr(1, "ns"), structF(2, fieldsEntry(fStr(1, "k"), valueF(v)))))
}

func TestCornerCases(t *testing.T) {
	hv := headerValue(fStr(1, "k"), fStr(3, "v"))
	for _, c := range []struct {
		name  string
		b     []byte
		check bool // a CheckRequest, not a ProcessingRequest
		ok    bool // the decoder decodes it (else leaves it to proto)
	}{
		{name: "empty", b: nil, ok: true},
		{name: "map entry without key", b: pr(reqHeaders(), metadataCtx(filterMD(structF(2, fieldsEntry(valueF(fStr(3, "v"))))))), ok: true},
		{name: "map entry without value", b: pr(reqHeaders(), metadataCtx(filterMD(fStr(1, "ns"), structF(2, fieldsEntry(fStr(1, "k")))))), ok: true},
		{name: "map entry empty", b: pr(reqHeaders(), metadataCtx(filterMD())), ok: true},
		{name: "map entry value first, key twice", b: pr(reqHeaders(), metadataCtx(filterMD(structF(2), fStr(1, "a"), fStr(1, "b")))), ok: true},
		{name: "map entry value twice merges", b: pr(reqHeaders(), metadataCtx(filterMD(fStr(1, "ns"),
			structF(2, fieldsEntry(fStr(1, "a"), valueF(fVar(4, 1)))), structF(2, fieldsEntry(fStr(1, "b"), valueF(fStr(3, "x"))))))), ok: true},
		{name: "Value given twice in an entry: last kind wins", b: pr(reqHeaders(), metadataCtx(filterMD(fStr(1, "ns"),
			structF(2, fieldsEntry(fStr(1, "a"), valueF(fVar(4, 1)), valueF(fStr(3, "x"))))))), ok: true},
		{name: "duplicate map key: later wins", b: pr(reqHeaders(), metadataCtx(filterMD(fStr(1, "ns"), structF(2, fieldsEntry(fStr(1, "a"), valueF(fVar(4, 1))))),
			filterMD(fStr(1, "ns"), structF(2, fieldsEntry(fStr(1, "b"), valueF(fVar(4, 0))))))), ok: true},
		{name: "metadata_context twice merges", b: pr(metadataCtx(filterMD(fStr(1, "a"))), reqHeaders(), metadataCtx(filterMD(fStr(1, "b")))), ok: true},
		{name: "struct_value, string, struct_value: only the last", b: pr(reqHeaders(), metadataCtx(filterMD(fStr(1, "ns"), structF(2, fieldsEntry(fStr(1, "a"), valueF(
			fLen(5, fieldsEntry(fStr(1, "x"))), fStr(3, "s"), fLen(5, fieldsEntry(fStr(1, "y"))))))))), ok: true},
		{name: "struct_value twice merges", b: pr(reqHeaders(), metadataCtx(filterMD(fStr(1, "ns"), structF(2, fieldsEntry(fStr(1, "a"), valueF(
			fLen(5, fieldsEntry(fStr(1, "x"))), fLen(5, fieldsEntry(fStr(1, "y"))))))))), ok: true},
		{name: "list_value twice appends", b: pr(reqHeaders(), metadataCtx(filterMD(fStr(1, "ns"), structF(2, fieldsEntry(fStr(1, "a"), valueF(
			fLen(6, fLen(1, fVar(4, 1))), fLen(6, fLen(1, fStr(3, "z"))))))))), ok: true},
		{name: "number NaN and -0, null_value out of range", b: pr(reqHeaders(), metadataCtx(filterMD(fStr(1, "ns"), structF(2,
			fieldsEntry(fStr(1, "n"), valueF(fF64(2, 0x7ff8000000000001))), fieldsEntry(fStr(1, "z"), valueF(fF64(2, 1<<63))),
			fieldsEntry(fStr(1, "u"), valueF(fVar(1, 1<<40+7))))))), ok: true},
		{name: "bool varint 2 and 2^63", b: pr(reqHeaders(fVar(3, 2)), fVar(10, 1<<63)), ok: true},
		{name: "headers oneof twice merges", b: pr(reqHeaders(headerMapF(hv)), reqHeaders(headerMapF(hv), fVar(3, 1))), ok: true},
		{name: "oneof switches and back: fresh", b: pr(reqHeaders(headerMapF(hv)), reqBody(fStr(1, "b")), reqHeaders(fVar(3, 1))), ok: true},
		{name: "body then headers", b: pr(reqBody(fStr(1, "b"), fVar(2, 1)), respHeaders(headerMapF(hv))), ok: true},
		{name: "body twice: last bytes", b: pr(reqBody(fStr(1, "b")), reqBody(fStr(1, ""))), ok: true},
		{name: "header value and raw value", b: pr(reqHeaders(headerMapF(headerValue(fStr(2, "v"), fStr(3, ""), fStr(1, "k"), fStr(1, "k2"))))), ok: true},
		{name: "deprecated HttpHeaders.attributes", b: pr(respHeaders(fLen(2, fStr(1, "a"), fLen(2, fieldsEntry(fStr(1, "x")))))), ok: true},
		{name: "attributes twice, same key", b: pr(reqHeaders(), fLen(9, fStr(1, "a"), fLen(2)), fLen(9, fStr(1, "a"), fLen(2, fieldsEntry(fStr(1, "x"))))), ok: true},
		{name: "protocol_config twice merges, enum beyond int32", b: pr(fLen(11, fVar(1, 2)), reqHeaders(), fLen(11, fVar(2, 1<<35|3), fVar(3, 1))), ok: true},
		{name: "non-minimal varints", b: []byte{0x92, 0x00, 0x83, 0x80, 0x00, 0x18, 0x81, 0x00}, ok: true},
		{name: "non-minimal length one short", b: []byte{0x92, 0x00, 0x82, 0x80, 0x00, 0x18, 0x81, 0x00}, ok: false},
		{name: "nesting within the limit", b: pr(reqHeaders(), nested(40)), ok: true},
		{name: "nesting beyond the limit", b: pr(reqHeaders(), nested(maxDepth)), ok: false},
		{name: "nesting beyond proto's limit", b: pr(reqHeaders(), nested(protowire.DefaultRecursionLimit)), ok: false},
		{name: "metadata_context as a varint", b: pr(reqHeaders(), fVar(8, 1)), ok: false},
		{name: "metadata_context as a varint, no headers", b: pr(reqBody(), fVar(8, 1)), ok: false}, // skipContext decodes it
		{name: "metadata_context as a group, no headers", b: pr(reqBody(), []byte{0x43, 0x44}), ok: false},
		{name: "typed_filter_metadata", b: pr(reqHeaders(), metadataCtx(fLen(2, fStr(1, "t"), fLen(2, fStr(1, "type.googleapis.com/x"))))), ok: false},
		{name: "flow_control_init", b: pr(reqHeaders(), fLen(12, fVar(1, 5))), ok: false},
		{name: "client_window_update", b: pr(reqBody(), fLen(13, fVar(1, 5))), ok: false},
		{name: "unknown top-level field", b: pr(reqHeaders(), fVar(99, 1)), ok: false},
		{name: "unknown field in a map entry", b: pr(reqHeaders(), metadataCtx(filterMD(fStr(1, "a"), fVar(3, 1)))), ok: false},
		{name: "map key as a varint", b: pr(reqHeaders(), metadataCtx(filterMD(fVar(1, 1)))), ok: false},
		{name: "map value as a varint", b: pr(reqHeaders(), metadataCtx(filterMD(fStr(1, "a"), fVar(2, 1)))), ok: false},
		{name: "packed-looking end_of_stream", b: pr(reqHeaders(fLen(3, []byte{1}))), ok: false},
		{name: "null_value as fixed64", b: pr(reqHeaders(), metadataCtx(filterMD(fStr(1, "ns"), structF(2, fieldsEntry(fStr(1, "a"), valueF(fF64(1, 0))))))), ok: false},
		{name: "number_value as a varint", b: pr(reqHeaders(), metadataCtx(filterMD(fStr(1, "ns"), structF(2, fieldsEntry(fStr(1, "a"), valueF(fVar(2, 0))))))), ok: false},
		{name: "string_value as a varint", b: pr(reqHeaders(), metadataCtx(filterMD(fStr(1, "ns"), structF(2, fieldsEntry(fStr(1, "a"), valueF(fVar(3, 1))))))), ok: false},
		{name: "invalid UTF-8 header key", b: pr(reqHeaders(headerMapF(headerValue(fStr(1, "\xff"))))), ok: false},
		{name: "invalid UTF-8 raw_value (bytes)", b: pr(reqHeaders(headerMapF(headerValue(fStr(3, "\xff"))))), ok: true},
		{name: "invalid UTF-8 Struct key", b: pr(reqHeaders(), metadataCtx(filterMD(fStr(1, "ns"), structF(2, fieldsEntry(fStr(1, "\xc0\x80")))))), ok: false},
		{name: "invalid UTF-8 in a skipped field", b: pr(reqBody(), metadataCtx(filterMD(fStr(1, "\xff")))), ok: false},
		{name: "group in a header value", b: pr(reqHeaders(headerMapF(headerValue([]byte{0x23, 0x24})))), ok: false},
		{name: "end group without start", b: []byte{0x0c}, ok: false},
		{name: "field number 0", b: []byte{0x02, 0x00}, ok: false},
		{name: "field number beyond the maximum", b: []byte{0xfa, 0xff, 0xff, 0xff, 0x7f, 0x00}, ok: false},
		{name: "varint of 11 bytes", b: pr(append([]byte{0x50}, bytes.Repeat([]byte{0x80}, 10)...)), ok: false},
		{name: "length beyond the end", b: []byte{0x12, 0x05, 0x0a}, ok: false},
		{name: "huge length", b: []byte{0x12, 0xff, 0xff, 0xff, 0xff, 0x0f}, ok: false},
		{name: "fixed64 cut short", b: pr(reqHeaders(), metadataCtx(filterMD(fStr(1, "ns"), structF(2, fieldsEntry(fStr(1, "a"), valueF([]byte{0x11, 0, 0}))))))},

		{name: "check: empty", check: true, ok: true},
		{name: "check: attributes twice merge", check: true, b: cat(check(httpReq(fStr(1, "id"), fLen(3, fStr(1, "a"), fStr(2, "1")))), check(httpReq(fLen(3, fStr(1, "b"), fStr(2, "2")), fVar(9, 1<<63)))), ok: true},
		{name: "check: header entry without value, twice", check: true, b: check(httpReq(fLen(3, fStr(1, "a")), fLen(3, fStr(2, "v"), fStr(1, "a"), fStr(2, "w")))), ok: true},
		{name: "check: header entry empty", check: true, b: check(httpReq(fLen(3))), ok: true},
		{name: "check: address oneof switches", check: true, b: check(fLen(1, fLen(1, fLen(1, fStr(2, "1.2.3.4"), fVar(3, 1<<33|80)), fLen(2, fStr(1, "/p")), fLen(1, fVar(1, 1))))), ok: true},
		{name: "check: port value then named port", check: true, b: check(fLen(2, fLen(1, fLen(1, fVar(3, 80), fStr(4, "http"))))), ok: true},
		{name: "check: socket address twice merges", check: true, b: check(fLen(2, fLen(1, fLen(1, fStr(2, "a"))), fLen(1, fLen(1, fVar(3, 80))))), ok: true},
		{name: "check: time nanos beyond int32", check: true, b: check(fLen(4, fLen(1, fVar(1, 1<<63), fVar(2, 1<<40|1<<31|5)))), ok: true},
		{name: "check: peer labels and principal", check: true, b: check(fLen(1, fLen(3, fStr(1, "app")), fStr(4, "p"), fLen(3, fStr(2, "x")))), ok: true},
		{name: "check: invalid UTF-8 in body (a string)", check: true, b: check(httpReq(fStr(11, "\xff"))), ok: false},
		{name: "check: invalid UTF-8 in raw_body", check: true, b: check(httpReq(fStr(12, "\xff"))), ok: true},
		{name: "check: invalid UTF-8 header value", check: true, b: check(httpReq(fLen(3, fStr(1, "a"), fStr(2, "\xff")))), ok: false},
		{name: "check: unknown attribute field 3", check: true, b: check(fLen(3)), ok: false},
		{name: "check: size as bytes", check: true, b: check(httpReq(fStr(9, "1"))), ok: false},
		{name: "check: typed route metadata", check: true, b: check(fLen(13, fLen(2, fStr(1, "t")))), ok: false},
		{name: "check: unknown top-level field", check: true, b: fVar(2, 1), ok: false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ok bool
			if c.check {
				ok = checkCheckRequest(t, c.b)
			} else {
				ok = checkProcessingRequest(t, c.b)
			}
			if ok != c.ok {
				t.Errorf("% x: decoded %v, want %v", c.b, ok, c.ok)
			}
		})
	}
}

// TestSharedCopiesStayApart: the strings and bytes decoded from one
// message share its copies, yet each is its own: an append of any length
// to one header's raw_value, or a write into it, changes no other value,
// and a message read from the middle of a larger buffer (its capacity
// running past it) decodes the same.
func TestSharedCopiesStayApart(t *testing.T) {
	hv := func(k, v string) []byte { return fLen(1, fStr(1, k), fLen(3, []byte(v))) }
	m := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), // request_headers
		fLen(1, hv(":path", "/v1/chat/completions"), hv("authorization", "Bearer sk-1"), hv("x-request-id", "r-1"), hv("accept", "*/*")))
	padded := append(append([]byte("junk before"), m...), "junk after"...)
	for name, b := range map[string][]byte{"alone": m, "in a larger buffer": padded[len("junk before") : len("junk before")+len(m)]} {
		for grow := range 80 {
			for i := range 4 {
				r := &extprocsvc.ProcessingRequest{}
				if !ProcessingRequest(b, r, true) {
					t.Fatalf("%s: not decoded", name)
				}
				hs := r.GetRequestHeaders().GetHeaders().GetHeaders()
				if len(hs) != 4 {
					t.Fatalf("%s: %d headers, want 4", name, len(hs))
				}
				want := []string{":path=/v1/chat/completions", "authorization=Bearer sk-1", "x-request-id=r-1", "accept=*/*"}
				more := strings.Repeat("+", grow)
				hs[i].RawValue = append(hs[i].RawValue, more...)
				hs[i].RawValue[0] = '#'
				want[i] = hs[i].GetKey() + "=#" + want[i][len(hs[i].GetKey())+2:] + more
				got := []string{}
				for _, h := range hs {
					got = append(got, h.GetKey()+"="+string(h.GetRawValue()))
				}
				if strings.Join(got, " ") != strings.Join(want, " ") {
					t.Fatalf("%s: header %d grown by %d and written: %q, want %q", name, i, grow, got, want)
				}
			}
		}
	}
}
