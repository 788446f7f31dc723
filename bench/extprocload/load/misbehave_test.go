package load

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/chain"
)

// misbehaving answers the response body with what reply returns (nil:
// never answers) and everything else as Floor does.
type misbehaving struct {
	Floor
	reply func() *extprocsvc.ProcessingResponse
}

func (m misbehaving) Process(s extprocsvc.ExternalProcessor_ProcessServer) error {
	for {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		if req.GetResponseBody() == nil {
			if err := s.Send(floorReply(req)); err != nil {
				return err
			}
			continue
		}
		r := m.reply()
		if r == nil {
			<-s.Context().Done()
			return nil
		}
		if err := s.Send(r); err != nil {
			return err
		}
	}
}

func floorReply(req *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingResponse {
	c := &extprocsvc.CommonResponse{}
	switch req.GetRequest().(type) {
	case *extprocsvc.ProcessingRequest_RequestHeaders:
		return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocsvc.HeadersResponse{Response: c}}}
	case *extprocsvc.ProcessingRequest_RequestBody:
		return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_RequestBody{RequestBody: &extprocsvc.BodyResponse{Response: c}}}
	default:
		return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocsvc.HeadersResponse{Response: c}}}
	}
}

// TestRepliesAreChecked: a reply of the wrong type, an ImmediateResponse
// and no reply within the message timeout each fail the request, as they
// would fail it in Envoy.
func TestRepliesAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply func() *extprocsvc.ProcessingResponse
		want  string
	}{
		{"wrong type", func() *extprocsvc.ProcessingResponse {
			return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_RequestBody{RequestBody: &extprocsvc.BodyResponse{}}}
		}, "spurious reply"},
		{"immediate response", func() *extprocsvc.ProcessingResponse {
			return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocsvc.ImmediateResponse{}}}
		}, "immediate response"},
		{"no reply", func() *extprocsvc.ProcessingResponse { return nil }, errTimeout.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lc net.ListenConfig
			ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			g := grpc.NewServer()
			srv := misbehaving{reply: tc.reply}
			authv3.RegisterAuthorizationServer(g, srv)
			extprocsvc.RegisterExternalProcessorServer(g, srv)
			go g.Serve(ln) //nolint:errcheck // ends with Stop
			defer g.Stop()
			_, err = Run(context.Background(), Config{Addr: ln.Addr().String(), Model: "m", Concurrency: 1, Requests: 1})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if tc.name == "no reply" && !errors.Is(err, errTimeout) {
				t.Fatalf("err = %v, not errTimeout", err)
			}
		})
	}
}

// recording allows every Check with dynamic metadata and records, for
// every ext_proc message, the authz metadata it carried.
type recording struct {
	Floor
	mu   sync.Mutex
	seen []*structpb.Struct
}

func (r *recording) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	md, err := structpb.NewStruct(map[string]any{"key_id": "config:bench"})
	if err != nil {
		return nil, err
	}
	return &authv3.CheckResponse{
		Status:          &rpcstatus.Status{},
		HttpResponse:    &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}},
		DynamicMetadata: md,
	}, nil
}

func (r *recording) Process(s extprocsvc.ExternalProcessor_ProcessServer) error {
	for {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		r.mu.Lock()
		r.seen = append(r.seen, req.GetMetadataContext().GetFilterMetadata()[chain.AuthzNamespace])
		r.mu.Unlock()
		resp := floorReply(req)
		if req.GetResponseBody() != nil {
			resp = &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseBody{ResponseBody: &extprocsvc.BodyResponse{}}}
		}
		if err := s.Send(resp); err != nil {
			return err
		}
	}
}

// TestMetadataForwardedOnEveryMessage: the Check's dynamic metadata, plus
// the ext_authz_duration Envoy adds, reaches the ext_proc server on every
// message of the stream, as forwarding_namespaces makes Envoy send it.
func TestMetadataForwardedOnEveryMessage(t *testing.T) {
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv := &recording{}
	authv3.RegisterAuthorizationServer(g, srv)
	extprocsvc.RegisterExternalProcessorServer(g, srv)
	go g.Serve(ln) //nolint:errcheck // ends with Stop
	defer g.Stop()
	if _, err := Run(context.Background(), Config{Addr: ln.Addr().String(), Model: "m", Concurrency: 1, Requests: 1, Stream: true, Chunks: 5}); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	// Two requests (the unmeasured first one and one more), each with
	// request headers, body, response headers and 5 chunks.
	if len(srv.seen) != 2*8 {
		t.Fatalf("%d messages, want 16", len(srv.seen))
	}
	for i, md := range srv.seen {
		if md.GetFields()["key_id"].GetStringValue() != "config:bench" || md.GetFields()["ext_authz_duration"] == nil {
			t.Errorf("message %d: authz metadata %v", i, md)
		}
	}
}
