package xds

import (
	"fmt"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/sluicegw/sluice/policies"
)

// extensionPolicy has one provider, a node group with its own Sluice
// addresses, and xds.extension_tls set to tlsYAML (a flow mapping; ""
// leaves it unset).
func extensionPolicy(tlsYAML string) string {
	if tlsYAML != "" {
		tlsYAML = "  extension_tls: " + tlsYAML + "\n"
	}
	return `
listen: {grpc: "127.0.0.1:9001", envoy: "127.0.0.1:10000"}
providers:
  - {name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8081"}
models:
  - {name: mock, provider: local}
xds:
  node_groups:
    - {name: eu, cluster: "eu-*", sluice_addresses: ["sluice-eu.internal:9001"]}
` + tlsYAML
}

func file(path string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: path}}
}

func sanMatcher(typ tlsv3.SubjectAltNameMatcher_SanType, v string) *tlsv3.SubjectAltNameMatcher {
	return &tlsv3.SubjectAltNameMatcher{SanType: typ, Matcher: exactMatcher(v)}
}

const (
	clientCert = "/etc/envoy/sluice-client.pem"
	clientKey  = "/etc/envoy/sluice-client-key.pem"
	sluiceCA   = "/etc/envoy/sluice-ca.pem"
	spiffeID   = "spiffe://corp.example/ns/llm/sa/sluice"
)

// fileCert is the client certificate from files.
var fileCert = []*tlsv3.TlsCertificate{{CertificateChain: file(clientCert), PrivateKey: file(clientKey)}}

// extensionCases are extension_tls configurations and the
// UpstreamTlsContext Envoy must get for each (nil: plaintext).
var extensionCases = []struct {
	name string
	yaml string
	want *tlsv3.UpstreamTlsContext
}{
	{"none", "", nil},
	{"files, SNI as the DNS identity",
		fmt.Sprintf(`{sni: Sluice.Internal, cert_file: %s, key_file: %s, ca_file: %s}`, clientCert, clientKey, sluiceCA),
		&tlsv3.UpstreamTlsContext{Sni: "sluice.internal", CommonTlsContext: &tlsv3.CommonTlsContext{
			AlpnProtocols:   []string{"h2"},
			TlsCertificates: fileCert,
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa:                 file(sluiceCA),
				MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{sanMatcher(tlsv3.SubjectAltNameMatcher_DNS, "sluice.internal")},
			}},
		}}},
	{"files, URI and DNS identities",
		fmt.Sprintf(`{sni: sluice.internal, cert_file: %s, key_file: %s, ca_file: %s, server_sans: {uris: [%q], dns: [Sluice-EU.internal, sluice.internal]}}`, clientCert, clientKey, sluiceCA, spiffeID),
		&tlsv3.UpstreamTlsContext{Sni: "sluice.internal", CommonTlsContext: &tlsv3.CommonTlsContext{
			AlpnProtocols:   []string{"h2"},
			TlsCertificates: fileCert,
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa: file(sluiceCA),
				MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{
					sanMatcher(tlsv3.SubjectAltNameMatcher_URI, spiffeID),
					sanMatcher(tlsv3.SubjectAltNameMatcher_DNS, "sluice-eu.internal"),
					sanMatcher(tlsv3.SubjectAltNameMatcher_DNS, "sluice.internal"),
				},
			}},
		}}},
	{"files, the chain alone",
		fmt.Sprintf(`{cert_file: %s, key_file: %s, ca_file: %s}`, clientCert, clientKey, sluiceCA),
		&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
			AlpnProtocols:         []string{"h2"},
			TlsCertificates:       fileCert,
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{TrustedCa: file(sluiceCA)}},
		}}},
	{"SDS names, the chain alone",
		`{sds_certificate: envoy-client, sds_validation: sluice-ca}`,
		&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
			AlpnProtocols:                  []string{"h2"},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "envoy-client"}},
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{
				ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "sluice-ca"},
			},
		}}},
	{"SDS names, SNI as the DNS identity",
		`{sni: sluice.internal, sds_certificate: envoy-client, sds_validation: sluice-ca}`,
		&tlsv3.UpstreamTlsContext{Sni: "sluice.internal", CommonTlsContext: &tlsv3.CommonTlsContext{
			AlpnProtocols:                  []string{"h2"},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "envoy-client"}},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext: &tlsv3.CertificateValidationContext{
					MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{sanMatcher(tlsv3.SubjectAltNameMatcher_DNS, "sluice.internal")},
				},
				ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "sluice-ca"},
			}},
		}}},
	{"SDS certificate, CA file, URI identity",
		fmt.Sprintf(`{sds_certificate: envoy-client, ca_file: %s, server_sans: {uris: [%q]}}`, sluiceCA, spiffeID),
		&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
			AlpnProtocols:                  []string{"h2"},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "envoy-client"}},
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa:                 file(sluiceCA),
				MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{sanMatcher(tlsv3.SubjectAltNameMatcher_URI, spiffeID)},
			}},
		}}},
}

