package xds

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/sluicegw/sluice/policies"
)

// The TLS an https provider's cluster speaks: SNI and the certificate's
// DNS SAN are base_url's host, and the chain is verified against a CA
// bundle. What that takes differs between the two kinds of xDS client:
//
//   - Envoy verifies against trusted_ca, a file on Envoy's machine.
//     system_root_certs is [#not-implemented-hide:] in Envoy's API
//     (tls/v3/common.proto), and CertificateValidationContextConfigImpl
//     (source/common/ssl/certificate_validation_context_config_impl.cc)
//     refuses a SAN matcher without trusted_ca ("SAN-based verification of
//     peer certificates without trusted CA is insecure and not allowed").
//   - grpc-go ignores trusted_ca and alpn_protocols and reads only
//     ca_certificate_provider_instance, or system_root_certs when
//     GRPC_EXPERIMENTAL_XDS_SYSTEM_ROOT_CERTS=true (gRFC A82), and SAN
//     matchers from match_subject_alt_names
//     (internal/xds/xdsclient/xdsresource/unmarshal_cds.go,
//     securityConfigFromCommonTLSContextUsingNewFields, v1.85.0). Without
//     either source of roots it NACKs the cluster.

// CAInstancePrefix starts the certificate provider instance name a
// proxyless gRPC client's bootstrap must define for a provider with its
// own ca_file: "sluice.<provider>" (a file_watcher plugin whose
// ca_certificate_file is the provider's CA bundle on the client's
// machine).
const CAInstancePrefix = "sluice."

// CAFile is the CA bundle an Envoy of group g verifies provider p's
// certificate with: the provider's ca_file, else the group's
// upstream_ca_file (Groups resolves it to xds.upstream_ca_file when the
// group sets none). "" for a provider that is not https.
func CAFile(p *policies.Provider, g Group) string {
	up, err := parseUpstream(p)
	if err != nil || !up.tls {
		return ""
	}
	if p.CAFile != nil {
		return *p.CAFile
	}
	return g.UpstreamCAFile
}

// transportSocket is the UpstreamTlsContext of provider p's cluster, whose
// base_url names host (in lower case: DNS names are case-insensitive, and
// so are Envoy's SNI and DNS SAN match).
func (b *builder) transportSocket(p *policies.Provider, host string) *corev3.TransportSocket {
	host = strings.ToLower(host)
	tc := &tlsv3.UpstreamTlsContext{Sni: host}
	if b.flavour == FlavourGRPC {
		tc.CommonTlsContext = grpcTLS(p, host)
	} else {
		tc.CommonTlsContext = b.envoyTLS(p, host)
	}
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(tc)}}
}

// envoyTLS verifies the chain against the CA file and the leaf's DNS SAN
// against host (Envoy's exact DNS match: case-insensitive, a wildcard SAN
// covers one label; san_matcher.cc), and offers the ALPN of the
// cluster's protocol. Envoy speaks that protocol whatever ALPN the
// provider picks (explicit_http_config).
func (b *builder) envoyTLS(p *policies.Provider, host string) *tlsv3.CommonTlsContext {
	alpn := "http/1.1"
	if p.HTTP2 {
		alpn = "h2"
	}
	ca := b.group.UpstreamCAFile
	if p.CAFile != nil {
		ca = *p.CAFile
	}
	return &tlsv3.CommonTlsContext{
		AlpnProtocols: []string{alpn},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: ca}},
			MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
				SanType: tlsv3.SubjectAltNameMatcher_DNS,
				Matcher: exactMatcher(host),
			}},
		}},
	}
}

// grpcTLS is the form grpc-go accepts: the client's system roots (gRFC
// A82; the client must set GRPC_EXPERIMENTAL_XDS_SYSTEM_ROOT_CERTS=true),
// or, for a provider with its own ca_file, the certificate provider
// instance CAInstancePrefix+<provider> of the client's bootstrap. Either
// way the client must dial with xDS credentials for any of it to apply.
func grpcTLS(p *policies.Provider, host string) *tlsv3.CommonTlsContext {
	vc := &tlsv3.CertificateValidationContext{
		//nolint:staticcheck // the deprecated field is the one grpc-go reads
		MatchSubjectAltNames: []*matcherv3.StringMatcher{exactMatcher(host)},
	}
	if p.CAFile != nil {
		vc.CaCertificateProviderInstance = &tlsv3.CertificateProviderPluginInstance{InstanceName: CAInstancePrefix + p.Name}
	} else {
		vc.SystemRootCerts = &tlsv3.CertificateValidationContext_SystemRootCerts{}
	}
	return &tlsv3.CommonTlsContext{ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}}
}

func exactMatcher(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
}

