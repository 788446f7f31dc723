package load

import (
	"context"
	"strconv"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/chain"
)

// wireRecorder answers as Floor does, with dynamic metadata on the OK,
// and records every CheckRequest and ProcessingRequest as decoded by
// proto.
type wireRecorder struct {
	Floor
	md      *structpb.Struct
	mu      sync.Mutex
	checks  []*authv3.CheckRequest
	streams [][]*extprocsvc.ProcessingRequest
}

func (f *wireRecorder) Check(_ context.Context, r *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	f.mu.Lock()
	f.checks = append(f.checks, r)
	f.mu.Unlock()
	return &authv3.CheckResponse{Status: &rpcstatus.Status{}, DynamicMetadata: f.md,
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}}}, nil
}

func (f *wireRecorder) Process(s extprocsvc.ExternalProcessor_ProcessServer) error {
	f.mu.Lock()
	i := len(f.streams)
	f.streams = append(f.streams, nil)
	f.mu.Unlock()
	for {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		f.mu.Lock()
		f.streams[i] = append(f.streams[i], req)
		f.mu.Unlock()
		resp := floorReply(req)
		if req.GetResponseBody() != nil {
			resp = &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseBody{ResponseBody: &extprocsvc.BodyResponse{}}}
		}
		if err := s.Send(resp); err != nil {
			return err
		}
	}
}

// TestWireMessagesAreEnvoys: what the driver sends from its encoded parts
// decodes to the messages Envoy's filters build, field by field: the
// CheckRequest of each request id, and on the ext_proc stream the request
// headers (with protocol_config), the buffered body, the response
// headers and each body chunk, every one carrying as metadata_context the
// Check's dynamic metadata plus ext_authz_duration.
func TestWireMessagesAreEnvoys(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "json", true: "stream"}[stream]
		t.Run(name, func(t *testing.T) {
			authz, err := structpb.NewStruct(map[string]any{"key_id": "k1", "team": "t", "n": 3.5})
			if err != nil {
				t.Fatal(err)
			}
			srv := &wireRecorder{md: authz}
			addr := serve(t, srv)
			cfg := Config{Addr: addr, Key: "sk-test", Model: "gpt-4o-mini", Concurrency: 1, Requests: 2, Stream: stream}
			if stream {
				cfg.Chunks = 5
			}
			if _, err := Run(t.Context(), cfg); err != nil {
				t.Fatal(err)
			}
			bodies, err := NewBodies(cfg.Model, cfg.Chunks, stream)
			if err != nil {
				t.Fatal(err)
			}
			x, err := newExchange(nil, cfg.Key, bodies, stream, 0, "")
			if err != nil {
				t.Fatal(err)
			}
			srv.mu.Lock()
			defer srv.mu.Unlock()
			if len(srv.checks) != 3 || len(srv.streams) != 3 { // the unmeasured first request, then 2
				t.Fatalf("%d checks, %d streams; want 3 and 3", len(srv.checks), len(srv.streams))
			}
			for i, c := range srv.checks {
				id := c.GetAttributes().GetRequest().GetHttp().GetId()
				if id == "" {
					t.Fatalf("check %d: no request id", i)
				}
				if diff := cmp.Diff(x.checkRequest(id), c, protocmp.Transform()); diff != "" {
					t.Errorf("check %d (-built +sent):\n%s", i, diff)
				}
				msgs := srv.streams[i]
				want := []*extprocsvc.ProcessingRequest{{
					Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{Headers: headers(
						":authority", "gateway.local", ":path", "/v1/chat/completions", ":method", "POST", ":scheme", "http",
						"authorization", "Bearer sk-test", "content-type", "application/json", "content-length", strconv.Itoa(len(bodies.Request)),
						"user-agent", "OpenAI/Go 3.0", "x-forwarded-proto", "http", "x-request-id", id)}},
					ProtocolConfig: &extprocsvc.ProtocolConfiguration{
						RequestBodyMode:  extprocfilterv3.ProcessingMode_BUFFERED,
						ResponseBodyMode: extprocfilterv3.ProcessingMode_STREAMED,
					},
				}, requestBodyMsg(bodies.Request), responseHeadersMsg(x.responseHeaderMap())}
				for j, ch := range x.chunks() {
					want = append(want, responseBodyMsg(ch, j == len(x.chunks())-1))
				}
				if len(msgs) != len(want) {
					t.Fatalf("stream %d: %d messages, want %d", i, len(msgs), len(want))
				}
				for j, m := range msgs {
					d := m.GetMetadataContext().GetFilterMetadata()[chain.AuthzNamespace].GetFields()["ext_authz_duration"]
					if _, ok := d.GetKind().(*structpb.Value_NumberValue); !ok || d.GetNumberValue() < 0 {
						t.Fatalf("stream %d message %d: ext_authz_duration %v", i, j, d)
					}
					md := proto.Clone(authz).(*structpb.Struct)
					md.Fields["ext_authz_duration"] = d
					w := proto.Clone(want[j]).(*extprocsvc.ProcessingRequest)
					w.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.AuthzNamespace: md}}
					if diff := cmp.Diff(w, m, protocmp.Transform()); diff != "" {
						t.Errorf("stream %d message %d (-built +sent):\n%s", i, j, diff)
					}
				}
			}
		})
	}
}

