package load

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
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
