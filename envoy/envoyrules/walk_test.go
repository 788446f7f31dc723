package envoyrules

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	dubbov3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/dubbo_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// recorder notes what Walk tells it, one line an event.
type recorder struct {
	events []string
	errs   []error
}

func (r *recorder) Message(p Path, m protoreflect.Message) {
	r.events = append(r.events, fmt.Sprintf("%s %s field=%t", p, m.Descriptor().Name(), p.Field() != nil))
}

func (r *recorder) BadAny(p Path, url string, linked bool, err error) {
	r.events = append(r.events, fmt.Sprintf("%s bad %q linked=%t", p, url, linked))
	r.errs = append(r.errs, err)
}

func TestWalk(t *testing.T) {
	st, err := structpb.NewStruct(map[string]any{"k": map[string]any{"nested": 1}})
	if err != nil {
		t.Fatal(err)
	}
	c := &clusterv3.Cluster{
		Name:           "c",
		ConnectTimeout: durationpb.New(1),
		TransportSocket: &corev3.TransportSocket{Name: "tls",
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: packAny(t, &tlsv3.UpstreamTlsContext{
				CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificates: []*tlsv3.TlsCertificate{{}, {}}},
			})}},
		// Sorted by key: "a" then "b", "c", "d".
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"d": {TypeUrl: "type.googleapis.com/" + tHTTPOptions, Value: []byte{0xff}},
			"b": {TypeUrl: "type.googleapis.com/sluice.test.NotLinked"},
			"c": {},
			"a": packAny(t, &upstreamhttpv3.HttpProtocolOptions{}),
		},
		Metadata: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"m": st}},
	}
	r := &recorder{}
	Walk(c.ProtoReflect(), r)
	// Fields in Range's order, the order of the .proto declaration.
	want := []string{
		" Cluster field=false",
		// A well-known type is told of, not walked into.
		"connect_timeout Duration field=true",
		`typed_extension_protocol_options["a"](` + tHTTPOptions + `) HttpProtocolOptions field=false`,
		`typed_extension_protocol_options["b"] bad "type.googleapis.com/sluice.test.NotLinked" linked=false`,
		`typed_extension_protocol_options["c"] bad "" linked=false`,
		`typed_extension_protocol_options["d"] bad "type.googleapis.com/` + tHTTPOptions + `" linked=true`,
		"transport_socket TransportSocket field=true",
		"transport_socket.typed_config(" + tUpstreamTLS + ") UpstreamTlsContext field=false",
		"transport_socket.typed_config(" + tUpstreamTLS + ").common_tls_context CommonTlsContext field=true",
		"transport_socket.typed_config(" + tUpstreamTLS + ").common_tls_context.tls_certificates[0] TlsCertificate field=true",
		"transport_socket.typed_config(" + tUpstreamTLS + ").common_tls_context.tls_certificates[1] TlsCertificate field=true",
		"metadata Metadata field=true",
		`metadata.filter_metadata["m"] Struct field=true`,
	}
	if !slices.Equal(r.events, want) {
		t.Errorf("Walk told\n%s\nwant\n%s", join(r.events), join(want))
	}
	if len(r.errs) != 3 || !errors.Is(r.errs[0], protoregistry.NotFound) || !errors.Is(r.errs[1], protoregistry.NotFound) ||
		errors.Is(r.errs[2], protoregistry.NotFound) || r.errs[2] == nil {
		t.Errorf("BadAny errors = %v, want NotFound, NotFound, an unmarshal error", r.errs)
	}
}

// Map keys that are not strings sort by value, not by text, and are
// rendered unquoted; an Any as the root is unpacked in place.
func TestWalkIntKeysAndRootAny(t *testing.T) {
	m := &dubbov3.MethodMatch{ParamsMatch: map[uint32]*dubbov3.MethodMatch_ParameterMatchSpecifier{
		10: {}, 2: {}, 1: {},
	}}
	r := &recorder{}
	Walk(packAny(t, m).ProtoReflect(), r)
	typ := "(envoy.extensions.filters.network.dubbo_proxy.v3.MethodMatch)"
	want := []string{
		typ + " MethodMatch field=false",
		typ + ".params_match[1] ParameterMatchSpecifier field=true",
		typ + ".params_match[2] ParameterMatchSpecifier field=true",
		typ + ".params_match[10] ParameterMatchSpecifier field=true",
	}
	if !slices.Equal(r.events, want) {
		t.Errorf("Walk told\n%s\nwant\n%s", join(r.events), join(want))
	}
}

func join(lines []string) string {
	var s string
	for _, l := range lines {
		s += "\t" + l + "\n"
	}
	return s
}
