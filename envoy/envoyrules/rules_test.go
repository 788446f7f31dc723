package envoyrules

import (
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	tUpstreamTLS = "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
	tHCM         = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	tHTTPOptions = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

func packAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tlsCluster is a cluster speaking TLS with the given validation context,
// as Sluice's provider clusters do.
func tlsCluster(t testing.TB, v *tlsv3.CertificateValidationContext) *clusterv3.Cluster {
	t.Helper()
	tc := &tlsv3.UpstreamTlsContext{Sni: "api.example.com", CommonTlsContext: &tlsv3.CommonTlsContext{
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: v},
	}}
	return &clusterv3.Cluster{
		Name:                 "provider",
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS},
		TransportSocket: &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: packAny(t, tc)}},
	}
}

// secretBootstrap is a bootstrap with one static cluster speaking TLS with
// ctc, and the given static secrets.
func secretBootstrap(t testing.TB, ctc *tlsv3.CommonTlsContext, secrets ...*tlsv3.Secret) *bootstrapv3.Bootstrap {
	t.Helper()
	c := tlsCluster(t, nil)
	c.TransportSocket.ConfigType = &corev3.TransportSocket_TypedConfig{TypedConfig: packAny(t, &tlsv3.UpstreamTlsContext{CommonTlsContext: ctc})}
	return &bootstrapv3.Bootstrap{StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{c}, Secrets: secrets}}
}

func certSecret(name string) *tlsv3.Secret {
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: caFile("/etc/envoy/client.pem"), PrivateKey: caFile("/etc/envoy/client-key.pem")}}}
}

func cvcSecret(name string, v *tlsv3.CertificateValidationContext) *tlsv3.Secret {
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{ValidationContext: v}}
}

// combined is a combined validation context: SAN matchers by default, the
// rest from the secret named name.
func combined(name string, sans []*tlsv3.SubjectAltNameMatcher) *tlsv3.CommonTlsContext {
	return &tlsv3.CommonTlsContext{ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
		CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sans},
			ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: name},
		}}}
}

func sanDNS(host string) []*tlsv3.SubjectAltNameMatcher {
	return []*tlsv3.SubjectAltNameMatcher{{SanType: tlsv3.SubjectAltNameMatcher_DNS,
		Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: host}}}}
}

func caFile(path string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: path}}
}

func inline(s string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: s}}
}

func httpFilter(t testing.TB, name string, m proto.Message) *hcmv3.HttpFilter {
	t.Helper()
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: packAny(t, m)}}
}

func router(t testing.TB) *hcmv3.HttpFilter {
	return httpFilter(t, "envoy.filters.http.router", &routerv3.Router{})
}

func extProc() *extprocv3.ExternalProcessor {
	return &extprocv3.ExternalProcessor{GrpcService: grpcService("sluice")}
}

func grpcService(cluster string) *corev3.GrpcService {
	return &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster}}}
}

func extAuthz() *extauthzv3.ExtAuthz {
	return &extauthzv3.ExtAuthz{
		Services:            &extauthzv3.ExtAuthz_GrpcService{GrpcService: grpcService("sluice")},
		TransportApiVersion: corev3.ApiVersion_V3,
	}
}

// listenerWith is a listener whose one filter chain runs hcm.
func listenerWith(t testing.TB, name string, hcm *hcmv3.HttpConnectionManager) *listenerv3.Listener {
	t.Helper()
	return &listenerv3.Listener{Name: name, FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
		Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: packAny(t, hcm)},
	}}}}}
}

func routeTo(cluster string) *routev3.Route {
	return &routev3.Route{
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
	}
}

func routeConfig(name string, routes ...*routev3.Route) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{Name: "all", Domains: []string{"*"}, Routes: routes}}}
}

func inlineHCM(rc *routev3.RouteConfiguration, filters ...*hcmv3.HttpFilter) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{StatPrefix: "in",
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc}, HttpFilters: filters}
}

// withOptions is a STATIC cluster with typed HttpProtocolOptions.
func withOptions(t testing.TB, o *upstreamhttpv3.HttpProtocolOptions) *clusterv3.Cluster {
	t.Helper()
	return &clusterv3.Cluster{Name: "c", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		TypedExtensionProtocolOptions: map[string]*anypb.Any{tHTTPOptions: packAny(t, o)}}
}

func upstreamFilters(t testing.TB, fs ...*hcmv3.HttpFilter) *upstreamhttpv3.HttpProtocolOptions {
	return &upstreamhttpv3.HttpProtocolOptions{HttpFilters: fs}
}

func codec(t testing.TB) *hcmv3.HttpFilter {
	return httpFilter(t, "envoy.filters.http.upstream_codec", &upstreamcodecv3.UpstreamCodec{})
}

func aggregate(t testing.TB, lb clusterv3.Cluster_LbPolicy) *clusterv3.Cluster {
	t.Helper()
	return &clusterv3.Cluster{Name: "agg", LbPolicy: lb, ClusterDiscoveryType: &clusterv3.Cluster_ClusterType{ClusterType: &clusterv3.Cluster_CustomClusterType{
		Name: "envoy.clusters.aggregate", TypedConfig: packAny(t, &aggregatev3.ClusterConfig{Clusters: []string{"a"}}),
	}}}
}

func mode(f func(*extprocv3.ProcessingMode)) *extprocv3.ExternalProcessor {
	c := extProc()
	c.ProcessingMode = &extprocv3.ProcessingMode{}
	f(c.ProcessingMode)
	return c
}

// messageCase is a configuration a real Envoy refuses (or loads with a
// field it ignores) and a near miss it loads, for one message rule.
type messageCase struct {
	rule     string
	bad      func(t testing.TB) proto.Message
	path     string // the violation's path from bad
	msg      string // Envoy's text, exactly
	nearMiss func(t testing.TB) proto.Message
}