// transportTLS unpacks a cluster's UpstreamTlsContext; nil without a
// transport socket.
func transportTLS(t *testing.T, c *clusterv3.Cluster) *tlsv3.UpstreamTlsContext {
	t.Helper()
	ts := c.GetTransportSocket()
	if ts == nil {
		return nil
	}
	if ts.GetName() != "envoy.transport_sockets.tls" {
		t.Errorf("cluster %s: transport socket %q", c.GetName(), ts.GetName())
	}
	tc := &tlsv3.UpstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(tc); err != nil {
		t.Fatal(err)
	}
	return tc
}

// sluiceClusterOf is the sluice.extension cluster of r.
func sluiceClusterOf(t *testing.T, r *Resources) *clusterv3.Cluster {
	t.Helper()
	for _, c := range r.Clusters {
		if c.GetName() == SluiceCluster {
			return c
		}
	}
	t.Fatalf("no %s cluster in %v", SluiceCluster, names(r.Clusters))
	return nil
}

// TestExtensionTLS: the sluice.extension cluster carries
// xds.extension_tls, in every node group, and nothing else about it
// changes (HTTP/2, endpoints, limits); Envoy's rules accept every form.
func TestExtensionTLS(t *testing.T) {
	plain := compile(t, extensionPolicy(""))
	for _, tc := range extensionCases {
		t.Run(tc.name, func(t *testing.T) {
			p := compile(t, extensionPolicy(tc.yaml))
			for i, g := range Groups(p) {
				r, err := Build(p, g, FlavourEnvoy)
				if err != nil {
					t.Fatal(err)
				}
				if _, _, err := Snapshot(r); err != nil {
					t.Fatalf("group %q: Snapshot: %v", g.Name, err)
				}
				c := sluiceClusterOf(t, r)
				if diff := cmp.Diff(tc.want, transportTLS(t, c), protocmp.Transform()); diff != "" {
					t.Errorf("group %q: UpstreamTlsContext (-want +got):\n%s", g.Name, diff)
				}
				// Without its transport socket, the cluster is the plaintext one.
				pr, err := Build(plain, Groups(plain)[i], FlavourEnvoy)
				if err != nil {
					t.Fatal(err)
				}
				bare := proto.Clone(c).(*clusterv3.Cluster)
				bare.TransportSocket = nil
				if diff := cmp.Diff(sluiceClusterOf(t, pr), bare, protocmp.Transform()); diff != "" {
					t.Errorf("group %q: TLS changed more than the transport socket (-plain +tls):\n%s", g.Name, diff)
				}
				// Provider clusters are not Sluice's: no client certificate.
				for _, pc := range r.Clusters {
					if pc.GetName() != SluiceCluster && pc.GetTransportSocket() != nil {
						t.Errorf("provider cluster %s got a transport socket", pc.GetName())
					}
				}
			}
		})
	}
}

