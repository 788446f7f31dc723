package xds

import (
	"errors"
	"strings"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicegw/sluice/internal/chain"
)

const (
	vtTypeHCM         = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	vtTypeAuthz       = "envoy.extensions.filters.http.ext_authz.v3.ExtAuthz"
	vtTypeHTTPOptions = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	vtHCMPath         = "filter_chains[0].filters[0].typed_config(" + vtTypeHCM + ")"
)

func packAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// listenerWithHCM wraps an HttpConnectionManager in a listener, as Sluice
// serves it.
func listenerWithHCM(t testing.TB, hcm *hcmv3.HttpConnectionManager) *listenerv3.Listener {
	t.Helper()
	return &listenerv3.Listener{
		Name: "sluice",
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address:       "0.0.0.0",
			PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 10000},
		}}},
		PerConnectionBufferLimitBytes: wrapperspb.UInt32(chain.MaxRequestBodySize),
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{
				Name:       "envoy.filters.network.http_connection_manager",
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: packAny(t, hcm)},
			}},
		}},
	}
}

// exampleHCM is the listener's HttpConnectionManager as docs/architecture.md
// describes it: RDS over ADS, chain.HTTPFilters then the router, a stream
// idle timeout and a JSON access log carrying Sluice's usage metadata.
func exampleHCM(t testing.TB) *hcmv3.HttpConnectionManager {
	t.Helper()
	filters := chain.HTTPFilters(chain.Options{Cluster: "sluice.extension"})
	filters = append(filters, &hcmv3.HttpFilter{
		Name:       "envoy.filters.http.router",
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: packAny(t, &routerv3.Router{})},
	})
	format, err := structpb.NewStruct(map[string]any{
		"request_id":       "%REQ(X-REQUEST-ID)%",
		"status":           "%RESPONSE_CODE%",
		"upstream_cluster": "%UPSTREAM_CLUSTER%",
		"model":            "%DYNAMIC_METADATA(sluice:model)%",
		"provider":         "%DYNAMIC_METADATA(sluice:provider)%",
		"input_tokens":     "%DYNAMIC_METADATA(sluice:input_tokens)%",
		"output_tokens":    "%DYNAMIC_METADATA(sluice:output_tokens)%",
		"cost_micros":      "%DYNAMIC_METADATA(sluice:cost_micros)%",
	})
	if err != nil {
		t.Fatal(err)
	}
	accessLog := &filev3.FileAccessLog{
		Path: "/dev/stdout",
		AccessLogFormat: &filev3.FileAccessLog_LogFormat{LogFormat: &corev3.SubstitutionFormatString{
			Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: format},
		}},
	}
	return &hcmv3.HttpConnectionManager{
		StatPrefix: "sluice",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			RouteConfigName: "sluice",
			ConfigSource: &corev3.ConfigSource{
				ResourceApiVersion:    corev3.ApiVersion_V3,
				ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
			},
		}},
		HttpFilters:       filters,
		StreamIdleTimeout: durationpb.New(5 * time.Minute),
		AccessLog: []*accesslogv3.AccessLog{{
			Name:       "envoy.access_loggers.file",
			ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: packAny(t, accessLog)},
		}},
	}
}

func TestValidateChainListener(t *testing.T) {
	l := listenerWithHCM(t, exampleHCM(t))
	if err := Validate(l); err != nil {
		t.Fatalf("Sluice's listener: %v", err)
	}
}

// The generated ValidateAll stops at an Any; Validate must not.
func TestValidateDescendsIntoAny(t *testing.T) {
	hcm := exampleHCM(t)
	hcm.StatPrefix = ""
	l := listenerWithHCM(t, hcm)
	if err := l.ValidateAll(); err != nil {
		t.Fatalf("ValidateAll on the listener alone now catches it (%v): this test no longer proves the descent", err)
	}
	err := Validate(l)
	want := vtHCMPath + ": invalid HttpConnectionManager.StatPrefix: "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Validate = %v, want an error starting %q", err, want)
	}
}

