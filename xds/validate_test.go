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
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicegw/sluice/envoy/envoyrules"
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
			TransportApiVersion: corev3.ApiVersion_V3, // PGV's error alone
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

// providerTLSCluster is an https provider cluster with the validation
// context v, as providerCluster builds it.
func providerTLSCluster(t testing.TB, v *tlsv3.CertificateValidationContext) *clusterv3.Cluster {
	t.Helper()
	tc := &tlsv3.UpstreamTlsContext{Sni: "api.openai.com", CommonTlsContext: &tlsv3.CommonTlsContext{
		AlpnProtocols:         []string{"http/1.1"},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: v},
	}}
	return &clusterv3.Cluster{
		Name:                 "openai",
		ConnectTimeout:       durationpb.New(time.Second),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS},
		TransportSocket: &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: packAny(t, tc)}},
	}
}

func sanExact(host string) []*tlsv3.SubjectAltNameMatcher {
	return []*tlsv3.SubjectAltNameMatcher{{SanType: tlsv3.SubjectAltNameMatcher_DNS,
		Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: host}}}}
}

// Validate runs Envoy's load-time rules (envoy/envoyrules) after PGV and
// reports each violation with its field path, Refused and Ignored alike.
func TestValidateEnvoyRules(t *testing.T) {
	const tlsPath = "transport_socket.typed_config(envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext).common_tls_context.validation_context"
	routerFirst := exampleHCM(t)
	routerFirst.HttpFilters = append(routerFirst.HttpFilters[2:], routerFirst.HttpFilters[:2]...)
	tests := []struct {
		name  string
		msg   proto.Message
		want  []string // prefixes of each joined error, in order
		rules []string // the envoyrules rule of each
	}{
		{
			// The configuration that broke every https provider on a real
			// Envoy while PGV passed it: system roots and a SAN matcher,
			// no trusted_ca.
			name: "SAN matcher without trusted_ca",
			msg: providerTLSCluster(t, &tlsv3.CertificateValidationContext{
				SystemRootCerts: &tlsv3.CertificateValidationContext_SystemRootCerts{}, MatchTypedSubjectAltNames: sanExact("api.openai.com")}),
			want: []string{
				tlsPath + ": SAN-based verification of peer certificates without trusted CA is insecure and not allowed",
				tlsPath + ".system_root_certs: system_root_certs is [#not-implemented-hide:] in Envoy's API and Envoy never reads it",
			},
			rules: []string{"tls.san-without-trusted-ca", "hidden.CertificateValidationContext.system_root_certs"},
		},
		{
			name: "router before the Sluice filters",
			msg:  listenerWithHCM(t, routerFirst),
			want: []string{
				vtHCMPath + ".http_filters[0]: Error: terminal filter named envoy.filters.http.router of type envoy.filters.http.router must be the last filter in a http filter chain.",
				vtHCMPath + ".http_filters[2]: Error: non-terminal filter named envoy.filters.http.ext_proc of type envoy.filters.http.ext_proc is the last filter in a http filter chain.",
			},
			rules: []string{"hcm.terminal-filter", "hcm.terminal-filter"},
		},
		{
			name: "PGV errors first, then the rules",
			msg: func() proto.Message {
				c := providerTLSCluster(t, &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sanExact("api.openai.com")})
				c.Name = ""
				return c
			}(),
			want: []string{
				"invalid Cluster.Name: value length must be at least 1 runes",
				tlsPath + ": SAN-based verification",
			},
			rules: []string{"", "tls.san-without-trusted-ca"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.msg)
			if err == nil {
				t.Fatal("Validate = nil, want an error")
			}
			errs := err.(interface{ Unwrap() []error }).Unwrap()
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tt.want), err)
			}
			for i, e := range errs {
				if !strings.HasPrefix(e.Error(), tt.want[i]) {
					t.Errorf("error %d:\n got %s\nwant %s…", i, e, tt.want[i])
				}
				var v envoyrules.Violation
				if got := errors.As(e, &v); got != (tt.rules[i] != "") || (got && v.Rule.Name != tt.rules[i]) {
					t.Errorf("error %d is rule %v, want %q", i, v.Rule, tt.rules[i])
				}
			}
		})
	}

	// A proxyless gRPC client is not Envoy: the TLS form grpc-go reads
	// (system roots or a certificate provider, no trusted_ca) passes
	// ValidateAPI, which is PGV alone.
	grpcForm := providerTLSCluster(t, &tlsv3.CertificateValidationContext{
		SystemRootCerts: &tlsv3.CertificateValidationContext_SystemRootCerts{}, MatchTypedSubjectAltNames: sanExact("api.openai.com")})
	if err := ValidateAPI(grpcForm); err != nil {
		t.Errorf("ValidateAPI = %v, want nil", err)
	}
	if err := ValidateAPI(&clusterv3.Cluster{}); err == nil || !strings.HasPrefix(err.Error(), "invalid Cluster.Name") {
		t.Errorf("ValidateAPI of a cluster without a name = %v, want PGV's error", err)
	}

	// The near miss: the same cluster with a trusted CA bundle.
	ok := providerTLSCluster(t, &tlsv3.CertificateValidationContext{
		TrustedCa:                 &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: "/etc/ssl/certs/ca-certificates.crt"}},
		MatchTypedSubjectAltNames: sanExact("api.openai.com"),
	})
	if err := Validate(ok); err != nil {
		t.Errorf("a cluster with trusted_ca: %v", err)
	}
}