// TestExtensionTLSWithoutCARefused: SAN matchers without a CA (a config
// that policies' validation would refuse) are emitted as such, and
// Snapshot refuses them, as Envoy would: never a connection that
// verifies nothing by accident.
func TestExtensionTLSWithoutCARefused(t *testing.T) {
	p := compile(t, extensionPolicy(""))
	r, err := Build(p, Groups(p)[0], FlavourEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	sluiceClusterOf(t, r).TransportSocket = extensionTransportSocket(&policies.ExtensionTLS{SNI: "sluice.internal", CertFile: clientCert, KeyFile: clientKey})
	if _, _, err := Snapshot(r); err == nil || !strings.Contains(err.Error(), "tls.san-without-trusted-ca") {
		t.Errorf("Snapshot = %v, want the SAN matcher without trusted_ca refused", err)
	}
}

// TestBootstrapExtensionTLS: the bootstrap's xDS cluster carries the same
// TLS as the served sluice.extension cluster; it survives the YAML round
// trip and validates. Secrets named by SDS are the bootstrap's to define:
// until it does, Envoy would refuse it, and so does Validate.
func TestBootstrapExtensionTLS(t *testing.T) {
	for _, tc := range extensionCases {
		t.Run(tc.name, func(t *testing.T) {
			p := compile(t, extensionPolicy(tc.yaml))
			b, err := Bootstrap(BootstrapOptions{XDSAddress: "127.0.0.1:18000", TLS: p.XDS().ExtensionTLS})
			if err != nil {
				t.Fatal(err)
			}
			xdsCluster := b.GetStaticResources().GetClusters()[0]
			if diff := cmp.Diff(tc.want, transportTLS(t, xdsCluster), protocmp.Transform()); diff != "" {
				t.Errorf("xDS cluster UpstreamTlsContext (-want +got):\n%s", diff)
			}
			y, err := BootstrapYAML(b)
			if err != nil {
				t.Fatal(err)
			}
			tls := p.XDS().ExtensionTLS
			if tls == nil || (tls.SDSCertificate == "" && tls.SDSValidation == "") {
				if diff := cmp.Diff(b, parseBootstrapYAML(t, y), protocmp.Transform()); diff != "" {
					t.Errorf("YAML round trip (-want +got):\n%s", diff)
				}
				return
			}
			// The secrets are referenced, not defined.
			var missing []string
			if tls.SDSCertificate != "" {
				missing = append(missing, "Unknown static secret: "+tls.SDSCertificate)
			}
			if tls.SDSValidation != "" {
				missing = append(missing, "Unknown static certificate validation context: "+tls.SDSValidation)
			}
			err = Validate(b)
			for _, want := range missing {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Validate without the secrets = %v, want %q", err, want)
				}
			}
			// Defined as the operator would: the bootstrap loads.
			withSecrets := func(ca *corev3.DataSource) *bootstrapv3.Bootstrap {
				b := proto.Clone(b).(*bootstrapv3.Bootstrap)
				sr := b.GetStaticResources()
				if tls.SDSCertificate != "" {
					sr.Secrets = append(sr.Secrets, &tlsv3.Secret{Name: tls.SDSCertificate, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: fileCert[0]}})
				}
				if tls.SDSValidation != "" {
					sr.Secrets = append(sr.Secrets, &tlsv3.Secret{Name: tls.SDSValidation, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{TrustedCa: ca}}})
				}
				return b
			}
			if err := Validate(withSecrets(file(sluiceCA))); err != nil {
				t.Errorf("Validate with the secrets: %v", err)
			}
			// A validation secret without a CA cannot carry the identities.
			err = Validate(withSecrets(nil))
			if wantRefused := tls.SDSValidation != "" && tc.want.GetCommonTlsContext().GetCombinedValidationContext() != nil; wantRefused !=
				(err != nil && strings.Contains(err.Error(), "tls.static-validation-without-trusted-ca")) {
				t.Errorf("Validate with a validation secret without trusted_ca = %v, want refused: %v", err, wantRefused)
			}
		})
	}
}
