package extproc

import (
	"errors"
	"io"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// Server is the envoy.service.ext_proc.v3.ExternalProcessor gRPC service:
// one Processor per stream.
type Server struct {
	extprocsvc.UnimplementedExternalProcessorServer
	deps *Deps
}

var _ extprocsvc.ExternalProcessorServer = (*Server)(nil)

// NewServer returns the service.
func NewServer(d *Deps) *Server { return &Server{deps: d} }

// Process runs one stream. Envoy half-closes and resets the stream when it
// is done (envoy-protocol.md §1.9); a stream that ends before the final
// response chunk is a cancellation, settled for what was delivered.
func (s *Server) Process(stream extprocsvc.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	s.deps.Metrics.streams.Inc()
	defer s.deps.Metrics.streams.Dec()
	p := NewProcessor(s.deps)
	for {
		m, err := stream.Recv()
		if err != nil {
			p.Cancel(ctx)
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		resp := p.Handle(ctx, m)
		if err := stream.Send(resp); err != nil {
			p.Cancel(ctx)
			return err
		}
	}
}
