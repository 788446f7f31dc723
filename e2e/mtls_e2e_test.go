package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/envoy/envoytest"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/testtls"
	"github.com/sluicegw/sluice/policies"
	"github.com/sluicegw/sluice/xds"
)

// mtlsKey is the Sluice key of the mTLS test, declared by its hash.
const mtlsKey = "sk-sluice-MTLSkey0123456789abcdefghijklmnopqrstuvwxyzAB"

// identity issues a certificate of ca carrying the SPIFFE ID spiffe and
// the DNS names, usable as client and server.
func identity(t *testing.T, ca *testtls.CA, spiffe string, names ...string) tls.Certificate {
	t.Helper()
	u, err := url.Parse(spiffe)
	if err != nil {
		t.Fatal(err)
	}
	return ca.IssueWith(t, func(c *x509.Certificate) {
		c.URIs = []*url.URL{u}
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}, names...)
}

// writePair writes cert's chain and key as PEM files in dir, named
// name.pem and name-key.pem, replacing them by rename as cert-manager
// does; it returns their paths.
func writePair(t *testing.T, dir, name string, cert tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	var chainPEM []byte
	for _, der := range cert.Certificate {
		chainPEM = append(chainPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writeAtomically(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	writeAtomically(t, certFile, chainPEM)
	return certFile, keyFile
}

func writeAtomically(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// clientTLS is an UpstreamTlsContext as Sluice emits it for the extension
// cluster: Envoy's certificate (none when certFile is ""), Sluice's CA and
// its SPIFFE ID.
func clientTLS(t *testing.T, certFile, keyFile, caFile, serverID string) *corev3.TransportSocket {
	t.Helper()
	tc := &tlsv3.UpstreamTlsContext{Sni: "sluice.test", CommonTlsContext: &tlsv3.CommonTlsContext{
		AlpnProtocols: []string{"h2"},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: caFile}},
			MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{SanType: tlsv3.SubjectAltNameMatcher_URI,
				Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: serverID}}}},
		}},
	}}
	if certFile != "" {
		tc.CommonTlsContext.TlsCertificates = []*tlsv3.TlsCertificate{{
			CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: certFile}},
			PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: keyFile}},
		}}
	}
	a, err := anypb.New(tc)
	if err != nil {
		t.Fatal(err)
	}
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: a}}
}

