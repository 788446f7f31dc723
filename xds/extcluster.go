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
		ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
	}}}
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
	}, nil
}