func messageCases() []messageCase {
	const sanMsg = "SAN-based verification of peer certificates without trusted CA is insecure and not allowed"
	tlsCtxPath := "transport_socket.typed_config(" + tUpstreamTLS + ").common_tls_context"
	tlsPath := tlsCtxPath + ".validation_context"
	hcmPath := "filter_chains[0].filters[0].typed_config(" + tHCM + ")"
	optsPath := `typed_extension_protocol_options["` + tHTTPOptions + `"](` + tHTTPOptions + ")"
	return []messageCase{
		// TLS. The first case is the configuration that broke every https
		// provider: system roots and a SAN matcher, no trusted_ca.
		{rule: "tls.san-without-trusted-ca",
			bad: func(t testing.TB) proto.Message {
				return tlsCluster(t, &tlsv3.CertificateValidationContext{
					SystemRootCerts: &tlsv3.CertificateValidationContext_SystemRootCerts{}, MatchTypedSubjectAltNames: sanDNS("api.example.com")})
			},
			path: tlsPath, msg: sanMsg,
			nearMiss: func(t testing.TB) proto.Message {
				return tlsCluster(t, &tlsv3.CertificateValidationContext{
					TrustedCa: caFile("/etc/ssl/certs/ca-certificates.crt"), MatchTypedSubjectAltNames: sanDNS("api.example.com")})
			}},
		{rule: "tls.san-without-trusted-ca",
			bad: func(t testing.TB) proto.Message {
				return tlsCluster(t, &tlsv3.CertificateValidationContext{TrustedCa: inline(""),
					MatchSubjectAltNames: []*matcherv3.StringMatcher{{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "a"}}}})
			},
			path: tlsPath, msg: sanMsg,
			nearMiss: func(t testing.TB) proto.Message {
				// A custom validator takes the place of the CA.
				return tlsCluster(t, &tlsv3.CertificateValidationContext{CustomValidatorConfig: &corev3.TypedExtensionConfig{Name: "v"},
					MatchSubjectAltNames: []*matcherv3.StringMatcher{{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "a"}}}})
			}},
		{rule: "tls.crl-without-trusted-ca",
			bad: func(t testing.TB) proto.Message {
				return tlsCluster(t, &tlsv3.CertificateValidationContext{Crl: caFile("/etc/crl.pem")})
			},
			path: tlsPath + ".crl", msg: "Failed to load CRL from /etc/crl.pem without trusted CA",
			nearMiss: func(t testing.TB) proto.Message {
				return tlsCluster(t, &tlsv3.CertificateValidationContext{Crl: caFile("/etc/crl.pem"), TrustedCa: inline("-----BEGIN CERTIFICATE-----")})
			}},
		{rule: "tls.crl-without-trusted-ca",
			bad: func(t testing.TB) proto.Message {
				return tlsCluster(t, &tlsv3.CertificateValidationContext{Crl: inline("crl")})
			},
			path: tlsPath + ".crl", msg: "Failed to load CRL from <inline> without trusted CA",
			nearMiss: func(t testing.TB) proto.Message {
				return tlsCluster(t, &tlsv3.CertificateValidationContext{Crl: inline("")})
			}},
		{rule: "tls.allow-expired-without-trusted-ca",
			bad: func(t testing.TB) proto.Message {
				return tlsCluster(t, &tlsv3.CertificateValidationContext{AllowExpiredCertificate: true})
			},
			path: tlsPath + ".allow_expired_certificate", msg: "Certificate validity period is always ignored without trusted CA",
			nearMiss: func(t testing.TB) proto.Message {
				return tlsCluster(t, &tlsv3.CertificateValidationContext{AllowExpiredCertificate: true, TrustedCa: caFile("/ca.pem")})
			}},
		{rule: "tls.sni-null-byte",
			bad:  func(testing.TB) proto.Message { return &tlsv3.UpstreamTlsContext{Sni: "a\x00b"} },
			path: "sni", msg: "SNI names containing NULL-byte are not allowed",
			nearMiss: func(testing.TB) proto.Message { return &tlsv3.UpstreamTlsContext{Sni: "ab"} }},
		{rule: "tls.client-single-certificate",
			bad: func(testing.TB) proto.Message {
				return &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
					TlsCertificates: []*tlsv3.TlsCertificate{{}}, TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "s"}}}}
			},
			path: "common_tls_context", msg: "Multiple TLS certificates are not supported for client contexts",
			nearMiss: func(testing.TB) proto.Message {
				return &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificates: []*tlsv3.TlsCertificate{{}}}}
			}},

		// Static secrets, in a bootstrap.
		{rule: "tls.static-secret-unknown",
			bad: func(t testing.TB) proto.Message {
				// A validation context of that name is not a certificate.
				return secretBootstrap(t, &tlsv3.CommonTlsContext{TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "client"}}},
					cvcSecret("client", &tlsv3.CertificateValidationContext{TrustedCa: caFile("/ca.pem")}))
			},
			path: "static_resources.clusters[0]." + tlsCtxPath + ".tls_certificate_sds_secret_configs[0]", msg: "Unknown static secret: client",
			nearMiss: func(t testing.TB) proto.Message {
				return secretBootstrap(t, &tlsv3.CommonTlsContext{TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "client"}}}, certSecret("client"))
			}},
		{rule: "tls.static-secret-unknown",
			bad: func(t testing.TB) proto.Message {
				return secretBootstrap(t, combined("ca", sanDNS("sluice.internal")), certSecret("client"))
			},
			path: "static_resources.clusters[0]." + tlsCtxPath + ".combined_validation_context.validation_context_sds_secret_config",
			msg:  "Unknown static certificate validation context: ca",
			nearMiss: func(t testing.TB) proto.Message {
				// With an sds_config the secret is fetched, not looked up.
				ctc := combined("ca", sanDNS("sluice.internal"))
				ctc.GetCombinedValidationContext().ValidationContextSdsSecretConfig.SdsConfig = &corev3.ConfigSource{
					ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
				return secretBootstrap(t, ctc)
			}},
		{rule: "tls.static-validation-without-trusted-ca",
			bad: func(t testing.TB) proto.Message {
				return secretBootstrap(t, combined("ca", sanDNS("sluice.internal")),
					cvcSecret("ca", &tlsv3.CertificateValidationContext{Crl: inline("")}))
			},
			path: "static_resources.clusters[0]." + tlsCtxPath + ".combined_validation_context", msg: sanMsg,
			nearMiss: func(t testing.TB) proto.Message {
				return secretBootstrap(t, combined("ca", sanDNS("sluice.internal")),
					cvcSecret("ca", &tlsv3.CertificateValidationContext{TrustedCa: caFile("/etc/envoy/sluice-ca.pem")}))
			}},
		{rule: "tls.static-validation-without-trusted-ca",
			bad: func(t testing.TB) proto.Message {
				return secretBootstrap(t, &tlsv3.CommonTlsContext{ValidationContextType: &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{
					ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "ca"}}},
					cvcSecret("ca", &tlsv3.CertificateValidationContext{AllowExpiredCertificate: true}))
			},
			path: "static_resources.clusters[0]." + tlsCtxPath + ".validation_context_sds_secret_config",
			msg:  "Certificate validity period is always ignored without trusted CA",
			nearMiss: func(t testing.TB) proto.Message {
				// Without SAN matchers or the like, no CA is needed.
				return secretBootstrap(t, combined("ca", nil), cvcSecret("ca", &tlsv3.CertificateValidationContext{}))
			}},

		// [#not-implemented-hide:] fields.
		{rule: "hidden.CertificateValidationContext.system_root_certs",
			bad: func(t testing.TB) proto.Message {
				return tlsCluster(t, &tlsv3.CertificateValidationContext{SystemRootCerts: &tlsv3.CertificateValidationContext_SystemRootCerts{}})
			},
			path: tlsPath + ".system_root_certs",
			msg:  "system_root_certs is [#not-implemented-hide:] in Envoy's API and Envoy never reads it, so it has no effect in Envoy: the system trust store is not loaded; without trusted_ca the peer's certificate chain is not verified against any CA",
			nearMiss: func(t testing.TB) proto.Message {
				return tlsCluster(t, &tlsv3.CertificateValidationContext{TrustedCa: caFile("/etc/ssl/certs/ca-certificates.crt")})
			}},
		hiddenCase("hidden.CertificateValidationContext.ca_certificate_provider_instance", &tlsv3.CertificateValidationContext{
			CaCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: "p"}}),
		hiddenCase("hidden.CertificateValidationContext.require_signed_certificate_timestamp", &tlsv3.CertificateValidationContext{
			RequireSignedCertificateTimestamp: wrapperspb.Bool(true)}),
		hiddenCase("hidden.CommonTlsContext.tls_certificate_provider_instance", &tlsv3.CommonTlsContext{
			TlsCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: "p"}}),
		hiddenCase("hidden.CommonTlsContext.tls_certificate_certificate_provider_instance", &tlsv3.CommonTlsContext{
			TlsCertificateCertificateProviderInstance: &tlsv3.CommonTlsContext_CertificateProviderInstance{InstanceName: "p"}}),
		hiddenCase("hidden.CommonTlsContext.validation_context_certificate_provider", &tlsv3.CommonTlsContext{
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContextCertificateProvider{
				ValidationContextCertificateProvider: &tlsv3.CommonTlsContext_CertificateProvider{Name: "p"}}}),
		hiddenCase("hidden.CommonTlsContext.validation_context_certificate_provider_instance", &tlsv3.CommonTlsContext{
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContextCertificateProviderInstance{
				ValidationContextCertificateProviderInstance: &tlsv3.CommonTlsContext_CertificateProviderInstance{InstanceName: "p"}}}),
		hiddenCase("hidden.CombinedCertificateValidationContext.validation_context_certificate_provider", &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			ValidationContextCertificateProvider: &tlsv3.CommonTlsContext_CertificateProvider{Name: "p"}}),
		hiddenCase("hidden.CombinedCertificateValidationContext.validation_context_certificate_provider_instance", &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			ValidationContextCertificateProviderInstance: &tlsv3.CommonTlsContext_CertificateProviderInstance{InstanceName: "p"}}),
		hiddenCase("hidden.HttpConnectionManager.path_normalization_options", &hcmv3.HttpConnectionManager{
			PathNormalizationOptions: &hcmv3.HttpConnectionManager_PathNormalizationOptions{}}),
		hiddenCase("hidden.HttpConnectionManager.represent_ipv4_remote_address_as_ipv4_mapped_ipv6", &hcmv3.HttpConnectionManager{
			RepresentIpv4RemoteAddressAsIpv4MappedIpv6: true}),
		hiddenCase("hidden.ExtProcOverrides.async_mode", &extprocv3.ExtProcOverrides{AsyncMode: true}),
		hiddenCase("hidden.ExtProcOverrides.request_attributes", &extprocv3.ExtProcOverrides{RequestAttributes: []string{"request.path"}}),
		hiddenCase("hidden.ExtProcOverrides.response_attributes", &extprocv3.ExtProcOverrides{ResponseAttributes: []string{"response.code"}}),
		{rule: "hidden.HttpConnectionManager.typed_header_validation_config",
			bad: func(t testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"), router(t))
				h.TypedHeaderValidationConfig = &corev3.TypedExtensionConfig{Name: "uhv"}
				return listenerWith(t, "l", h)
			},
			path: hcmPath + ".typed_header_validation_config", msg: "This Envoy binary does not support header validator extensions.: 'uhv'",
			nearMiss: func(t testing.TB) proto.Message { return listenerWith(t, "l", inlineHCM(routeConfig("r"), router(t))) }},
		{rule: "hidden.HttpProtocolOptions.header_validation_config",
			bad: func(t testing.TB) proto.Message {
				return withOptions(t, &upstreamhttpv3.HttpProtocolOptions{HeaderValidationConfig: &corev3.TypedExtensionConfig{Name: "uhv"}})
			},
			path: optsPath + ".header_validation_config", msg: "This Envoy binary does not support header validator extensions: 'uhv'",
			nearMiss: func(t testing.TB) proto.Message { return withOptions(t, &upstreamhttpv3.HttpProtocolOptions{}) }},

		// The connection manager.
		{rule: "hcm.terminal-filter",
			bad: func(t testing.TB) proto.Message {
				return listenerWith(t, "l", inlineHCM(routeConfig("r"), router(t), router(t)))
			},
			path: hcmPath + ".http_filters[0]", msg: "Error: terminal filter named envoy.filters.http.router of type envoy.filters.http.router must be the last filter in a http filter chain.",
			nearMiss: func(t testing.TB) proto.Message {
				return listenerWith(t, "l", inlineHCM(routeConfig("r"), httpFilter(t, "proc", extProc()), router(t)))
			}},
		{rule: "hcm.terminal-filter",
			bad: func(t testing.TB) proto.Message {
				return inlineHCM(routeConfig("r"), httpFilter(t, "authz", extAuthz()))
			},
			path: "http_filters[0]", msg: "Error: non-terminal filter named authz of type envoy.filters.http.ext_authz is the last filter in a http filter chain.",
			nearMiss: func(t testing.TB) proto.Message {
				// A filter the table does not know may be terminal.
				return inlineHCM(routeConfig("r"), httpFilter(t, "other", &structpb.Struct{}))
			}},
		{rule: "hcm.terminal-filter",
			bad: func(t testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"), router(t))
				h.UpgradeConfigs = []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket", Filters: []*hcmv3.HttpFilter{httpFilter(t, "proc", extProc())}}}
				return h
			},
			path: "upgrade_configs[0].filters[0]", msg: "Error: non-terminal filter named proc of type envoy.filters.http.ext_proc is the last filter in a http upgrade filter chain.",
			nearMiss: func(t testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"), router(t))
				h.UpgradeConfigs = []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}}
				return h
			}},
		{rule: "hcm.last-filter-disabled",
			bad: func(t testing.TB) proto.Message {
				r := router(t)
				r.Disabled = true
				return inlineHCM(routeConfig("r"), r)
			},
			path: "http_filters[0].disabled", msg: "Error: the last (terminal) filter (envoy.filters.http.router) in the chain cannot be disabled by default.",
			nearMiss: func(t testing.TB) proto.Message {
				p := httpFilter(t, "proc", extProc())
				p.Disabled = true
				return inlineHCM(routeConfig("r"), p, router(t))
			}},
		{rule: "hcm.max-response-headers-kb",
			bad: func(testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"))
				h.CommonHttpProtocolOptions = &corev3.HttpProtocolOptions{MaxResponseHeadersKb: wrapperspb.UInt32(80)}
				return h
			},
			path: "common_http_protocol_options.max_response_headers_kb", msg: "Error: max_response_headers_kb cannot be set on http_connection_manager.",
			nearMiss: func(testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"))
				h.CommonHttpProtocolOptions = &corev3.HttpProtocolOptions{MaxHeadersCount: wrapperspb.UInt32(80)}
				return h
			}},
		{rule: "hcm.strip-host-port",
			bad: func(testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"))
				h.StripMatchingHostPort = true
				h.StripPortMode = &hcmv3.HttpConnectionManager_StripAnyHostPort{StripAnyHostPort: true}
				return h
			},
			path: "strip_matching_host_port", msg: "Error: Only one of `strip_matching_host_port` or `strip_any_host_port` can be set.",
			nearMiss: func(testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"))
				h.StripPortMode = &hcmv3.HttpConnectionManager_StripAnyHostPort{StripAnyHostPort: true}
				return h
			}},
		{rule: "hcm.original-ip-detection",
			bad: func(testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"))
				h.UseRemoteAddress = wrapperspb.Bool(true)
				h.OriginalIpDetectionExtensions = []*corev3.TypedExtensionConfig{{Name: "xff"}}
				return h
			},
			path: "original_ip_detection_extensions", msg: "Original IP detection extensions and use_remote_address may not be mixed",
			nearMiss: func(testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"))
				h.UseRemoteAddress = wrapperspb.Bool(true)
				return h
			}},
		{rule: "hcm.original-ip-detection",
			bad: func(testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"))
				h.XffNumTrustedHops = 1
				h.OriginalIpDetectionExtensions = []*corev3.TypedExtensionConfig{{Name: "xff"}}
				return h
			},
			path: "original_ip_detection_extensions", msg: "Original IP detection extensions and xff_num_trusted_hops may not be mixed",
			nearMiss: func(testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"))
				h.OriginalIpDetectionExtensions = []*corev3.TypedExtensionConfig{{Name: "xff"}}
				return h
			}},
		{rule: "hcm.access-log-options",
			bad: func(testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"))
				h.AccessLogOptions = &hcmv3.HttpConnectionManager_HcmAccessLogOptions{}
				h.FlushAccessLogOnNewRequest = true
				return h
			},
			path: "access_log_options", msg: "Only one of flush_access_log_on_new_request or access_log_options can be specified.",
			nearMiss: func(testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"))
				h.AccessLogOptions = &hcmv3.HttpConnectionManager_HcmAccessLogOptions{FlushAccessLogOnNewRequest: true}
				return h
			}},
		{rule: "hcm.access-log-options",
			bad: func(testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"))
				h.AccessLogOptions = &hcmv3.HttpConnectionManager_HcmAccessLogOptions{}
				h.AccessLogFlushInterval = durationpb.New(1e9)
				return h
			},
			path: "access_log_options", msg: "Only one of access_log_flush_interval or access_log_options can be specified.",
			nearMiss: func(testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"))
				h.AccessLogFlushInterval = durationpb.New(1e9)
				return h
			}},
		{rule: "hcm.duplicate-upgrade",
			bad: func(testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"))
				h.UpgradeConfigs = []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}, {UpgradeType: "WebSocket"}}
				return h
			},
			path: "upgrade_configs[1].upgrade_type", msg: "Error: multiple upgrade configs with the same name: 'WebSocket'",
			nearMiss: func(testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"))
				h.UpgradeConfigs = []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}, {UpgradeType: "CONNECT"}}
				return h
			}},
		{rule: "listener.quic-codec",
			bad: func(t testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"), router(t))
				h.CodecType = hcmv3.HttpConnectionManager_HTTP3
				return listenerWith(t, "l", h)
			},
			path: hcmPath + ".codec_type", msg: "HTTP/3 codec configured on non-QUIC listener.",
			nearMiss: func(t testing.TB) proto.Message {
				h := inlineHCM(routeConfig("r"), router(t))
				h.CodecType = hcmv3.HttpConnectionManager_HTTP3
				l := listenerWith(t, "l", h)
				l.UdpListenerConfig = &listenerv3.UdpListenerConfig{QuicOptions: &listenerv3.QuicProtocolOptions{}}
				return l
			}},
		{rule: "listener.quic-codec",
			bad: func(t testing.TB) proto.Message {
				l := listenerWith(t, "l", inlineHCM(routeConfig("r"), router(t)))
				l.UdpListenerConfig = &listenerv3.UdpListenerConfig{QuicOptions: &listenerv3.QuicProtocolOptions{}}
				return l
			},
			path: hcmPath + ".codec_type", msg: "Non-HTTP/3 codec configured on QUIC listener.",
			nearMiss: func(t testing.TB) proto.Message { return listenerWith(t, "l", inlineHCM(routeConfig("r"), router(t))) }},

		// Clusters.
		{rule: "cluster.eds-config-not-eds",
			bad: func(testing.TB) proto.Message {
				return &clusterv3.Cluster{Name: "c", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
					EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: "c"}}
			},
			path: "eds_cluster_config", msg: "eds_cluster_config set in a non-EDS cluster",
			nearMiss: func(testing.TB) proto.Message {
				return &clusterv3.Cluster{Name: "c", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
					EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: "c"}}
			}},
		{rule: "cluster.max-requests-per-connection",
			bad: func(t testing.TB) proto.Message {
				c := withOptions(t, &upstreamhttpv3.HttpProtocolOptions{CommonHttpProtocolOptions: &corev3.HttpProtocolOptions{MaxRequestsPerConnection: wrapperspb.UInt32(10)}})
				c.MaxRequestsPerConnection = wrapperspb.UInt32(10)
				return c
			},
			path: `typed_extension_protocol_options["` + tHTTPOptions + `"]`, msg: "Only one of max_requests_per_connection from Cluster or HttpProtocolOptions can be specified",
			nearMiss: func(t testing.TB) proto.Message {
				return withOptions(t, &upstreamhttpv3.HttpProtocolOptions{CommonHttpProtocolOptions: &corev3.HttpProtocolOptions{MaxRequestsPerConnection: wrapperspb.UInt32(10)}})
			}},
		{rule: "cluster.cluster-provided-lb",
			bad:  func(t testing.TB) proto.Message { return aggregate(t, clusterv3.Cluster_ROUND_ROBIN) },
			path: "lb_policy", msg: "cluster manager: cluster provided LB not specified but cluster 'agg' provided one. Check cluster documentation.",
			nearMiss: func(t testing.TB) proto.Message { return aggregate(t, clusterv3.Cluster_CLUSTER_PROVIDED) }},
		{rule: "cluster.cluster-provided-lb",
			bad: func(testing.TB) proto.Message {
				return &clusterv3.Cluster{Name: "s", LbPolicy: clusterv3.Cluster_CLUSTER_PROVIDED, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}}
			},
			path: "lb_policy", msg: "cluster manager: cluster provided LB specified but cluster 's' did not provide one. Check cluster documentation.",
			nearMiss: func(testing.TB) proto.Message {
				return &clusterv3.Cluster{Name: "s", LbPolicy: clusterv3.Cluster_ROUND_ROBIN, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}}
			}},
		{rule: "upstream.codec-last",
			bad: func(t testing.TB) proto.Message {
				return withOptions(t, upstreamFilters(t, httpFilter(t, "proc", extProc())))
			},
			path: optsPath + ".http_filters[0]", msg: "The codec filter is the only valid terminal upstream HTTP filter, use 'envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec'",
			nearMiss: func(t testing.TB) proto.Message {
				return withOptions(t, upstreamFilters(t, httpFilter(t, "proc", extProc()), codec(t)))
			}},
		{rule: "upstream.terminal-filter",
			bad:  func(t testing.TB) proto.Message { return upstreamFilters(t, codec(t), codec(t)) },
			path: "http_filters[0]", msg: "Error: terminal filter named envoy.filters.http.upstream_codec of type envoy.filters.http.upstream_codec must be the last filter in a upstream http filter chain.",
			nearMiss: func(t testing.TB) proto.Message { return upstreamFilters(t, codec(t)) }},

		// Routes.
		{rule: "route.unique-domains",
			bad: func(testing.TB) proto.Message {
				return &routev3.RouteConfiguration{Name: "r", VirtualHosts: []*routev3.VirtualHost{
					{Name: "a", Domains: []string{"api.example.com"}}, {Name: "b", Domains: []string{"API.example.com"}}}}
			},
			path: "virtual_hosts[1].domains[0]", msg: "Only unique values for domains are permitted. Duplicate entry of domain api.example.com in route r",
			nearMiss: func(testing.TB) proto.Message {
				// A suffix and a prefix wildcard of the same text are
				// different domains.
				return &routev3.RouteConfiguration{Name: "r", VirtualHosts: []*routev3.VirtualHost{
					{Name: "a", Domains: []string{"*example"}}, {Name: "b", Domains: []string{"example*"}}}}
			}},
		{rule: "route.unique-domains",
			bad: func(testing.TB) proto.Message {
				return &routev3.RouteConfiguration{Name: "r", VirtualHosts: []*routev3.VirtualHost{
					{Name: "a", Domains: []string{"*"}}, {Name: "b", Domains: []string{"*"}}}}
			},
			path: "virtual_hosts[1].domains[0]", msg: "Only a single wildcard domain is permitted in route r",
			nearMiss: func(testing.TB) proto.Message {
				return &routev3.RouteConfiguration{Name: "r", VirtualHosts: []*routev3.VirtualHost{
					{Name: "a", Domains: []string{"*"}}, {Name: "b", Domains: []string{"*.example.com"}}}}
			}},
		{rule: "route.direct-response-body-size",
			bad:  func(testing.TB) proto.Message { return routeConfig("r", directResponse(4097)) },
			path: "virtual_hosts[0].routes[0].direct_response.body", msg: "response body size is 4097 bytes; maximum is 4096",
			nearMiss: func(testing.TB) proto.Message {
				rc := routeConfig("r", directResponse(4097))
				rc.MaxDirectResponseBodySizeBytes = wrapperspb.UInt32(8192)
				return rc
			}},
		{rule: "route.one-path-rewrite",
			bad: func(testing.TB) proto.Message {
				r := routeTo("a")
				r.GetRoute().PrefixRewrite = "/v1"
				r.GetRoute().RegexRewrite = &matcherv3.RegexMatchAndSubstitute{Pattern: &matcherv3.RegexMatcher{Regex: "^/"}, Substitution: "/"}
				return r
			},
			path: "route", msg: "Specify only one of prefix_rewrite, regex_rewrite or path_rewrite_policy",
			nearMiss: func(testing.TB) proto.Message {
				r := routeTo("a")
				r.GetRoute().PrefixRewrite = "/v1"
				return r
			}},
		{rule: "route.upgrade-configs",
			bad: func(testing.TB) proto.Message {
				r := routeTo("a")
				r.GetRoute().UpgradeConfigs = []*routev3.RouteAction_UpgradeConfig{{UpgradeType: "websocket"}, {UpgradeType: "Websocket"}}
				return r
			},
			path: "route.upgrade_configs[1]", msg: "Duplicate upgrade Websocket",
			nearMiss: func(testing.TB) proto.Message {
				r := routeTo("a")
				r.GetRoute().UpgradeConfigs = []*routev3.RouteAction_UpgradeConfig{{UpgradeType: "websocket"}}
				return r
			}},
		{rule: "route.upgrade-configs",
			bad: func(testing.TB) proto.Message {
				r := routeTo("a")
				r.GetRoute().UpgradeConfigs = []*routev3.RouteAction_UpgradeConfig{{UpgradeType: "websocket", ConnectConfig: &routev3.RouteAction_UpgradeConfig_ConnectConfig{}}}
				return r
			},
			path: "route.upgrade_configs[0].connect_config", msg: "Non-CONNECT upgrade type websocket has ConnectConfig",
			nearMiss: func(testing.TB) proto.Message {
				r := routeTo("a")
				r.GetRoute().UpgradeConfigs = []*routev3.RouteAction_UpgradeConfig{{UpgradeType: "CONNECT", ConnectConfig: &routev3.RouteAction_UpgradeConfig_ConnectConfig{}}}
				return r
			}},

		// ext_proc.
		{rule: "extproc.one-service",
			bad: func(testing.TB) proto.Message {
				c := extProc()
				c.HttpService = &extprocv3.ExtProcHttpService{}
				return c
			},
			path: "", msg: "One and only one of grpc_service or http_service must be configured",
			nearMiss: func(testing.TB) proto.Message {
				return &extprocv3.ExternalProcessor{HttpService: &extprocv3.ExtProcHttpService{}}
			}},
		{rule: "extproc.one-service",
			bad:  func(testing.TB) proto.Message { return &extprocv3.ExternalProcessor{} },
			path: "", msg: "One and only one of grpc_service or http_service must be configured",
			nearMiss: func(testing.TB) proto.Message { return extProc() }},
		{rule: "extproc.route-cache",
			bad: func(testing.TB) proto.Message {
				c := extProc()
				c.DisableClearRouteCache = true
				c.RouteCacheAction = extprocv3.ExternalProcessor_RETAIN
				return c
			},
			path: "route_cache_action", msg: "disable_clear_route_cache and route_cache_action can not be set to none-default at the same time.",
			nearMiss: func(testing.TB) proto.Message {
				c := extProc()
				c.DisableClearRouteCache = true
				return c
			}},
		{rule: "extproc.http-service-headers-only",
			bad: func(testing.TB) proto.Message {
				return &extprocv3.ExternalProcessor{HttpService: &extprocv3.ExtProcHttpService{},
					ProcessingMode: &extprocv3.ProcessingMode{ResponseTrailerMode: extprocv3.ProcessingMode_SEND}}
			},
			path: "processing_mode", msg: "If the ext_proc filter is configured with http_service instead of gRPC service, then the processing modes of this filter can not be configured to send body or trailer.",
			nearMiss: func(testing.TB) proto.Message {
				return &extprocv3.ExternalProcessor{HttpService: &extprocv3.ExtProcHttpService{},
					ProcessingMode: &extprocv3.ProcessingMode{ResponseHeaderMode: extprocv3.ProcessingMode_SEND, RequestTrailerMode: extprocv3.ProcessingMode_SKIP}}
			}},
		{rule: "extproc.full-duplex-trailers",
			bad: func(testing.TB) proto.Message {
				return mode(func(m *extprocv3.ProcessingMode) { m.RequestBodyMode = extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED })
			},
			path: "processing_mode.request_trailer_mode", msg: "If the ext_proc filter has the request_body_mode set to FULL_DUPLEX_STREAMED, then the request_trailer_mode has to be set to SEND",
			nearMiss: func(testing.TB) proto.Message {
				return mode(func(m *extprocv3.ProcessingMode) {
					m.RequestBodyMode = extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
					m.RequestTrailerMode = extprocv3.ProcessingMode_SEND
				})
			}},
		{rule: "extproc.full-duplex-trailers",
			bad: func(testing.TB) proto.Message {
				return mode(func(m *extprocv3.ProcessingMode) { m.ResponseBodyMode = extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED })
			},
			path: "processing_mode.response_trailer_mode", msg: "If the ext_proc filter has the response_body_mode set to FULL_DUPLEX_STREAMED, then the response_trailer_mode has to be set to SEND",
			nearMiss: func(testing.TB) proto.Message {
				return mode(func(m *extprocv3.ProcessingMode) { m.ResponseBodyMode = extprocv3.ProcessingMode_STREAMED })
			}},
		{rule: "extproc.full-duplex-fail-closed",
			bad: func(testing.TB) proto.Message {
				c := mode(func(m *extprocv3.ProcessingMode) {
					m.ResponseBodyMode = extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
					m.ResponseTrailerMode = extprocv3.ProcessingMode_SEND
				})
				c.FailureModeAllow = true
				return c
			},
			path: "failure_mode_allow", msg: "If the ext_proc filter has either the request_body_mode or the response_body_mode set to FULL_DUPLEX_STREAMED, then the failure_mode_allow has to be left as false",
			nearMiss: func(testing.TB) proto.Message {
				c := mode(func(m *extprocv3.ProcessingMode) { m.ResponseBodyMode = extprocv3.ProcessingMode_STREAMED })
				c.FailureModeAllow = true
				return c
			}},

		// ext_authz.
		{rule: "extauthz.transport-api-v3",
			bad: func(testing.TB) proto.Message {
				c := extAuthz()
				c.TransportApiVersion = corev3.ApiVersion_AUTO
				return c
			},
			path: "transport_api_version",
			msg:  "V2 (and AUTO) xDS transport protocol versions are deprecated in transport_api_version: AUTO. The v2 xDS major version has been removed and is no longer supported. You may be missing explicit V3 configuration of the transport API version, see the advice in https://www.envoyproxy.io/docs/envoy/latest/faq/api/envoy_v3.",
			nearMiss: func(testing.TB) proto.Message {
				// The HTTP client has no transport API version.
				return &extauthzv3.ExtAuthz{Services: &extauthzv3.ExtAuthz_HttpService{HttpService: &extauthzv3.HttpService{}}}
			}},
		{rule: "extauthz.duplicate-allowed-headers",
			bad: func(testing.TB) proto.Message {
				return &extauthzv3.ExtAuthz{
					AllowedHeaders: &matcherv3.ListStringMatcher{},
					Services: &extauthzv3.ExtAuthz_HttpService{HttpService: &extauthzv3.HttpService{
						AuthorizationRequest: &extauthzv3.AuthorizationRequest{AllowedHeaders: &matcherv3.ListStringMatcher{}}}},
				}
			},
			path: "allowed_headers", msg: "Invalid duplicate configuration for allowed_headers.",
			nearMiss: func(testing.TB) proto.Message {
				c := extAuthz()
				c.AllowedHeaders = &matcherv3.ListStringMatcher{}
				return c
			}},

		// Regexes, wherever they are: here in ext_proc's mutation rules.
		{rule: "regex.re2-syntax",
			bad: func(t testing.TB) proto.Message {
				c := extProc()
				c.MutationRules = &mutationrulesv3.HeaderMutationRules{AllowExpression: &matcherv3.RegexMatcher{Regex: "(x"}}
				return inlineHCM(routeConfig("r"), httpFilter(t, "proc", c), router(t))
			},
			path: "http_filters[0].typed_config(envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor).mutation_rules.allow_expression.regex",
			msg:  "RE2 refuses the regex \"(x\": error parsing regexp: missing closing ): `(x`",
			nearMiss: func(t testing.TB) proto.Message {
				c := extProc()
				c.MutationRules = &mutationrulesv3.HeaderMutationRules{AllowExpression: &matcherv3.RegexMatcher{Regex: `^x\-envoy\-attempt\-count$`}}
				return inlineHCM(routeConfig("r"), httpFilter(t, "proc", c), router(t))
			}},
	}
}