// ValidateSet runs the rules across resources, and nothing else.
func TestValidateSet(t *testing.T) {
	static := func(name string) *clusterv3.Cluster {
		return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}}
	}
	hcm := exampleHCM(t)
	hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{Name: "inline",
		VirtualHosts: []*routev3.VirtualHost{{Name: "all", Domains: []string{"*"}, Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "missing"}}},
		}}}}}}
	r := &Resources{
		Clusters:  []*clusterv3.Cluster{static("a"), static("a")},
		Listeners: []*listenerv3.Listener{listenerWithHCM(t, hcm)},
	}
	err := ValidateSet(r)
	want := []string{
		`cluster "a": duplicate cluster a found [refused by Envoy: set.unique-cluster-names]`,
		`listener "sluice": ` + vtHCMPath + `.route_config.virtual_hosts[0].routes[0].route.cluster: route: unknown cluster 'missing' [refused by Envoy: set.route-clusters-exist]`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("ValidateSet =\n%v\nwant\n%s", err, strings.Join(want, "\n"))
	}
	// Each resource on its own is Validate's: a cluster PGV refuses passes.
	if err := ValidateSet(&Resources{Clusters: []*clusterv3.Cluster{{}}}); err != nil {
		t.Errorf("ValidateSet of one invalid cluster = %v, want nil", err)
	}
}

// httpPolicy has every kind of plain-HTTP provider cluster: an IP (EDS),
// listed endpoints (EDS), a DNS name (LOGICAL_DNS), and a fallback model.
const httpPolicy = `
listen: {grpc: "127.0.0.1:9001", envoy: "127.0.0.1:10000"}
providers:
  - {name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8081"}
  - {name: pool, kind: openai-compatible, base_url: "http://vllm.internal:8000/v1", endpoints: ["10.0.0.1:8000", "10.0.0.2:8000"]}
  - {name: dns, kind: openai-compatible, base_url: "http://vllm.internal:8000/v1", http2: true}
models:
  - {name: llama, provider: pool}
  - name: llama-ha
    upstream: llama
    providers: [{name: local}, {name: dns}]
`

// Sluice's own generated configuration for Envoy passes every rule: each
// resource Build emits, of each kind, and the set as a whole. The https
// case is testPolicy's TLS provider clusters. (What Build emits for
// proxyless gRPC clients is not loaded by Envoy: ValidateAPI only.)
func TestGeneratedConfigPassesEnvoyRules(t *testing.T) {
	for _, pc := range []struct{ name, yaml string }{{"http providers", httpPolicy}, {"https providers", testPolicy}} {
		p := compile(t, pc.yaml)
		for _, f := range []Flavour{FlavourEnvoy} {
			r, err := Build(p, Groups(p)[0], f)
			if err != nil {
				t.Fatal(err)
			}
			kinds := []struct {
				kind      string
				resources []proto.Message
			}{
				{"clusters", messages(r.Clusters)},
				{"endpoints", messages(r.Endpoints)},
				{"routes", messages(r.Routes)},
				{"listeners", messages(r.Listeners)},
			}
			for _, k := range kinds {
				t.Run(pc.name+"/"+f.String()+"/"+k.kind, func(t *testing.T) {
					if len(k.resources) == 0 && k.kind != "endpoints" {
						t.Fatalf("Build emitted no %s", k.kind)
					}
					for _, m := range k.resources {
						if err := Validate(m); err != nil {
							t.Errorf("%s:\n%v", cachev3.GetResourceName(m), err)
						}
					}
				})
			}
			t.Run(pc.name+"/"+f.String()+"/set", func(t *testing.T) {
				if err := ValidateSet(r); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

func messages[T proto.Message](items []T) []proto.Message {
	out := make([]proto.Message, len(items))
	for i, m := range items {
		out[i] = m
	}
	return out
}

// Snapshot runs Envoy's rules, per resource and across the set, on what it
// serves to Envoy, and PGV alone on what it serves a proxyless gRPC client.
func TestSnapshotRunsEnvoyRules(t *testing.T) {
	p := compile(t, httpPolicy)
	grpcForm := providerTLSCluster(t, &tlsv3.CertificateValidationContext{
		SystemRootCerts: &tlsv3.CertificateValidationContext_SystemRootCerts{}, MatchTypedSubjectAltNames: sanExact("api.openai.com")})
	for _, tt := range []struct {
		flavour Flavour
		extra   []*clusterv3.Cluster
		want    []string // substrings of Snapshot's error; none: it succeeds
	}{
		{FlavourEnvoy, []*clusterv3.Cluster{grpcForm}, []string{`cds "openai": ` + "transport_socket.typed_config(envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext).common_tls_context.validation_context: SAN-based verification"}},
		{FlavourEnvoy, nil, nil},
		{FlavourGRPC, []*clusterv3.Cluster{grpcForm}, nil},
	} {
		r, err := Build(p, Groups(p)[0], tt.flavour)
		if err != nil {
			t.Fatal(err)
		}
		r.Clusters = append(r.Clusters, tt.extra...)
		_, _, err = Snapshot(r)
		if len(tt.want) == 0 {
			if err != nil {
				t.Errorf("%s with %d extra clusters: %v", tt.flavour, len(tt.extra), err)
			}
			continue
		}
		for _, w := range tt.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: Snapshot = %v, want it to contain %q", tt.flavour, err, w)
			}
		}
	}
	// Two clusters of one name: ValidateSet's, for Envoy.
	r, err := Build(p, Groups(p)[0], FlavourEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	r.Clusters = append(r.Clusters, r.Clusters[0])
	if _, _, err := Snapshot(r); err == nil || !strings.Contains(err.Error(), "duplicate cluster "+r.Clusters[0].GetName()+" found") {
		t.Errorf("Snapshot with a duplicate cluster = %v", err)
	}
}
