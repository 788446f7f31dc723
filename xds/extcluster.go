package xds

import (
	"fmt"
	"net"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// sluiceCluster is the cluster of Sluice's replicas: HTTP/2, STATIC for IP
// addresses, STRICT_DNS for names, and TLS when xds.extension_tls is set
// (extensionTransportSocket; the same for every node group: a group
// overrides the addresses, not the TLS).
//
// A replica that dies, drains or stops answering must stop taking its 1/N
// of the requests, each of which would otherwise fail closed:
//   - an active gRPC health check (grpc.health.v1, the server's overall
//     status, which Sluice sets to NOT_SERVING when it starts to shut
//     down) every xds.extension_health_check.interval, also while the
//     cluster has had no traffic (no_traffic_interval, 60 s by default,
//     would leave a dead replica in for a minute after a quiet spell);
//   - outlier detection: five failures in a row (a refused or reset
//     connection counts as a 503 for a gRPC call, health or not) eject a
//     replica between checks, at most half of them at once — more would
//     put the cluster in panic (healthy_panic_threshold 50%) anyway;
//   - HTTP/2 keepalive PINGs, so a connection to a black-holed replica is
//     closed rather than holding new streams (Sluice's gRPC server
//     permits PINGs this often: app's keepalive enforcement policy).
func (b *builder) sluiceCluster() (*clusterv3.Cluster, error) {
	la := &endpointv3.LocalityLbEndpoints{}
	static := true
	for _, hp := range b.group.SluiceAddresses {
		a, err := socketAddress(hp)
		if err != nil {
			return nil, fmt.Errorf("xds.sluice_addresses: %w", err)
		}
		if net.ParseIP(a.GetSocketAddress().GetAddress()) == nil {
			static = false
		}
		la.LbEndpoints = append(la.LbEndpoints, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: a}}})
	}
	typ := clusterv3.Cluster_STATIC
	if !static {
		typ = clusterv3.Cluster_STRICT_DNS
	}
	opts := &upstreamhttpv3.HttpProtocolOptions{UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
		ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{
			ConnectionKeepalive: &corev3.KeepaliveSettings{
				Interval: durationpb.New(ExtensionKeepaliveInterval),
				Timeout:  durationpb.New(ExtensionKeepaliveTimeout),
			},
		}},
	}}}
	hc := b.snap.XDS().ExtensionHealthCheck
	// Every request in flight holds an ext_proc stream for as long as its
	// response streams: Envoy's default of 1,024 requests per cluster
	// would fail request 1,025 closed.
	limit := wrapperspb.UInt32(100_000)
	return &clusterv3.Cluster{
		CircuitBreakers: &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			MaxConnections: limit, MaxPendingRequests: limit, MaxRequests: limit,
		}}},
		Name:                          SluiceCluster,
		ConnectTimeout:                durationpb.New(time.Second),
		ClusterDiscoveryType:          &clusterv3.Cluster_Type{Type: typ},
		LbPolicy:                      clusterv3.Cluster_ROUND_ROBIN,
		LoadAssignment:                &endpointv3.ClusterLoadAssignment{ClusterName: SluiceCluster, Endpoints: []*endpointv3.LocalityLbEndpoints{la}},
		TypedExtensionProtocolOptions: map[string]*anypb.Any{httpProtocolOptionsName: mustAny(opts)},
		TransportSocket:               extensionTransportSocket(b.snap.XDS().ExtensionTLS),
		HealthChecks: []*corev3.HealthCheck{{
			Interval:           durationpb.New(hc.Interval),
			NoTrafficInterval:  durationpb.New(hc.Interval),
			Timeout:            durationpb.New(hc.Timeout),
			UnhealthyThreshold: wrapperspb.UInt32(uint32(hc.UnhealthyThreshold)),
			HealthyThreshold:   wrapperspb.UInt32(uint32(hc.HealthyThreshold)),
			HealthChecker:      &corev3.HealthCheck_GrpcHealthCheck_{GrpcHealthCheck: &corev3.HealthCheck_GrpcHealthCheck{}},
		}},
		OutlierDetection: &clusterv3.OutlierDetection{
			Consecutive_5Xx:    wrapperspb.UInt32(5),
			Interval:           durationpb.New(time.Second),
			BaseEjectionTime:   durationpb.New(10 * time.Second),
			MaxEjectionPercent: wrapperspb.UInt32(50),
		},
	}, nil
}

// The HTTP/2 keepalive of the sluice.extension cluster: a PING every
// interval, and the connection closed when one is not answered within the
// timeout. gRPC's own clients ping no more often than every 10 s (gRFC
// A8), a floor a server may rely on.
const (
	ExtensionKeepaliveInterval = 10 * time.Second
	ExtensionKeepaliveTimeout  = 5 * time.Second
)
