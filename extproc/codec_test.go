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
	"google.golang.org/protobuf/types/known/anypb"
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

// TestCodecFallback: what the hand decoder leaves to proto — an unknown
// field, typed metadata, a string that is not UTF-8 — Codec decodes as
// proto.Unmarshal does, unknown fields kept, errors returned.
func TestCodecFallback(t *testing.T) {
	typed := &extprocsvc.ProcessingRequest{
		Request:         &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{}},
		MetadataContext: &corev3.Metadata{TypedFilterMetadata: map[string]*anypb.Any{"t": {TypeUrl: "type.googleapis.com/x"}}},
	}
	headers, err := proto.Marshal(codecRequests()[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{
		mustMarshal(t, typed),
		append(bytes.Clone(headers), 0xf8, 0x06, 0x01),                     // field 111, a varint
		{0x12, 0x06, 0x0a, 0x04, 0x0a, 0x02, 0x0a, 0xff},                   // a header key of 0xff
		append(mustMarshal(t, codecRequests()[3]), 0x62, 0x02, 0x08, 0x01), // flow_control_init
	} {
		checkAgainstProto(t, b)
	}
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// codecCheck is a CheckRequest as Envoy builds it.
func codecCheck() *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}}}}},
		Destination: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 10000}}}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "1", Method: "POST", Path: "/v1/chat/completions", Host: "gateway.local", Scheme: "http", Protocol: "HTTP/1.1",
			Headers: map[string]string{":method": "POST", ":path": "/v1/chat/completions", "authorization": "Bearer sk-x", "x-request-id": "1"},
		}},
	}}
}

// TestCodecCheckRequest: Codec decodes a CheckRequest as proto.Unmarshal
// does — whole, at every truncation, with every byte changed, with an
// unknown field — and fails where it fails.
func TestCodecCheckRequest(t *testing.T) {
	b := mustMarshal(t, codecCheck())
	cases := [][]byte{b, append(bytes.Clone(b), 0x10, 0x01), {0x0a, 0x02, 0x22, 0x00}}
	for i := range len(b) {
		cases = append(cases, b[:i])
		for _, x := range []byte{0x01, 0x80, 0xff} {
			c := bytes.Clone(b)
			c[i] ^= x
			cases = append(cases, c)
		}
	}
	for _, c := range cases {
		want := &authv3.CheckRequest{}
		werr := proto.Unmarshal(c, want)
		got := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{ContextExtensions: map[string]string{"stale": "x"}}}
		err := Codec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bytes.Clone(c))}, got)
		switch {
		case (err != nil) != (werr != nil):
			t.Errorf("% x: error %v, proto.Unmarshal's %v", c, err, werr)
		case err == nil && !proto.Equal(got, want):
			t.Errorf("% x: decoded\n%v\nwant\n%v", c, got, want)
		}
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

