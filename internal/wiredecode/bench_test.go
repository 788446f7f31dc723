package wiredecode

import (
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"
)

// BenchmarkDecode: proto.Unmarshal and the decoder on what the data-path
// server receives for every request: the request headers (15 headers,
// the forwarded ext_authz metadata with its 8 fields) and the
// CheckRequest (the headers map, the peers' addresses), and a response
// body chunk (whose metadata the decoder steps over, as the codec asks).
func BenchmarkDecode(b *testing.B) {
	for _, c := range []struct {
		name string
		m    proto.Message
	}{
		{"request_headers", requestHeaders()},
		{"check_request", checkRequest()},
		{"response_body", envoyRequests()[3]},
	} {
		in := marshal(b, c.m)
		b.Run(c.name+"/proto", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			out := c.m.ProtoReflect().New().Interface()
			for b.Loop() {
				if err := proto.Unmarshal(in, out); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/wiredecode", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			var ok bool
			switch c.m.(type) {
			case *extprocsvc.ProcessingRequest:
				out := &extprocsvc.ProcessingRequest{}
				for b.Loop() {
					ok = ProcessingRequest(in, out, true)
				}
			case *authv3.CheckRequest:
				out := &authv3.CheckRequest{}
				for b.Loop() {
					ok = CheckRequest(in, out)
				}
			}
			if !ok {
				b.Fatal("not decoded")
			}
		})
	}
}