// hiddenCase is an Ignored [#not-implemented-hide:] field set on m; the
// near miss is m without it.
func hiddenCase(rule string, m proto.Message) messageCase {
	field := rule[strings.LastIndex(rule, ".")+1:]
	return messageCase{
		rule: rule,
		bad:  func(testing.TB) proto.Message { return m },
		path: field,
		msg:  "", // checked by prefix below
		nearMiss: func(testing.TB) proto.Message {
			c := proto.Clone(m)
			pm := c.ProtoReflect()
			pm.Clear(pm.Descriptor().Fields().ByName(protoreflect.Name(field)))
			return c
		},
	}
}

func directResponse(n int) *routev3.Route {
	return &routev3.Route{
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 404,
			Body: inline(strings.Repeat("x", n))}},
	}
}

func TestMessageRules(t *testing.T) {
	for _, c := range messageCases() {
		t.Run(c.rule, func(t *testing.T) {
			got := byRule(Check(c.bad(t)), c.rule)
			if len(got) != 1 {
				t.Fatalf("violations of %s: %v, want one", c.rule, got)
			}
			v := got[0]
			if v.Path != c.path {
				t.Errorf("path %q, want %q", v.Path, c.path)
			}
			want := c.msg
			if want == "" {
				want = c.path + " is [#not-implemented-hide:] in Envoy's API and Envoy never reads it, so it has no effect in Envoy: "
				if !strings.HasPrefix(v.Msg, want) || v.Rule.Severity != Ignored {
					t.Errorf("%s %q, want an Ignored one starting %q", v.Rule.Severity, v.Msg, want)
				}
			} else if v.Msg != want {
				t.Errorf("message\n got %q\nwant %q", v.Msg, want)
			}
			if nm := byRule(Check(c.nearMiss(t)), c.rule); len(nm) != 0 {
				t.Errorf("near miss: %v, want no violation of %s", nm, c.rule)
			}
		})
	}
}

