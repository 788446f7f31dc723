package extproc

import (
	"context"
	"errors"
	"io"
	"log/slog"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/metadata"

	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/grpcguard"
)

// Server is the envoy.service.ext_proc.v3.ExternalProcessor gRPC service:
// one Processor per stream, or an UpstreamProcessor for a stream whose
// initial metadata carries chain.UpstreamMetadataKey (the ext_proc of a
// fallback model's aggregate cluster's upstream filter chain,
// chain.UpstreamExtProc).
type Server struct {
	extprocsvc.UnimplementedExternalProcessorServer
	deps *Deps
}

var _ extprocsvc.ExternalProcessorServer = (*Server)(nil)

// handler is what the stream loop drives.
type handler interface {
	Handle(ctx context.Context, m *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingResponse
	// Cancel is called once when the stream ends, however it ends.
	Cancel(ctx context.Context)
}

var (
	_ handler = (*Processor)(nil)
	_ handler = (*UpstreamProcessor)(nil)
)

// NewServer returns the service.
func NewServer(d *Deps) *Server { return &Server{deps: d} }

// Process runs one stream. Envoy half-closes and resets the stream when it
// is done (envoy-protocol.md §1.9); a stream that ends before the final
// response chunk is a cancellation, settled for what was delivered. A
// panic while handling a message is recovered by the gRPC server's
// interceptor (internal/grpcguard): the stream fails with Internal, Envoy
// applies the filter's failure mode, and the request's reservation, never
// settled, is released after gateway.reservation_ttl.
func (s *Server) Process(stream extprocsvc.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	s.deps.Metrics.streams.Inc()
	defer s.deps.Metrics.streams.Dec()
	var p handler
	if v := metadata.ValueFromIncomingContext(ctx, chain.UpstreamMetadataKey); len(v) > 0 {
		p = NewUpstreamProcessor(s.deps)
	} else {
		p = NewProcessor(s.deps)
	}
	for first := true; ; first = false {
		m, err := stream.Recv()
		if err != nil {
			p.Cancel(ctx)
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		if first {
			identify(ctx, m)
		}
		resp := p.Handle(ctx, m)
		if err := stream.Send(resp); err != nil {
			p.Cancel(ctx)
			return err
		}
	}
}

// identify names the stream, for the log line of a panic recovered in it
// (internal/grpcguard): the request's x-request-id and path, without its
// query (which may carry a credential).
func identify(ctx context.Context, m *extprocsvc.ProcessingRequest) {
	var id, path string
	for _, h := range m.GetRequestHeaders().GetHeaders().GetHeaders() {
		switch h.GetKey() {
		case "x-request-id":
			id = string(h.GetRawValue())
		case ":path":
			path = pathOnly(string(h.GetRawValue()))
		}
	}
	if id != "" || path != "" {
		grpcguard.Identify(ctx, slog.String("request_id", id), slog.String("path", path))
	}
}
