package envoytest

import (
	"fmt"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// grpcService is a dialled GrpcService: the connection and the per-call
// timeout from grpc_service.timeout (0: none).
type grpcService struct {
	conn    *grpc.ClientConn
	target  string
	timeout time.Duration
	// timeoutSet reports whether grpc_service.timeout was given.
	timeoutSet bool
}

// dialService connects to a GrpcService: envoy_grpc names a cluster of
// cfg (its first endpoint; the cluster must speak HTTP/2), google_grpc
// names a target URI. Connections are lazy (grpc.NewClient); a server that
// is down shows up as call errors, as in Envoy.
func (e *Emulator) dialService(svc *corev3.GrpcService, cfg *config) (*grpcService, error) {
	gs := &grpcService{}
	if t := svc.GetTimeout(); t != nil {
		gs.timeout, gs.timeoutSet = t.AsDuration(), true
	}
	switch {
	case svc.GetEnvoyGrpc() != nil:
		name := svc.GetEnvoyGrpc().GetClusterName()
		cl := cfg.clusters[name]
		if cl == nil {
			return nil, fmt.Errorf("grpc_service.envoy_grpc.cluster_name %q: no such cluster", name)
		}
		if cl.tls != nil {
			return nil, fmt.Errorf("grpc_service cluster %q has an UpstreamTlsContext: the emulator calls gRPC services in plaintext only", name)
		}
		if !cl.http2 {
			return nil, fmt.Errorf("grpc_service cluster %q must enable HTTP/2 (typed_extension_protocol_options %s explicit_http_config.http2_protocol_options)", name, typeHTTPProtoOpt)
		}
		ep, ok := cl.firstEndpoint()
		if !ok {
			return nil, fmt.Errorf("grpc_service cluster %q has no endpoints", name)
		}
		gs.target = ep
	case svc.GetGoogleGrpc() != nil:
		gs.target = svc.GetGoogleGrpc().GetTargetUri()
	default:
		return nil, fmt.Errorf("grpc_service: envoy_grpc or google_grpc required")
	}
	conn, err := e.conns.get(gs.target)
	if err != nil {
		return nil, err
	}
	gs.conn = conn
	return gs, nil
}

// connPool shares one ClientConn per target across config versions.
type connPool struct {
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool // after Serve: a configuration arriving late dials nothing
}

func newConnPool() *connPool { return &connPool{conns: map[string]*grpc.ClientConn{}} }

func (p *connPool) get(target string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("dial %s: the emulator has shut down", target)
	}
	if c := p.conns[target]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	p.conns[target] = c
	return c, nil
}

func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for t, c := range p.conns {
		c.Close()
		delete(p.conns, t)
	}
}
