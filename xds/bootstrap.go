package xds

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicegw/sluice/policies"
)

// XDSCluster is the bootstrap's static cluster for the xDS server itself.
const XDSCluster = "sluice-xds"

// BootstrapOptions describe the Envoy that a bootstrap is for.
type BootstrapOptions struct {
	NodeID      string // default "sluice-envoy"
	NodeCluster string // default "sluice"; node groups may match on it
	XDSAddress  string // host:port of Sluice's xDS server
	AdminPort   uint32 // Envoy's admin port on 127.0.0.1; default 9901
	// TLS is xds.extension_tls: the xDS cluster speaks it as the served
	// sluice.extension cluster does. Nil: plaintext.
	TLS *policies.ExtensionTLS
	// MaxHeapBytes, when not 0, gives Envoy an overload manager that sheds
	// new requests as its heap nears this size (overloadManager). 0: none.
	MaxHeapBytes uint64
}

// Bootstrap is the Envoy bootstrap that takes everything else from
// Sluice's xDS server: ADS over gRPC (HTTP/2) to XDSAddress, listeners and
// clusters from it, and the admin interface on loopback only.
//
// With TLS the xDS cluster carries the same UpstreamTlsContext as the
// sluice.extension cluster Sluice serves (extensionTLS). Files are named
// inline and need nothing more. A secret named by sds_certificate or
// sds_validation is referenced, not defined: Sluice does not know what
// it holds, and the bootstrap must define it in static_resources.secrets
// (Validate reports "Unknown static secret" until it does, as Envoy
// would refuse to start) — the same secret the served sluice.extension
// cluster names.
func Bootstrap(o BootstrapOptions) (*bootstrapv3.Bootstrap, error) {
	if o.NodeID == "" {
		o.NodeID = "sluice-envoy"
	}
	if o.NodeCluster == "" {
		o.NodeCluster = "sluice"
	}
	if o.AdminPort == 0 {
		o.AdminPort = 9901
	}
	addr, err := socketAddress(o.XDSAddress)
	if err != nil {
		return nil, fmt.Errorf("xds address: %w", err)
	}
	typ := clusterv3.Cluster_STATIC
	if host := addr.GetSocketAddress().GetAddress(); net.ParseIP(host) == nil {
		typ = clusterv3.Cluster_STRICT_DNS
	} else if net.ParseIP(host).IsUnspecified() {
		return nil, fmt.Errorf("xds address %q: name an address Envoy can connect to, not %s", o.XDSAddress, host)
	}
	h2 := &upstreamhttpv3.HttpProtocolOptions{UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
		ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
	}}}
	return &bootstrapv3.Bootstrap{
		Node:            &corev3.Node{Id: o.NodeID, Cluster: o.NodeCluster},
		OverloadManager: overloadManager(o.MaxHeapBytes),
		Admin: &bootstrapv3.Admin{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: o.AdminPort},
		}}}},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:                   corev3.ApiConfigSource_GRPC,
				TransportApiVersion:       corev3.ApiVersion_V3,
				SetNodeOnFirstMessageOnly: true,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: XDSCluster},
				}}},
			},
			CdsConfig: adsSource(),
			LdsConfig: adsSource(),
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{{
			Name:                          XDSCluster,
			ConnectTimeout:                durationpb.New(time.Second),
			ClusterDiscoveryType:          &clusterv3.Cluster_Type{Type: typ},
			TypedExtensionProtocolOptions: map[string]*anypb.Any{httpProtocolOptionsName: mustAny(h2)},
			LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: XDSCluster, Endpoints: []*endpointv3.LocalityLbEndpoints{{
				LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}}}},
			}}},
			TransportSocket: extensionTransportSocket(o.TLS),
		}}},
	}, nil
}

// BootstrapYAML renders a bootstrap as the YAML `envoy -c` reads, keys
// sorted, so the output is stable.
func BootstrapYAML(b *bootstrapv3.Bootstrap) ([]byte, error) {
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(b)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(js, &v); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
