package extproc

import (
	"bytes"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/chain"
)

func codecMetadata() *corev3.Metadata {
	s, _ := structpb.NewStruct(map[string]any{"key_id": "k1", "team": "t", "key_models": []any{"gpt-*"}})
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.AuthzNamespace: s}}
}

func codecAttributes() map[string]*structpb.Struct {
	s, _ := structpb.NewStruct(map[string]any{"upstream.address": "127.0.0.1:1"})
	return map[string]*structpb.Struct{chain.ExtProcAttributesKey: s}
}

// codecRequests are ProcessingRequests of every kind Envoy sends, each
// with the forwarded metadata and attributes.
func codecRequests() []*extprocsvc.ProcessingRequest {
	hdrs := &extprocsvc.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":path", RawValue: []byte("/v1/chat/completions")}, {Key: "x-request-id", RawValue: []byte("r1")}}}}
	body := &extprocsvc.HttpBody{Body: []byte(`data: {"x":1}` + "\n\n"), EndOfStream: true}
	var out []*extprocsvc.ProcessingRequest
	for _, r := range []*extprocsvc.ProcessingRequest{
		{Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: hdrs}},
		{Request: &extprocsvc.ProcessingRequest_RequestBody{RequestBody: body}},
		{Request: &extprocsvc.ProcessingRequest_ResponseHeaders{ResponseHeaders: hdrs}},
		{Request: &extprocsvc.ProcessingRequest_ResponseBody{ResponseBody: body}},
		{Request: &extprocsvc.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocsvc.HttpTrailers{}}},
	} {
		r.MetadataContext = codecMetadata()
		r.Attributes = codecAttributes()
		r.ObservabilityMode = true
		r.ProtocolConfig = &extprocsvc.ProtocolConfiguration{SendBodyWithoutWaitingForHeaderResponse: true}
		out = append(out, r)
	}
	return out
}

// expected is what Codec must decode b into, and ok false where it must
// fail: when b is a well-formed sequence of fields without
// request_headers, proto.Unmarshal's result for b less its
// metadata_context and attributes fields (whatever they hold: they are
// not read); otherwise proto.Unmarshal's result for b.
func expected(b []byte) (*extprocsvc.ProcessingRequest, bool) {
	if kept, ok := withoutSkipped(b); ok {
		b = kept
	}
	want := &extprocsvc.ProcessingRequest{}
	if err := proto.Unmarshal(b, want); err != nil {
		return nil, false
	}
	return want, true
}

// withoutSkipped is b without its top-level fields 8 and 9, if b is a
// well-formed field sequence without field 2.
func withoutSkipped(b []byte) ([]byte, bool) {
	var kept []byte
	for len(b) > 0 {
		n, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return nil, false
		}
		m := protowire.ConsumeFieldValue(n, typ, b[k:])
		if m < 0 || n == fieldRequestHeaders {
			return nil, false
		}
		if n != fieldMetadataContext && n != fieldAttributes {
			kept = append(kept, b[:k+m]...)
		}
		b = b[k+m:]
	}
	return kept, true
}

func decode(t testing.TB, b []byte) (*extprocsvc.ProcessingRequest, error) {
	t.Helper()
	got := &extprocsvc.ProcessingRequest{}
	err := Codec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bytes.Clone(b))}, got)
	return got, err
}

func TestCodecSkipsMetadataAfterRequestHeaders(t *testing.T) {
	for _, r := range codecRequests() {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decode(t, b)
		if err != nil {
			t.Fatalf("%T: %v", r.GetRequest(), err)
		}
		want, _ := expected(b)
		if !proto.Equal(got, want) {
			t.Errorf("%T: decoded\n%v\nwant\n%v", r.GetRequest(), got, want)
		}
		_, headers := r.GetRequest().(*extprocsvc.ProcessingRequest_RequestHeaders)
		if kept := got.GetMetadataContext() != nil && len(got.GetAttributes()) == 1; kept != headers {
			t.Errorf("%T: metadata and attributes kept %v, want %v", r.GetRequest(), kept, headers)
		}
		if !got.GetObservabilityMode() || !got.GetProtocolConfig().GetSendBodyWithoutWaitingForHeaderResponse() {
			t.Errorf("%T: lost the fields around the skipped ones: %v", r.GetRequest(), got)
		}
	}
}