// setCase is a resource set a real Envoy refuses and a near miss it loads,
// for one set rule.
type setCase struct {
	name, rule string
	bad        func(t testing.TB) Set
	resource   string
	path       string
	msg        string
	nearMiss   func(t testing.TB) Set
}

func setCases() []setCase {
	static := func(name string) *clusterv3.Cluster {
		return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}}
	}
	hcmPath := "filter_chains[0].filters[0].typed_config(" + tHCM + ").route_config"
	return []setCase{
		{name: "duplicate cluster", rule: "set.unique-cluster-names",
			bad: func(testing.TB) Set {
				return Set{Clusters: []*clusterv3.Cluster{static("a"), static("b"), static("a")}}
			},
			resource: `cluster "a"`, msg: "duplicate cluster a found",
			nearMiss: func(testing.TB) Set { return Set{Clusters: []*clusterv3.Cluster{static("a"), static("b")}} }},
		{name: "duplicate listener", rule: "set.unique-listener-names",
			bad: func(t testing.TB) Set {
				l := listenerWith(t, "in", inlineHCM(routeConfig("r"), router(t)))
				return Set{Listeners: []*listenerv3.Listener{l, l}}
			},
			resource: `listener "in"`, msg: "duplicate listener in found",
			nearMiss: func(t testing.TB) Set {
				return Set{Listeners: []*listenerv3.Listener{listenerWith(t, "in", inlineHCM(routeConfig("r"), router(t))),
					listenerWith(t, "in2", inlineHCM(routeConfig("r"), router(t)))}}
			}},
		{name: "inline route to a missing cluster", rule: "set.route-clusters-exist",
			bad: func(t testing.TB) Set {
				return Set{Clusters: []*clusterv3.Cluster{static("a")},
					Listeners: []*listenerv3.Listener{listenerWith(t, "in", inlineHCM(routeConfig("r", routeTo("a"), routeTo("missing")), router(t)))}}
			},
			resource: `listener "in"`, path: hcmPath + ".virtual_hosts[0].routes[1].route.cluster", msg: "route: unknown cluster 'missing'",
			nearMiss: func(t testing.TB) Set {
				// validate_clusters false: a 503 at request time instead.
				rc := routeConfig("r", routeTo("missing"))
				rc.ValidateClusters = wrapperspb.Bool(false)
				return Set{Listeners: []*listenerv3.Listener{listenerWith(t, "in", inlineHCM(rc, router(t)))}}
			}},
		{name: "RDS route validating its clusters", rule: "set.route-clusters-exist",
			bad: func(testing.TB) Set {
				r := routeTo("a")
				r.GetRoute().ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{
					Clusters: []*routev3.WeightedCluster_ClusterWeight{{Name: "a", Weight: wrapperspb.UInt32(1)}, {Name: "gone", Weight: wrapperspb.UInt32(1)}}}}
				rc := routeConfig("r", r)
				rc.ValidateClusters = wrapperspb.Bool(true)
				return Set{Clusters: []*clusterv3.Cluster{static("a")}, Routes: []*routev3.RouteConfiguration{rc}}
			},
			resource: `route "r"`, path: "virtual_hosts[0].routes[0].route.weighted_clusters.clusters[1].name", msg: "route: unknown weighted cluster 'gone'",
			nearMiss: func(testing.TB) Set {
				// Served over RDS, validate_clusters defaults to false.
				return Set{Routes: []*routev3.RouteConfiguration{routeConfig("r", routeTo("missing"))}}
			}},
		{name: "mirror to a missing cluster", rule: "set.route-clusters-exist",
			bad: func(t testing.TB) Set {
				r := routeTo("a")
				r.GetRoute().RequestMirrorPolicies = []*routev3.RouteAction_RequestMirrorPolicy{{Cluster: "shadow"}}
				return Set{Clusters: []*clusterv3.Cluster{static("a")},
					Listeners: []*listenerv3.Listener{listenerWith(t, "in", inlineHCM(routeConfig("r", r), router(t)))}}
			},
			resource: `listener "in"`, path: hcmPath + ".virtual_hosts[0].routes[0].route.request_mirror_policies[0].cluster", msg: "route: unknown shadow cluster 'shadow'",
			nearMiss: func(t testing.TB) Set {
				r := routeTo("a")
				r.GetRoute().RequestMirrorPolicies = []*routev3.RouteAction_RequestMirrorPolicy{{Cluster: "shadow"}}
				return Set{Clusters: []*clusterv3.Cluster{static("a"), static("shadow")},
					Listeners: []*listenerv3.Listener{listenerWith(t, "in", inlineHCM(routeConfig("r", r), router(t)))}}
			}},
	}
}

