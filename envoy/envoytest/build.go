package envoytest

import (
	"fmt"
	"net"
	"strconv"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Builders for the bootstraps tests hand to the emulator (or to a real
// Envoy through StartRealEnvoy). They produce ordinary Envoy protos.

// StaticCluster is a STATIC cluster with one endpoint at addr (host:port),
// speaking HTTP/2 when http2 is set (gRPC services need it).
func StaticCluster(name, addr string, http2 bool) (*clusterv3.Cluster, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", name, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: port %q: %w", name, port, err)
	}
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(time.Second),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
				}}},
			}}}},
		}}},
	}
	if http2 {
		opts, err := anypb.New(&upstreamhttpv3.HttpProtocolOptions{
			UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
			}},
		})
		if err != nil {
			return nil, err
		}
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{typeHTTPProtoOpt: opts}
	}
	return c, nil
}

// HTTPFilter wraps a filter configuration as an HttpConnectionManager
// filter.
func HTTPFilter(name string, cfg proto.Message) (*hcmv3.HttpFilter, error) {
	a, err := anypb.New(cfg)
	if err != nil {
		return nil, err
	}
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}}, nil
}

// Bootstrap is one listener on 127.0.0.1:0 whose connection manager runs
// filters, then the router, over the inline route configuration rc, and
// the given clusters. It is validated.
func Bootstrap(rc *routev3.RouteConfiguration, clusters []*clusterv3.Cluster, filters ...*hcmv3.HttpFilter) (*bootstrapv3.Bootstrap, error) {
	router, err := HTTPFilter("envoy.filters.http.router", &routerv3.Router{})
	if err != nil {
		return nil, err
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix:     "ingress",
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc},
		HttpFilters:    append(append([]*hcmv3.HttpFilter(nil), filters...), router),
	})
	if err != nil {
		return nil, err
	}
	l := &listenerv3.Listener{
		Name: "ingress",
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 0},
		}}},
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm},
		}}}},
	}
	b := &bootstrapv3.Bootstrap{StaticResources: &bootstrapv3.Bootstrap_StaticResources{Listeners: []*listenerv3.Listener{l}, Clusters: clusters}}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("bootstrap invalid: %w", err)
	}
	return b, nil
}