// TestCodecFieldOrder: the skipped fields may come anywhere (protobuf
// allows any order, and a field repeated); what is kept is proto's
// result, and the decoded message replaces what the target held.
func TestCodecFieldOrder(t *testing.T) {
	r := codecRequests()[3] // a response body
	var parts [][]byte
	for _, m := range []*extprocsvc.ProcessingRequest{
		{MetadataContext: r.MetadataContext},
		{Request: r.Request},
		{Attributes: r.Attributes},
		{ObservabilityMode: true},
		{MetadataContext: r.MetadataContext},
		{ProtocolConfig: r.ProtocolConfig},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, b)
	}
	for _, order := range [][]int{{0, 1, 2, 3, 4, 5}, {1, 0, 3, 2, 5, 4}, {5, 4, 3, 2, 1, 0}, {0, 2, 4, 1, 3, 5}} {
		var b []byte
		for _, i := range order {
			b = append(b, parts[i]...)
		}
		got := &extprocsvc.ProcessingRequest{MetadataContext: codecMetadata(), ClientWindowUpdate: &extprocsvc.ProcessingRequest_ClientWindowUpdate{}}
		if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil {
			t.Fatal(err)
		}
		want, _ := expected(b)
		if !proto.Equal(got, want) || got.GetMetadataContext() != nil {
			t.Errorf("order %v: decoded\n%v\nwant\n%v", order, got, want)
		}
	}
}

// TestCodecMalformed: bytes proto.Unmarshal refuses, Codec refuses —
// but for what is inside a skipped field, which is not read — a
// truncation at every offset of every kind of message included.
func TestCodecMalformed(t *testing.T) {
	for _, r := range codecRequests() {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		for i := range len(b) {
			checkAgainstProto(t, b[:i])
		}
	}
	for _, b := range [][]byte{
		{0x42, 0x05, 0x0a},       // metadata_context longer than the bytes
		{0x42, 0x02, 0x0a, 0x7f}, // metadata_context holding a broken field: skipped
		{0x12, 0x02, 0x0a, 0x7f}, // request_headers holding a broken field
		{0x40, 0x01},             // metadata_context as a varint
		{0x4a, 0x80},             // attributes, a truncated length
		{0x2a, 0x00, 0x42, 0x00, 0xff},
		{0x42, 0x00, 0x0c}, // an end-group tag that no group opened
	} {
		checkAgainstProto(t, b)
	}
}

func checkAgainstProto(t *testing.T, b []byte) {
	t.Helper()
	want, ok := expected(b)
	got, err := decode(t, b)
	switch {
	case !ok && err == nil:
		t.Errorf("% x: decoded %v where proto.Unmarshal fails", b, got)
	case ok && err != nil:
		t.Errorf("% x: %v where proto.Unmarshal succeeds", b, err)
	case ok && !proto.Equal(got, want):
		t.Errorf("% x: decoded\n%v\nwant\n%v", b, got, want)
	}
}

// TestCodecMarshal: what Codec encodes, proto decodes to the same
// message, for the replies of both services and for a request.
func TestCodecMarshal(t *testing.T) {
	md, _ := structpb.NewStruct(map[string]any{"key_id": "k1", "n": 3.0, "list": []any{"a", true}})
	big := make([]byte, 64<<10) // above grpc-go's pooling threshold
	for _, m := range []proto.Message{
		&extprocsvc.ProcessingResponse{DynamicMetadata: md, Response: &extprocsvc.ProcessingResponse_RequestHeaders{
			RequestHeaders: &extprocsvc.HeadersResponse{Response: &extprocsvc.CommonResponse{
				HeaderMutation: &extprocsvc.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x", RawValue: []byte("y")}}}}}}}},
		&extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseBody{ResponseBody: &extprocsvc.BodyResponse{
			Response: &extprocsvc.CommonResponse{BodyMutation: &extprocsvc.BodyMutation{Mutation: &extprocsvc.BodyMutation_Body{Body: big}}}}}},
		&extprocsvc.ProcessingResponse{},
		&authv3.CheckResponse{DynamicMetadata: md},
		codecRequests()[0],
	} {
		data, err := Codec{}.Marshal(m)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		b := data.Materialize()
		data.Free()
		got := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(b, got); err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !proto.Equal(got, m) {
			t.Errorf("%T: round trip gave\n%v\nwant\n%v", m, got, m)
		}
	}
	if _, err := (Codec{}).Marshal("not a message"); err == nil {
		t.Error("Marshal of a string: no error")
	}
	if err := (Codec{}).Unmarshal(nil, new(int)); err == nil {
		t.Error("Unmarshal into an int: no error")
	}
}

// FuzzCodecUnmarshal: for any bytes, Codec decodes what proto.Unmarshal
// decodes (less the skipped fields), fails where it fails, and never
// panics.
func FuzzCodecUnmarshal(f *testing.F) {
	for _, r := range codecRequests() {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x42, 0x00, 0x0c})
	f.Fuzz(func(t *testing.T, b []byte) {
		checkAgainstProto(t, b)
	})
}