func TestSetRules(t *testing.T) {
	for _, c := range setCases() {
		t.Run(c.name, func(t *testing.T) {
			got := byRule(CheckSet(c.bad(t)), c.rule)
			if len(got) != 1 {
				t.Fatalf("violations of %s: %v, want one", c.rule, got)
			}
			if v := got[0]; v.Resource != c.resource || v.Path != c.path || v.Msg != c.msg {
				t.Errorf("got %q %q %q\nwant %q %q %q", v.Resource, v.Path, v.Msg, c.resource, c.path, c.msg)
			}
			if nm := byRule(CheckSet(c.nearMiss(t)), c.rule); len(nm) != 0 {
				t.Errorf("near miss: %v, want no violation", nm)
			}
		})
	}
}

// Every rule of the table has a test case above: a rule cannot be added
// without a configuration Envoy refuses and one it accepts.
func TestEveryRuleTested(t *testing.T) {
	tested := map[string]bool{}
	for _, c := range messageCases() {
		tested[c.rule] = true
	}
	for _, c := range setCases() {
		tested[c.rule] = true
	}
	names := map[string]bool{}
	for _, r := range Table() {
		if names[r.Name] {
			t.Errorf("two rules named %s", r.Name)
		}
		names[r.Name] = true
		if !tested[r.Name] {
			t.Errorf("rule %s has no test case", r.Name)
		}
		if (r.Check == nil) == (r.CheckSet == nil) || r.Applies == "" || r.Source == "" || r.Severity == 0 {
			t.Errorf("rule %s is incomplete: %+v", r.Name, r)
		}
	}
	for n := range tested {
		if !names[n] {
			t.Errorf("test case for %s, which is not in the table", n)
		}
	}
}