func TestValidateErrors(t *testing.T) {
	// An HttpConnectionManager whose ext_authz names no cluster: an Any
	// inside an Any.
	nested := exampleHCM(t)
	nested.HttpFilters[0] = &hcmv3.HttpFilter{
		Name: chain.AuthzFilterName,
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: packAny(t, &extauthzv3.ExtAuthz{
			Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: &corev3.GrpcService{
				TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{}},
			}},
		})},
	}
	// Two problems in one listener: both are reported.
	two := exampleHCM(t)
	two.StatPrefix = ""
	two.HttpFilters[1].ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/sluice.test.NotLinked"}}

	unlinked := listenerWithHCM(t, exampleHCM(t))
	unlinked.FilterChains[0].Filters[0].ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: &anypb.Any{
		TypeUrl: "type.googleapis.com/sluice.test.NotLinked",
		Value:   []byte{1, 2, 3},
	}}
	garbled := listenerWithHCM(t, exampleHCM(t))
	garbled.FilterChains[0].Filters[0].GetTypedConfig().Value = []byte{0xff, 0xff, 0xff}
	noTypeURL := listenerWithHCM(t, exampleHCM(t))
	noTypeURL.FilterChains[0].Filters[0].ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: &anypb.Any{}}

	// The root message's own rules, and a path through a map.
	root := listenerWithHCM(t, exampleHCM(t))
	root.FilterChains[0].Filters[0].Name = ""
	cluster := &clusterv3.Cluster{
		Name: "sluice.extension",
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			vtTypeHTTPOptions: packAny(t, &httpv3.HttpProtocolOptions{
				UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
					ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{}, // no protocol chosen
				},
			}),
		},
	}

	tests := []struct {
		name string
		msg  proto.Message
		want []string // prefixes of each joined error, in order
	}{
		{"nested Any", listenerWithHCM(t, nested), []string{
			vtHCMPath + ".http_filters[0].typed_config(" + vtTypeAuthz + "): invalid ExtAuthz.GrpcService: embedded message failed validation | caused by: invalid GrpcService.EnvoyGrpc: embedded message failed validation | caused by: invalid GrpcService_EnvoyGrpc.ClusterName",
		}},
		{"all errors", listenerWithHCM(t, two), []string{
			vtHCMPath + ": invalid HttpConnectionManager.StatPrefix: ",
			vtHCMPath + ".http_filters[1].typed_config: type.googleapis.com/sluice.test.NotLinked: type not linked into Sluice",
		}},
		{"unlinked type", unlinked, []string{
			"filter_chains[0].filters[0].typed_config: type.googleapis.com/sluice.test.NotLinked: type not linked into Sluice",
		}},
		{"garbled Any", garbled, []string{
			"filter_chains[0].filters[0].typed_config: type.googleapis.com/" + vtTypeHCM + ": ",
		}},
		{"Any without type", noTypeURL, []string{
			"filter_chains[0].filters[0].typed_config: Any without a type_url",
		}},
		{"root rules", root, []string{
			"invalid Listener.FilterChains[0]: embedded message failed validation | caused by: invalid FilterChain.Filters[0]: embedded message failed validation | caused by: invalid Filter.Name",
		}},
		{"map value", cluster, []string{
			`typed_extension_protocol_options["` + vtTypeHTTPOptions + `"](` + vtTypeHTTPOptions + `): invalid HttpProtocolOptions.ExplicitHttpConfig: `,
		}},
		{"root Any", packAny(t, &hcmv3.HttpConnectionManager{}), []string{
			"(" + vtTypeHCM + "): invalid HttpConnectionManager.StatPrefix",
		}},
		{"nil", nil, []string{"validate: nil message"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.msg)
			if err == nil {
				t.Fatal("Validate = nil, want an error")
			}
			var errs []error
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			} else {
				errs = []error{err}
			}
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tt.want), err)
			}
			for i, e := range errs {
				if !strings.HasPrefix(e.Error(), tt.want[i]) {
					t.Errorf("error %d:\n got %s\nwant %s…", i, e, tt.want[i])
				}
			}
		})
	}
}

func TestValidateUnlinkedWrapsNotFound(t *testing.T) {
	l := listenerWithHCM(t, exampleHCM(t))
	l.FilterChains[0].Filters[0].GetTypedConfig().TypeUrl = "type.googleapis.com/sluice.test.NotLinked"
	if err := Validate(l); !errors.Is(err, protoregistry.NotFound) {
		t.Errorf("Validate = %v, want it to wrap protoregistry.NotFound", err)
	}
}

// Every extension type Sluice emits resolves, so that protojson parses it
// and Validate unpacks it.
func TestExtensionsLinked(t *testing.T) {
	for _, name := range []protoreflect.FullName{
		"envoy.extensions.access_loggers.file.v3.FileAccessLog",
		"envoy.extensions.access_loggers.stream.v3.StdoutAccessLog",
		"envoy.extensions.access_loggers.stream.v3.StderrAccessLog",
		"envoy.extensions.clusters.aggregate.v3.ClusterConfig",
		vtTypeAuthz,
		"envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
		"envoy.extensions.filters.http.router.v3.Router",
		"envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec",
		vtTypeHCM,
		"envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig",
		"envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
		vtTypeHTTPOptions,
	} {
		if _, err := protoregistry.GlobalTypes.FindMessageByName(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	l := listenerWithHCM(b, exampleHCM(b))
	b.ReportAllocs()
	for b.Loop() {
		if err := Validate(l); err != nil {
			b.Fatal(err)
		}
	}
}