// The TLS Envoy speaks to Sluice (xds.extension_tls): on the
// sluice.extension cluster that ext_authz and ext_proc call, and on the
// bootstrap's xDS cluster. Only Envoy dials these clusters (proxyless gRPC
// clients are served neither), so only Envoy's forms are used:
//
//   - The client certificate is inline files (tls_certificates) or a
//     secret named alone (tls_certificate_sds_secret_configs with no
//     sds_config), which Envoy looks up among its bootstrap's
//     static_resources.secrets and refuses the cluster without ("Unknown
//     static secret: <name>", getTlsCertificateConfigProviders,
//     source/common/tls/context_config_impl.cc).
//   - Sluice's certificate is verified against trusted_ca, or against the
//     validation-context secret named by sds_validation. SAN matchers sit
//     beside trusted_ca in an inline validation_context; with a secret they
//     go in combined_validation_context.default_validation_context, which
//     Envoy merges with the secret before it checks the result
//     (getCombinedValidationContextConfig, same file), so the secret must
//     hold the trusted_ca that CertificateValidationContextConfigImpl
//     requires beside SAN matchers
//     (source/common/ssl/certificate_validation_context_config_impl.cc).
//   - ALPN offers h2. Sluice's gRPC and xDS servers are grpc-go, which
//     since v1.67 refuses a TLS client that negotiated no ALPN
//     (credentials/tls.go, ServerHandshake, GRPC_ENFORCE_ALPN_ENABLED).
//     Envoy's HTTP/2 pool would offer h2 as its fallback when the context
//     names none (wrapTransportSocketOptions,
//     source/common/http/conn_pool_base.cc); naming it does not depend on
//     that.

// extensionTransportSocket is the transport socket of a cluster Envoy
// reaches Sluice by, for extension_tls t; nil (plaintext) when t is nil.
func extensionTransportSocket(t *policies.ExtensionTLS) *corev3.TransportSocket {
	if t == nil {
		return nil
	}
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(extensionTLS(t))}}
}

// extensionTLS is the UpstreamTlsContext of extension_tls t: its SNI, its
// client certificate, and the verification of Sluice's certificate
// against its CA and identities (serverSANs).
func extensionTLS(t *policies.ExtensionTLS) *tlsv3.UpstreamTlsContext {
	ctc := &tlsv3.CommonTlsContext{AlpnProtocols: []string{"h2"}}
	switch {
	case t.SDSCertificate != "":
		ctc.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{{Name: t.SDSCertificate}}
	case t.CertFile != "" || t.KeyFile != "":
		ctc.TlsCertificates = []*tlsv3.TlsCertificate{{
			CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: t.CertFile}},
			PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: t.KeyFile}},
		}}
	}
	sans := serverSANs(t)
	switch {
	case t.SDSValidation != "" && len(sans) == 0:
		ctc.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{
			ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: t.SDSValidation},
		}
	case t.SDSValidation != "":
		ctc.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sans},
			ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: t.SDSValidation},
		}}
	case t.CAFile != "" || len(sans) > 0:
		// Without ca_file (a config that skipped validation) the SAN
		// matchers stand alone, which Envoy refuses and so does
		// Snapshot (envoyrules tls.san-without-trusted-ca): never an
		// unverified connection by accident.
		vc := &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sans}
		if t.CAFile != "" {
			vc.TrustedCa = &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: t.CAFile}}
		}
		ctc.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}
	}
	return &tlsv3.UpstreamTlsContext{Sni: strings.ToLower(t.SNI), CommonTlsContext: ctc}
}

// serverSANs are the identities Sluice's certificate must carry, any one
// of them: each URI SAN exactly (case-sensitive, as SPIFFE IDs are), then
// each DNS SAN exactly (Envoy's DNS match is case-insensitive; lower case
// here as for providers). With none listed, the SNI as a DNS SAN; with
// neither, none (the chain alone is verified).
func serverSANs(t *policies.ExtensionTLS) []*tlsv3.SubjectAltNameMatcher {
	var out []*tlsv3.SubjectAltNameMatcher
	for _, u := range t.ServerSANs.URIs {
		out = append(out, &tlsv3.SubjectAltNameMatcher{SanType: tlsv3.SubjectAltNameMatcher_URI, Matcher: exactMatcher(u)})
	}
	dns := t.ServerSANs.DNS
	if t.ServerSANs.Empty() && t.SNI != "" {
		dns = []string{t.SNI}
	}
	for _, d := range dns {
		out = append(out, &tlsv3.SubjectAltNameMatcher{SanType: tlsv3.SubjectAltNameMatcher_DNS, Matcher: exactMatcher(strings.ToLower(d))})
	}
	return out
}
