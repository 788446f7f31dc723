package envoytest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
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
// cfg (its first endpoint; the cluster must speak HTTP/2), reached through
// the cluster's transport socket — TLS when it has an UpstreamTlsContext,
// as Envoy's gRPC client goes through the cluster's connection pool —
// google_grpc names a target URI (plaintext). Connections are lazy
// (grpc.NewClient): a server that is down, or a TLS handshake that fails,
// shows up as call errors, as in Envoy, where both are a connection
// failure of the stream.
func (e *Emulator) dialService(svc *corev3.GrpcService, cfg *config) (*grpcService, error) {
	gs := &grpcService{}
	if t := svc.GetTimeout(); t != nil {
		gs.timeout, gs.timeoutSet = t.AsDuration(), true
	}
	var sec *grpcTLS
	switch {
	case svc.GetEnvoyGrpc() != nil:
		name := svc.GetEnvoyGrpc().GetClusterName()
		cl := cfg.clusters[name]
		if cl == nil {
			return nil, fmt.Errorf("grpc_service.envoy_grpc.cluster_name %q: no such cluster", name)
		}
		if !cl.http2 {
			return nil, fmt.Errorf("grpc_service cluster %q must enable HTTP/2 (typed_extension_protocol_options %s explicit_http_config.http2_protocol_options)", name, typeHTTPProtoOpt)
		}
		ep, ok := cl.firstEndpoint()
		if !ok {
			return nil, fmt.Errorf("grpc_service cluster %q has no endpoints", name)
		}
		gs.target = ep
		if cl.tls != nil {
			sec = &grpcTLS{u: cl.tls, connectTimeout: cl.connectTimeout}
		}
	case svc.GetGoogleGrpc() != nil:
		gs.target = svc.GetGoogleGrpc().GetTargetUri()
	default:
		return nil, fmt.Errorf("grpc_service: envoy_grpc or google_grpc required")
	}
	conn, err := e.conns.get(gs.target, sec)
	if err != nil {
		return nil, err
	}
	gs.conn = conn
	return gs, nil
}

// grpcTLS is a cluster's UpstreamTlsContext as grpc-go transport
// credentials. The handshake is tls.go's, the router's (SNI, ALPN, client
// certificate, Envoy's verification), within the cluster's
// connect_timeout, so a gRPC service is reached as Envoy's gRPC client
// reaches it through the cluster. (credentials.NewTLS would not do: it
// replaces the SNI with the dialled host and adds "h2" to any ALPN list.)
// ALPN is alpn_protocols, or "h2", the HTTP/2 pool's fallback
// (upstreamTLS.alpn), which grpc-go's servers require.
type grpcTLS struct {
	u              *upstreamTLS
	connectTimeout time.Duration
}

var _ credentials.TransportCredentials = (*grpcTLS)(nil)

func (g *grpcTLS) ClientHandshake(ctx context.Context, _ string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, g.connectTimeout)
	defer cancel()
	c, err := g.u.handshake(ctx, raw)
	if err != nil {
		return nil, nil, err
	}
	return c, credentials.TLSInfo{State: c.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (g *grpcTLS) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("envoytest: upstream TLS credentials are client-side only")
}

func (g *grpcTLS) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2", ServerName: g.u.sni}
}

func (g *grpcTLS) Clone() credentials.TransportCredentials { c := *g; return &c }

// OverrideServerName is deprecated in grpc-go; the SNI is the context's.
func (g *grpcTLS) OverrideServerName(string) error { return nil }

// key identifies the credentials for sharing a connection.
func (g *grpcTLS) key() string {
	if g == nil {
		return ""
	}
	return fmt.Sprintf("tls %s %s", g.u.id, g.connectTimeout)
}

// dialOption is the transport security of a connection: g, or plaintext.
func (g *grpcTLS) dialOption() grpc.DialOption {
	if g == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(g)
}

// connPool shares one ClientConn per target and transport security across
// config versions: a cluster whose TLS context loads the same (clusterTLS)
// keeps its connection, one whose context or files changed gets a new one.
type connPool struct {
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool // after Serve: a configuration arriving late dials nothing
}

func newConnPool() *connPool { return &connPool{conns: map[string]*grpc.ClientConn{}} }

func (p *connPool) get(target string, sec *grpcTLS) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("dial %s: the emulator has shut down", target)
	}
	key := target + " " + sec.key()
	if c := p.conns[key]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(target, sec.dialOption())
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	p.conns[key] = c
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
