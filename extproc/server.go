package extproc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"time"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

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
	// A downstream processor's settle waits for its ledger Append through
	// w, which may send an override on the stream meanwhile (waiter).
	w := &waiter{ctx: ctx, stream: stream, metrics: s.deps.Metrics}
	if v := metadata.ValueFromIncomingContext(ctx, chain.UpstreamMetadataKey); len(v) > 0 {
		p = NewUpstreamProcessor(s.deps)
	} else {
		pr := NewProcessor(s.deps)
		pr.await = w.await
		// Envoy says, in the stream's initial metadata, that it runs no
		// fallback cluster (chain.ExtProc, Options.NoFallback).
		pr.noFallback = slices.Contains(metadata.ValueFromIncomingContext(ctx, chain.FallbackMetadataKey), chain.FallbackMetadataWithheld)
		p = pr
	}
	for first := true; ; first = false {
		m, err := stream.Recv()
		if err != nil {
			w.end()
			p.Cancel(ctx)
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		w.received = time.Now()
		if first {
			identify(ctx, m)
		}
		resp := p.Handle(ctx, m)
		if err := stream.Send(resp); err != nil {
			w.end()
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

// extendAfter is how long after a message arrived its reply may still be
// waiting on the ledger before Envoy is asked for more time: the filter's
// message timeout less a margin for delivery and scheduling (chain).
const extendAfter = chain.ExtProcTimeout - chain.ExtProcMargin

// overrideReply asks Envoy to restart the message timer with the filter's
// max_message_timeout: a reply carrying only override_message_timeout,
// which is not the answer to the message (envoy-protocol.md §1.3).
var overrideReply = &extprocsvc.ProcessingResponse{OverrideMessageTimeout: durationpb.New(chain.ExtProcMaxTimeout)}

// waiter lets the processor wait for its ledger Append on the stream's
// own goroutine — the one that sends every reply — and ask Envoy for more
// time while it waits. It is used only from that goroutine, so the
// override is sent by the only sender, before the message's reply, and
// never once the stream has ended (end, before Cancel).
type waiter struct {
	ctx      context.Context // the stream's
	stream   extprocsvc.ExternalProcessor_ProcessServer
	metrics  *Metrics
	received time.Time // when the message being handled arrived
	ended    bool      // the stream has ended: nothing more is sent
}

// end marks the stream ended: a settle after it (Cancel's) waits for its
// Append without sending anything.
func (w *waiter) end() { w.ended = true }

// await returns what done delivers. If that takes past extendAfter since
// the message arrived, it first sends the override (once: Envoy takes one
// per state, and a message is settled at most once), unless the stream is
// gone.
func (w *waiter) await(done <-chan error) error {
	if w.ended {
		return <-done
	}
	t := time.NewTimer(time.Until(w.received.Add(extendAfter)))
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	case <-w.ctx.Done():
		return <-done
	}
	if err := w.stream.Send(overrideReply); err == nil {
		w.metrics.overrides.Inc()
	}
	return <-done
}