// TestMTLSThroughEmulator: Sluice's gRPC and xDS servers with mTLS
// (security.tls) and the extension and xDS clusters Envoy is given
// (xds.extension_tls), through the emulator speaking TLS as Envoy does:
// the right client certificate is served over ADS, ext_authz and
// ext_proc; no certificate, another CA's and an identity outside
// allowed_clients each fail as Envoy fails (the filters' 503, no config
// over ADS), counted by reason; certificate files replaced on disk are
// used without a restart.
func TestMTLSThroughEmulator(t *testing.T) {
	dir := t.TempDir()
	ca, other := testtls.NewCA(t, "mesh CA"), testtls.NewCA(t, "another CA")
	caFile := ca.WriteFile(t)
	const sluiceID, envoyID = "spiffe://test.example/ns/llm/sa/sluice", "spiffe://test.example/ns/ingress/sa/envoy"
	srvCert, srvKey := writePair(t, dir, "sluice", identity(t, ca, sluiceID, "sluice.test", "127.0.0.1"))
	envoyCert, envoyKey := writePair(t, dir, "envoy", identity(t, ca, envoyID))
	intruderCert, intruderKey := writePair(t, dir, "intruder", identity(t, ca, "spiffe://test.example/ns/default/sa/app"))
	foreignCert, foreignKey := writePair(t, dir, "foreign", identity(t, other, envoyID))
	clientCAFile := filepath.Join(dir, "client-ca.pem")
	writeAtomically(t, clientCAFile, ca.PEM())

	mock, mockAddr := mockProvider(t, mockllm.Options{APIKey: attackP1Key})
	s := startSluice(t, fmt.Sprintf(`
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
listen: {envoy: "127.0.0.1:0"}
providers: [{name: p1, kind: openai, base_url: "http://%s", api_key: %s}]
models: [{name: m1, provider: p1}]
pricing: {m1: {input: 150000, output: 600000}}
teams: [{name: t}]
keys: [{name: k, team: t, sha256: "%s"}]
security:
  principal_keys: [{value: %s}]
  tls:
    cert_file: %s
    key_file: %s
    client_ca_file: %s
    allowed_clients: {uris: ["%s"]}
xds:
  extension_tls:
    sni: sluice.test
    cert_file: %s
    key_file: %s
    ca_file: %s
    server_sans: {uris: ["%s"]}
`, mockAddr, attackP1Key, sha256Hex(mtlsKey), attackPrincipalKey, srvCert, srvKey, clientCAFile, envoyID, envoyCert, envoyKey, caFile, sluiceID))
	const key = mtlsKey
	chat := call{path: "/v1/chat/completions", body: `{"model":"m1","messages":[{"role":"user","content":"hi"}]}`}

	// Over ADS, with the served sluice.extension cluster: all three.
	cfg := &policies.ExtensionTLS{SNI: "sluice.test", CertFile: envoyCert, KeyFile: envoyKey, CAFile: caFile,
		ServerSANs: policies.Identities{URIs: []string{sluiceID}}}
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-mtls", XDSAddress: s.xdsAddr, TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	eachProxy(t, b, func(t *testing.T, p proxy) {
		st, h, body := chat.do(t, p.url, key)
		if st != 200 {
			t.Fatalf("over mTLS: %d %s", st, body)
		}
		s.awaitRecord(t, h.Get("x-sluice-request-id"))
	})

	// A static Envoy whose sluice cluster speaks ts, with both filters or,
	// extprocOnly, ext_proc alone (which then reads the key itself).
	staticChain := func(t *testing.T, ts *corev3.TransportSocket, extprocOnly bool) string {
		sl := staticCluster(t, "sluice", s.grpcAddr, true)
		sl.TransportSocket = ts
		filters := chain.HTTPFilters(chain.Options{Cluster: "sluice"})
		if extprocOnly {
			filters = filters[1:]
		}
		b := bootstrap(t, []*clusterv3.Cluster{sl, staticCluster(t, "provider", mockAddr, false)}, filters...)
		// Sluice's listener: Envoy's own replies in JSON.
		sluiceListener(b, policies.Default().Gateway.MaxRequestBodyBytes)
		return staticEmulator(t, b)
	}
	static := func(t *testing.T, ts *corev3.TransportSocket) string { return staticChain(t, ts, false) }
	t.Run("ext_proc alone", func(t *testing.T) {
		if st, _, body := chat.do(t, staticChain(t, clientTLS(t, envoyCert, envoyKey, caFile, sluiceID), true), key); st != 200 {
			t.Errorf("with the right certificate: %d %s", st, body)
		}
		series := `sluice_tls_refused_total{reason="identity_not_allowed",server="grpc"}`
		before := metricValue(s.metrics(t), series)
		st, _, body := chat.do(t, staticChain(t, clientTLS(t, intruderCert, intruderKey, caFile, sluiceID), true), key)
		if st != 503 || !strings.Contains(body, "gateway_unavailable") {
			t.Errorf("an identity outside allowed_clients: %d %s, want ext_proc's 503 gateway_unavailable", st, body)
		}
		if metricValue(s.metrics(t), series) <= before {
			t.Errorf("%s did not count the refusal", series)
		}
	})
	otherCAFile := other.WriteFile(t)
	for _, tc := range []struct {
		name, cert, key, ca, server string
		reason                      string // Sluice's refusal; "" where Envoy refuses Sluice
	}{
		{"no client certificate", "", "", caFile, sluiceID, "no_certificate"},
		{"another CA's certificate", foreignCert, foreignKey, caFile, sluiceID, "untrusted"},
		{"an identity outside allowed_clients", intruderCert, intruderKey, caFile, sluiceID, "identity_not_allowed"},
		{"Sluice's certificate from a CA Envoy does not trust", envoyCert, envoyKey, otherCAFile, sluiceID, ""},
		{"Sluice's identity not the one Envoy expects", envoyCert, envoyKey, caFile, "spiffe://test.example/ns/llm/sa/other", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			series := `sluice_tls_refused_total{reason="` + tc.reason + `",server="grpc"}`
			before, calls := metricValue(s.metrics(t), series), mock.Requests()
			st, _, body := chat.do(t, static(t, clientTLS(t, tc.cert, tc.key, tc.ca, tc.server)), key)
			if st != 503 || !strings.Contains(body, "gateway_unavailable") {
				t.Errorf("%d %s, want the filters' 503 gateway_unavailable", st, body)
			}
			if after := metricValue(s.metrics(t), series); tc.reason != "" && after <= before {
				t.Errorf("%s stayed %v", series, after)
			}
			if mock.Requests() != calls {
				t.Error("the provider was called")
			}
		})
	}
	for _, tc := range []struct {
		name, cert, key, reason string
	}{
		{"ADS without a client certificate", "", "", "no_certificate"},
		{"ADS with another CA's certificate", foreignCert, foreignKey, "untrusted"},
		{"ADS with an identity outside allowed_clients", intruderCert, intruderKey, "identity_not_allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b *bootstrapv3.Bootstrap
			if tc.cert == "" {
				// The xDS cluster as Envoy would have it with TLS but no
				// client certificate.
				var err error
				b, err = xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-mtls-bad", XDSAddress: s.xdsAddr})
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range b.GetStaticResources().GetClusters() {
					c.TransportSocket = clientTLS(t, "", "", caFile, sluiceID)
				}
			} else {
				bad := *cfg
				bad.CertFile, bad.KeyFile = tc.cert, tc.key
				var err error
				if b, err = xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-mtls-bad", XDSAddress: s.xdsAddr, TLS: &bad}); err != nil {
					t.Fatal(err)
				}
			}
			series := `sluice_tls_refused_total{reason="` + tc.reason + `",server="xds"}`
			before := metricValue(s.metrics(t), series)
			e, err := envoytest.New(b, envoytest.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = e.Listen(lctx)
			lcancel()
			cancel()
			<-done
			if err == nil {
				t.Fatal("the emulator got a configuration over ADS")
			}
			if after := metricValue(s.metrics(t), series); after <= before {
				t.Errorf("%s stayed %v", series, after)
			}
		})
	}

	// Rotation: a new CA signs Sluice's certificate and is the only client
	// CA; the files are replaced on disk, and new connections use them.
	ca2 := testtls.NewCA(t, "rotated CA")
	ca2File := ca2.WriteFile(t)
	envoy2Cert, envoy2Key := writePair(t, dir, "envoy2", identity(t, ca2, envoyID))
	writePair(t, dir, "sluice", identity(t, ca2, sluiceID, "sluice.test", "127.0.0.1"))
	writeAtomically(t, clientCAFile, ca2.PEM())
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _, _ := chat.do(t, static(t, clientTLS(t, envoy2Cert, envoy2Key, ca2File, sluiceID)), key)
		if st == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rotated certificates were not used: %d", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st, _, body := chat.do(t, static(t, clientTLS(t, envoyCert, envoyKey, caFile, sluiceID)), key); st != 503 {
		t.Errorf("the old CA and certificate still work after rotation: %d %s", st, body)
	}
}
