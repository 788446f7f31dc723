package envoytest

import (
	"fmt"
	"net"
	"strconv"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// Builders for configurations served over xDS, to the emulator or to a
// real Envoy. They produce ordinary Envoy protos.

// ADSCluster is the name of the static cluster ADSBootstrap points ADS at.
const ADSCluster = "xds_cluster"

// adsSource is a ConfigSource of resources over the ADS stream.
func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

// ADSBootstrap is a bootstrap that takes listeners and clusters (and,
// through them, routes and endpoints) over one state-of-the-world ADS
// stream from the xDS server at addr (host:port, gRPC over h2c), as node
// nodeID in cluster nodeCluster. It is validated.
func ADSBootstrap(addr, nodeID, nodeCluster string) (*bootstrapv3.Bootstrap, error) {
	xds, err := StaticCluster(ADSCluster, addr, true)
	if err != nil {
		return nil, err
	}
	b := &bootstrapv3.Bootstrap{
		Node: &corev3.Node{Id: nodeID, Cluster: nodeCluster},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:             corev3.ApiConfigSource_GRPC,
				TransportApiVersion: corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: ADSCluster},
				}}},
			},
			LdsConfig: adsSource(),
			CdsConfig: adsSource(),
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{xds}},
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("bootstrap invalid: %w", err)
	}
	return b, nil
}

// RDSListener is the listener of Bootstrap — 127.0.0.1:0, a connection
// manager running filters and then the router — taking its route
// configuration routeConfig over ADS.
func RDSListener(name, routeConfig string, filters ...*hcmv3.HttpFilter) (*listenerv3.Listener, error) {
	b, err := Bootstrap(&routev3.RouteConfiguration{Name: routeConfig}, nil, filters...)
	if err != nil {
		return nil, err
	}
	l := b.GetStaticResources().GetListeners()[0]
	hcm := &hcmv3.HttpConnectionManager{}
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		return nil, err
	}
	hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: adsSource(), RouteConfigName: routeConfig}}
	a, err := anypb.New(hcm)
	if err != nil {
		return nil, err
	}
	l.Name = name
	l.GetFilterChains()[0].GetFilters()[0].ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
	if err := l.ValidateAll(); err != nil {
		return nil, fmt.Errorf("listener invalid: %w", err)
	}
	return l, nil
}

// EDSCluster is a cluster of type EDS whose endpoints come over ADS under
// its own name (see Endpoints), speaking HTTP/2 when http2 is set.
func EDSCluster(name string, http2 bool) (*clusterv3.Cluster, error) {
	c, err := StaticCluster(name, "127.0.0.1:0", http2)
	if err != nil {
		return nil, err
	}
	c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}
	c.LoadAssignment = nil
	c.EdsClusterConfig = &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()}
	return c, nil
}

// Endpoints is the ClusterLoadAssignment of cluster: one locality, one
// endpoint per address (host:port).
func Endpoints(cluster string, addrs ...string) (*endpointv3.ClusterLoadAssignment, error) {
	la := &endpointv3.ClusterLoadAssignment{ClusterName: cluster, Endpoints: []*endpointv3.LocalityLbEndpoints{{}}}
	for _, addr := range addrs {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("endpoints %q: %w", cluster, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("endpoints %q: port %q: %w", cluster, port, err)
		}
		la.Endpoints[0].LbEndpoints = append(la.Endpoints[0].LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
				}}},
			}},
		})
	}
	return la, nil
}