func TestViolationError(t *testing.T) {
	vs := Check(tlsCluster(t, &tlsv3.CertificateValidationContext{
		SystemRootCerts: &tlsv3.CertificateValidationContext_SystemRootCerts{}, MatchTypedSubjectAltNames: sanDNS("api.example.com")}))
	var got []string
	for _, v := range vs {
		got = append(got, v.Error())
	}
	prefix := "transport_socket.typed_config(" + tUpstreamTLS + ").common_tls_context.validation_context"
	want := []string{
		prefix + ": SAN-based verification of peer certificates without trusted CA is insecure and not allowed [refused by Envoy: tls.san-without-trusted-ca]",
		prefix + ".system_root_certs: system_root_certs is [#not-implemented-hide:] in Envoy's API and Envoy never reads it, so it has no effect in Envoy: the system trust store is not loaded; without trusted_ca the peer's certificate chain is not verified against any CA [ignored by Envoy: hidden.CertificateValidationContext.system_root_certs]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	s := Violation{Rule: &Rule{Name: "set.x", Severity: Refused}, Resource: `route "r"`, Msg: "m"}
	if got := s.Error(); got != `route "r": m [refused by Envoy: set.x]` {
		t.Errorf("set violation %q", got)
	}
}

// An Any that does not resolve or unmarshal is skipped, not a panic: PGV
// validation reports it.
func TestCheckSkipsUnresolvedAny(t *testing.T) {
	l := &listenerv3.Listener{Name: "l", FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{
		{Name: "x", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/no.Such"}}},
		{Name: "y", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/" + tHCM, Value: []byte{0xff}}}},
	}}}}
	if vs := Check(l); len(vs) != 0 {
		t.Errorf("Check = %v, want nothing", vs)
	}
	if vs := Check(nil); vs != nil {
		t.Errorf("Check(nil) = %v", vs)
	}
}

func byRule(vs []Violation, name string) []Violation {
	var out []Violation
	for _, v := range vs {
		if v.Rule.Name == name {
			out = append(out, v)
		}
	}
	return out
}
