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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// grpcService is a GrpcService: for envoy_grpc, its cluster, whose load
// balancer picks a host for each call or stream (Envoy's gRPC async
// client goes through the cluster's router, Http::AsyncStreamImpl); for
// google_grpc, one connection to its target. timeout is
// grpc_service.timeout (0: none).
type grpcService struct {
	e       *Emulator
	cluster *cluster
	sec     *grpcTLS
	conn    *grpc.ClientConn // google_grpc
	target  string           // google_grpc
	timeout time.Duration
	// timeoutSet reports whether grpc_service.timeout was given.
	timeoutSet bool
}

// dialService prepares a GrpcService: envoy_grpc names a cluster of cfg
// (it must speak HTTP/2), reached through the cluster's transport socket —
// TLS when it has an UpstreamTlsContext, as Envoy's gRPC client goes
// through the cluster's connection pool; google_grpc names a target URI
// (plaintext). Connections are lazy (grpc.NewClient): a server that is
// down, or a TLS handshake that fails, shows up as call errors, as in
// Envoy, where both are a connection failure of the stream.
func (e *Emulator) dialService(svc *corev3.GrpcService, cfg *config) (*grpcService, error) {
	gs := &grpcService{e: e}
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
		if !cl.http2 {
			return nil, fmt.Errorf("grpc_service cluster %q must enable HTTP/2 (typed_extension_protocol_options %s explicit_http_config.http2_protocol_options)", name, typeHTTPProtoOpt)
		}
		if cl.members != nil || len(cl.memberNames) > 0 {
			return nil, fmt.Errorf("grpc_service cluster %q: an aggregate cluster is not supported by the emulator here", name)
		}
		if cl.allHosts() == 0 {
			return nil, fmt.Errorf("grpc_service cluster %q has no endpoints", name)
		}
		gs.cluster = cl
		if cl.tls != nil {
			gs.sec = &grpcTLS{u: cl.tls, connectTimeout: cl.connectTimeout}
		}
		return gs, nil
	case svc.GetGoogleGrpc() != nil:
		gs.target = svc.GetGoogleGrpc().GetTargetUri()
		conn, err := e.conns.get(gs.target, nil, nil)
		if err != nil {
			return nil, err
		}
		gs.conn = conn
		return gs, nil
	}
	return nil, fmt.Errorf("grpc_service: envoy_grpc or google_grpc required")
}

// errNoHealthyUpstream is the async client's answer when the cluster's
// load balancer has no host (the router's no_healthy_upstream, which the
// gRPC client sees as UNAVAILABLE).
var errNoHealthyUpstream = status.Error(codes.Unavailable, "no healthy upstream")

// pick chooses the host for one call or stream: round robin over the
// cluster's healthy hosts (active health, outlier ejection, EDS health),
// or over all of them in panic (cluster.pick). The host is nil for a
// google_grpc target.
func (gs *grpcService) pick() (*grpc.ClientConn, *host, error) {
	if gs.cluster == nil {
		return gs.conn, nil, nil
	}
	h, _, ok := gs.cluster.pick(nil)
	if !ok {
		return nil, nil, errNoHealthyUpstream
	}
	if gs.cluster.hc != nil {
		gs.cluster.hc.traffic.Store(true)
	}
	conn, err := gs.e.conns.get(h.addr, gs.sec, gs.cluster.keepalive)
	if err != nil {
		return nil, nil, err
	}
	return conn, h, nil
}

// report gives a call's or stream's outcome to the host's outlier
// detector, as the router does for the async client's stream: response
// headers are a success (200); a gRPC status without a message
// (trailers-only, grpc-go's way for an error before any answer) its HTTP
// mapping (onUpstreamHeaders, Grpc::Utility::grpcToHttpStatus); a failed
// connection or a reset a 503 and a timeout a 504 (putResult in the
// detector's non-split mode). A call the emulator cancelled itself (its
// downstream went away) reports nothing. answered says the server sent a
// message, so a later error came in trailers, which the router does not
// report.
func (gs *grpcService) report(h *host, err error, answered bool, own context.Context) {
	if h == nil || gs.cluster.outlier == nil {
		return
	}
	switch {
	case err == nil || answered:
		gs.cluster.outlier.putHTTPCode(h, 200)
	case own != nil && errors.Is(own.Err(), context.Canceled):
	case status.Code(err) == codes.DeadlineExceeded:
		gs.cluster.outlier.putHTTPCode(h, 504)
	default:
		gs.cluster.outlier.putHTTPCode(h, grpcToHTTP(status.Code(err)))
	}
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

// get returns the connection to target with the transport security sec
// and the HTTP/2 keepalive ka (nil: none). Envoy's connection_keepalive
// sends a PING every interval and closes the connection when one is not
// answered within the timeout (Http2 ConnectionImpl's keepalive timers);
// grpc-go's client keepalive does the same, but pings no more often than
// every 10 s and without interval_jitter.
func (p *connPool) get(target string, sec *grpcTLS, ka *corev3.KeepaliveSettings) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("dial %s: the emulator has shut down", target)
	}
	key := target + " " + sec.key()
	opts := []grpc.DialOption{sec.dialOption()}
	if ka != nil && ka.GetInterval().AsDuration() > 0 {
		kp := keepalive.ClientParameters{Time: ka.GetInterval().AsDuration(), Timeout: durationOr(ka.GetTimeout(), 0), PermitWithoutStream: true}
		if kp.Timeout <= 0 {
			return nil, fmt.Errorf("dial %s: connection_keepalive.timeout is required with an interval", target)
		}
		key += fmt.Sprintf(" keepalive %s/%s", kp.Time, kp.Timeout)
		opts = append(opts, grpc.WithKeepaliveParams(kp))
	}
	if c := p.conns[key]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(target, opts...)
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
