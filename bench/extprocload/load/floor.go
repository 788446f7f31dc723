package load

import (
	"context"
	"errors"
	"io"
	"net"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Floor is the do-nothing server: ext_authz and ext_proc on grpc-go's
// defaults, every message decoded (grpc-go unmarshals it), every Check
// allowed and every ext_proc message answered CONTINUE with the reply of
// its type. What Sluice costs above it is Sluice's own work.
type Floor struct {
	authv3.UnimplementedAuthorizationServer
	extprocsvc.UnimplementedExternalProcessorServer
}

var (
	_ authv3.AuthorizationServer         = Floor{}
	_ extprocsvc.ExternalProcessorServer = Floor{}
)

// Check allows.
func (Floor) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return &authv3.CheckResponse{HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}}}, nil
}

// Process answers every message with CONTINUE of its type.
func (Floor) Process(s extprocsvc.ExternalProcessor_ProcessServer) error {
	cont := &extprocsvc.CommonResponse{}
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return err
		}
		resp := &extprocsvc.ProcessingResponse{}
		switch req.GetRequest().(type) {
		case *extprocsvc.ProcessingRequest_RequestHeaders:
			resp.Response = &extprocsvc.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocsvc.HeadersResponse{Response: cont}}
		case *extprocsvc.ProcessingRequest_RequestBody:
			resp.Response = &extprocsvc.ProcessingResponse_RequestBody{RequestBody: &extprocsvc.BodyResponse{Response: cont}}
		case *extprocsvc.ProcessingRequest_RequestTrailers:
			resp.Response = &extprocsvc.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocsvc.TrailersResponse{}}
		case *extprocsvc.ProcessingRequest_ResponseHeaders:
			resp.Response = &extprocsvc.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocsvc.HeadersResponse{Response: cont}}
		case *extprocsvc.ProcessingRequest_ResponseBody:
			resp.Response = &extprocsvc.ProcessingResponse_ResponseBody{ResponseBody: &extprocsvc.BodyResponse{Response: cont}}
		case *extprocsvc.ProcessingRequest_ResponseTrailers:
			resp.Response = &extprocsvc.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocsvc.TrailersResponse{}}
		default:
			return status.Error(codes.InvalidArgument, "empty ProcessingRequest")
		}
		if err := s.Send(resp); err != nil {
			return err
		}
	}
}

// ServeFloor serves Floor on ln until ctx ends, with opts (the TLS
// credentials of an mTLS run, FloorCredentials).
func ServeFloor(ctx context.Context, ln net.Listener, opts ...grpc.ServerOption) error {
	g := grpc.NewServer(opts...)
	authv3.RegisterAuthorizationServer(g, Floor{})
	extprocsvc.RegisterExternalProcessorServer(g, Floor{})
	stop := context.AfterFunc(ctx, g.Stop)
	defer stop()
	err := g.Serve(ln)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