// checkSeeds are CheckResponses for FuzzCheckReply's corpus and
// TestCheckReply: metadata at the top, in ok_response, in both, an empty
// ok metadata, a denial, and merged repeats.
func checkSeeds(t testing.TB) [][]byte {
	st := func(kv map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(kv)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	msgs := []*authv3.CheckResponse{
		{Status: &rpcstatus.Status{}},
		{Status: &rpcstatus.Status{Code: 7}, HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{Status: &typev3.HttpStatus{Code: 403}}}},
		{Status: &rpcstatus.Status{}, DynamicMetadata: st(map[string]any{"a": "top"})},
		{Status: &rpcstatus.Status{}, DynamicMetadata: st(map[string]any{"a": "top"}),
			HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{DynamicMetadata: st(map[string]any{"a": "ok"})}}}, //nolint:staticcheck // Envoy still honours it
		{Status: &rpcstatus.Status{}, DynamicMetadata: st(map[string]any{"a": "top"}),
			HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{DynamicMetadata: &structpb.Struct{}}}}, //nolint:staticcheck // as above
		{Status: &rpcstatus.Status{Code: -1}},
	}
	var out [][]byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	// Repeats, which proto merges: two statuses (the second without a
	// code), two metadata fields, ok then denied, denied then ok.
	out = append(out,
		append(append([]byte{}, out[1]...), out[0]...),
		append(append([]byte{}, out[2]...), out[3]...),
		append(append([]byte{}, out[3]...), out[1]...),
		append(append([]byte{}, out[1]...), out[3]...),
		[]byte{0x0a, 0x05, 0x08}, // truncated
	)
	return out
}

// sameAsProto fails unless checkReply reads b as proto.Unmarshal and
// Envoy's onComplete (ok_response's metadata when set, else the
// top-level one) do.
func sameAsProto(t *testing.T, b []byte) {
	code, md, err := checkReply(b)
	var want authv3.CheckResponse
	if perr := proto.Unmarshal(b, &want); perr != nil {
		return // the driver fails the request either way
	}
	if err != nil {
		t.Fatalf("checkReply refused what proto reads: %v", err)
	}
	if code != want.GetStatus().GetCode() {
		t.Fatalf("code %d, proto %d", code, want.GetStatus().GetCode())
	}
	wantMD := want.GetDynamicMetadata()
	if ok := want.GetOkResponse(); ok.GetDynamicMetadata() != nil { //nolint:staticcheck // Envoy still honours it
		wantMD = ok.GetDynamicMetadata() //nolint:staticcheck // as above
	}
	var got structpb.Struct
	if err := proto.Unmarshal(md, &got); err != nil {
		t.Fatalf("metadata does not decode: %v", err)
	}
	if wantMD == nil {
		wantMD = &structpb.Struct{}
	}
	if !proto.Equal(&got, wantMD) {
		t.Fatalf("metadata %v, proto %v", &got, wantMD)
	}
}

func TestCheckReply(t *testing.T) {
	for _, b := range checkSeeds(t) {
		sameAsProto(t, b)
	}
	if _, _, err := checkReply([]byte{0x0a, 0x05, 0x08}); err == nil {
		t.Error("a truncated reply was read")
	}
}

// FuzzCheckReply: on any bytes proto reads as a CheckResponse, the
// driver's reading agrees with it; on any bytes it does not panic.
func FuzzCheckReply(f *testing.F) {
	for _, b := range checkSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameAsProto(t, b) })
}

// FuzzReplyKind: on any bytes proto reads as a ProcessingResponse, kind
// is the field number of the response oneof that is set.
func FuzzReplyKind(f *testing.F) {
	for _, m := range []*extprocsvc.ProcessingResponse{
		{},
		floorReply(&extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_RequestHeaders{}}),
		floorReply(&extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_RequestBody{}}),
		{Response: &extprocsvc.ProcessingResponse_ResponseBody{ResponseBody: &extprocsvc.BodyResponse{}}},
		{Response: &extprocsvc.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocsvc.ImmediateResponse{Body: []byte("no")}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := (&rawReply{b: b}).kind()
		var m extprocsvc.ProcessingResponse
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		if err != nil {
			t.Fatalf("kind refused what proto reads: %v", err)
		}
		var want protowire.Number
		if m.GetResponse() != nil {
			want = m.ProtoReflect().WhichOneof(m.ProtoReflect().Descriptor().Oneofs().ByName("response")).Number()
		}
		if k != want {
			t.Fatalf("kind %d, proto %d", k, want)
		}
	})
}