// benchRequests are what the server receives for one request in
// bench/extprocload's closed-max scenario, as Envoy sends them: the
// CheckRequest, then the request headers (15 headers, the forwarded
// ext_authz metadata with keyring.Principal.Metadata's fields and
// ext_authz_duration) and a response body chunk carrying the same
// metadata.
func benchRequests() (check, headers, body proto.Message) {
	kv := []string{
		":authority", "gateway.local", ":path", "/v1/chat/completions", ":method", "POST", ":scheme", "https",
		"authorization", "Bearer sk-slc-4f9a2c1e8b7d6a5f4e3d2c1b0a9f8e7d", "content-type", "application/json",
		"content-length", "1843", "user-agent", "OpenAI/Python 1.54.3", "accept", "application/json",
		"accept-encoding", "gzip, deflate", "x-stainless-lang", "python", "x-stainless-os", "Linux",
		"x-forwarded-proto", "https", "x-forwarded-for", "10.1.2.3", "x-request-id", "3f1c9a6e-8d2b-4f7a-9c1e-5b6d7e8f9a0b",
	}
	hm := &corev3.HeaderMap{}
	hs := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
		hs[kv[i]] = kv[i+1]
	}
	authz, _ := structpb.NewStruct(map[string]any{
		"key_id": "k_01JZ6Q2N7W4W5XKX3Y2D8M9P0R", "key_prefix": "sk-slc-4f9a", "key_name": "ci-runner",
		"team": "platform", "org": "acme", "key_models": []any{"gpt-4o*", "claude-*"}, "team_models": []any{"*"},
		"ext_authz_duration": 1.0,
	})
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.AuthzNamespace: authz}}
	c := codecCheck()
	c.Attributes.Request.Http.Headers = hs
	return c,
		&extprocsvc.ProcessingRequest{
			Request:         &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{Headers: hm}},
			MetadataContext: md,
			ProtocolConfig:  &extprocsvc.ProtocolConfiguration{RequestBodyMode: 1, ResponseBodyMode: 2},
		},
		&extprocsvc.ProcessingRequest{
			Request:         &extprocsvc.ProcessingRequest_ResponseBody{ResponseBody: &extprocsvc.HttpBody{Body: []byte("data: {\"id\":\"c1\"}\n\n")}},
			MetadataContext: md,
		}
}

// BenchmarkCodecUnmarshal: the codec before the hand decoder (proto:
// proto.Unmarshal, for a ProcessingRequest with the metadata skipped
// where it is skipped) and now (codec), on each message of a request.
func BenchmarkCodecUnmarshal(b *testing.B) {
	check, headers, body := benchRequests()
	for _, c := range []struct {
		name string
		m    proto.Message
	}{{"check_request", check}, {"request_headers", headers}, {"response_body", body}} {
		in := mustMarshal(b, c.m)
		old := func(out proto.Message) error {
			if r, ok := out.(*extprocsvc.ProcessingRequest); ok {
				return unmarshalProcessingRequest(in, r)
			}
			return proto.Unmarshal(in, out)
		}
		b.Run(c.name+"/proto", func(b *testing.B) {
			b.ReportAllocs()
			out := c.m.ProtoReflect().New().Interface()
			for b.Loop() {
				if err := old(out); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/codec", func(b *testing.B) {
			b.ReportAllocs()
			out := c.m.ProtoReflect().New().Interface()
			data := mem.BufferSlice{mem.SliceBuffer(in)}
			for b.Loop() {
				if err := (Codec{}).Unmarshal(data, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestUnmarshalProcessingRequest: the fallback that skips metadata and
// attributes, called directly — every kind of message, alone, with an
// unknown field after it, and in pieces in another order — decodes what
// proto.Unmarshal decodes from the message less those fields, the fields
// before and after the skipped ones included.
func TestUnmarshalProcessingRequest(t *testing.T) {
	for _, r := range codecRequests() {
		whole := mustMarshal(t, r)
		meta := mustMarshal(t, &extprocsvc.ProcessingRequest{MetadataContext: r.MetadataContext})
		rest := mustMarshal(t, &extprocsvc.ProcessingRequest{Request: r.Request, ObservabilityMode: true})
		for _, b := range [][]byte{
			whole,
			append(bytes.Clone(whole), 0xf8, 0x06, 0x01),
			append(append(bytes.Clone(rest), meta...), rest...),
			append(append(bytes.Clone(meta), rest...), meta...),
		} {
			want, ok := expected(b)
			if !ok {
				t.Fatalf("% x: proto.Unmarshal fails", b)
			}
			got := &extprocsvc.ProcessingRequest{MetadataContext: codecMetadata()}
			if err := unmarshalProcessingRequest(b, got); err != nil {
				t.Fatalf("%T: %v", r.GetRequest(), err)
			}
			if !proto.Equal(got, want) {
				t.Errorf("%T, % x: decoded\n%v\nwant\n%v", r.GetRequest(), b, got, want)
			}
		}
	}
}
