package envoytest

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/sluicegw/sluice/internal/testtls"
)

// The upstream's host name: SNI and SAN are a DNS name, as for a real
// provider, while the endpoint is 127.0.0.1.
const tlsHost = "provider.test"

// tlsServer is an upstream speaking TLS with one certificate, recording
// the ClientHellos it saw and the requests that reached its handler.
type tlsServer struct {
	addr   string
	hellos *testtls.Hellos
	got    chan *http.Request
}

// startTLS serves over TLS on 127.0.0.1:0, choosing from nextProtos
// (HTTP/2 when "h2" is chosen).
func startTLS(t *testing.T, cert tls.Certificate, nextProtos ...string) *tlsServer {
	t.Helper()
	s := &tlsServer{hellos: &testtls.Hellos{}, got: make(chan *http.Request, 16)}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.got <- r
		writeText(w, "ok over "+r.Proto)
	}))
	srv.TLS = testtls.ServerConfig(cert, nextProtos, s.hellos)
	srv.EnableHTTP2 = slices.Contains(nextProtos, "h2")
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s.addr = srv.Listener.Addr().String()
	return s
}

// withChain appends issuers to a server certificate's chain.
func withChain(c tls.Certificate, issuers ...*x509.Certificate) tls.Certificate {
	for _, i := range issuers {
		c.Certificate = append(c.Certificate, i.Raw)
	}
	return c
}

// tlsContext builds an UpstreamTlsContext for tlsHost trusting caFile
// ("" for none), with the given SAN matchers and ALPN.
func tlsContext(caFile string, sans []*tlsv3.SubjectAltNameMatcher, alpn ...string) *tlsv3.UpstreamTlsContext {
	tc := &tlsv3.UpstreamTlsContext{Sni: tlsHost, CommonTlsContext: &tlsv3.CommonTlsContext{AlpnProtocols: alpn}}
	if caFile != "" || sans != nil {
		vc := &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sans}
		if caFile != "" {
			vc.TrustedCa = &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: caFile}}
		}
		tc.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}
	}
	return tc
}

func dnsSAN(m *matcherv3.StringMatcher) *tlsv3.SubjectAltNameMatcher {
	return &tlsv3.SubjectAltNameMatcher{SanType: tlsv3.SubjectAltNameMatcher_DNS, Matcher: m}
}

func exactSAN(s string) *tlsv3.SubjectAltNameMatcher {
	return dnsSAN(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}})
}

// tlsCluster is a static cluster "a" to addr with tc as its transport
// socket.
func tlsCluster(t *testing.T, addr string, http2 bool, tc *tlsv3.UpstreamTlsContext) *clusterv3.Cluster {
	c := testCluster(t, "a", addr, http2)
	c.TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(t, tc)}}
	return c
}

// connectFailure is the body and details of the 503 Envoy answers when
// the connection to the upstream fails with the TLS socket's failure
// reason (SslSocket::failureReason; "" for none), per the router's
// onUpstreamReset.
func connectFailure(reason string) (body, details string) {
	body = "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure"
	details = "upstream_reset_before_response_started{remote_connection_failure"
	if reason != "" {
		body += ", transport failure reason: " + reason
		details += "|" + strings.ReplaceAll(reason, " ", "_")
	}
	return body, details + "}"
}

// TestUpstreamTLS: a cluster's UpstreamTlsContext is spoken with exactly
// the verification it asks for — trusted_ca, the SAN matchers as Envoy
// matches them, none without a validation context — with its SNI and
// ALPN; a failed handshake is Envoy's 503 connect failure with the TLS
// socket's failure reason.
func TestUpstreamTLS(t *testing.T) {
	ca, other := testtls.NewCA(t, "provider CA"), testtls.NewCA(t, "another CA")
	caFile := ca.WriteFile(t)
	good := ca.Issue(t, tlsHost, "127.0.0.1")
	okBody := "ok over HTTP/1.1"
	for _, c := range []struct {
		name   string
		cert   tls.Certificate
		protos []string // the server's ALPN
		plain  bool     // the server speaks plain HTTP
		http2  bool
		tc     func() *tlsv3.UpstreamTlsContext
		// wantBody is the response body; wantReason, when set, the
		// failure reason of a 503 connect failure ("-": none).
		wantBody, wantReason string
		wantProto            string // the protocol the server saw, when it saw a request
	}{
		{name: "the right CA and the host's SAN", cert: good, protos: []string{"http/1.1"},
			tc: func() *tlsv3.UpstreamTlsContext {
				return tlsContext(caFile, []*tlsv3.SubjectAltNameMatcher{exactSAN(tlsHost)}, "http/1.1")
			},
			wantBody: okBody, wantProto: "HTTP/1.1"},
		{name: "HTTP/2 over TLS, ALPN h2", cert: good, protos: []string{"h2", "http/1.1"}, http2: true,
			tc: func() *tlsv3.UpstreamTlsContext {
				return tlsContext(caFile, []*tlsv3.SubjectAltNameMatcher{exactSAN(tlsHost)}, "h2")
			},
			wantBody: "ok over HTTP/2.0", wantProto: "HTTP/2.0"},
		{name: "another CA's certificate", cert: other.Issue(t, tlsHost), protos: []string{"http/1.1"},
			tc: func() *tlsv3.UpstreamTlsContext {
				return tlsContext(caFile, []*tlsv3.SubjectAltNameMatcher{exactSAN(tlsHost)}, "http/1.1")
			},
			wantReason: "verify cert failed: X509_verify_cert: certificate verification error at depth 0: unable to get local issuer certificate"},
		{name: "a SAN for another host", cert: ca.Issue(t, "other.test", "127.0.0.1"), protos: []string{"http/1.1"},
			tc: func() *tlsv3.UpstreamTlsContext {
				return tlsContext(caFile, []*tlsv3.SubjectAltNameMatcher{exactSAN(tlsHost)}, "http/1.1")
			},
			wantReason: "verify cert failed: SAN matcher, certificate SANs are [other.test, 127.0.0.1]"},
		{name: "an expired certificate", cert: ca.IssueWith(t, func(c *x509.Certificate) { c.NotAfter = time.Now().Add(-time.Minute) }, tlsHost),
			protos: []string{"http/1.1"},
			tc: func() *tlsv3.UpstreamTlsContext {
				return tlsContext(caFile, []*tlsv3.SubjectAltNameMatcher{exactSAN(tlsHost)}, "http/1.1")
			},
			wantReason: "verify cert failed: X509_verify_cert: certificate verification error at depth 0: certificate has expired"},
		{name: "another CA's expired certificate: untrusted comes first", cert: other.IssueWith(t, func(c *x509.Certificate) { c.NotAfter = time.Now().Add(-time.Minute) }, tlsHost),
			protos: []string{"http/1.1"},
			tc: func() *tlsv3.UpstreamTlsContext {
				return tlsContext(caFile, []*tlsv3.SubjectAltNameMatcher{exactSAN(tlsHost)}, "http/1.1")
			},
			wantReason: "verify cert failed: X509_verify_cert: certificate verification error at depth 0: unable to get local issuer certificate"},
		{name: "a chain up to an untrusted root", cert: withChain(other.Issue(t, tlsHost), other.Cert), protos: []string{"http/1.1"},
			tc: func() *tlsv3.UpstreamTlsContext {
				return tlsContext(caFile, []*tlsv3.SubjectAltNameMatcher{exactSAN(tlsHost)}, "http/1.1")
			},
			wantReason: "verify cert failed: X509_verify_cert: certificate verification error at depth 1: self signed certificate in certificate chain"},
		{name: "a wildcard SAN covers the exact name, case-insensitively", cert: ca.Issue(t, "*.Provider.test"), protos: []string{"http/1.1"},
			tc: func() *tlsv3.UpstreamTlsContext {
				return tlsContext(caFile, []*tlsv3.SubjectAltNameMatcher{exactSAN("api.provider.TEST")}, "http/1.1")
			},
			wantBody: okBody, wantProto: "HTTP/1.1"},
		{name: "a wildcard SAN covers one label only", cert: ca.Issue(t, "*.test"), protos: []string{"http/1.1"},
			tc: func() *tlsv3.UpstreamTlsContext {
				return tlsContext(caFile, []*tlsv3.SubjectAltNameMatcher{exactSAN("a.provider.test")}, "http/1.1")
			},
			wantReason: "verify cert failed: SAN matcher, certificate SANs are [*.test]"},
		{name: "suffix and prefix matchers, one of which matches", cert: ca.Issue(t, "eu.API.provider.test"), protos: []string{"http/1.1"},
			tc: func() *tlsv3.UpstreamTlsContext {
				return tlsContext(caFile, []*tlsv3.SubjectAltNameMatcher{
					dnsSAN(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "us."}}),
					dnsSAN(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: ".api.provider.test"}, IgnoreCase: true}),
				}, "http/1.1")
			},
			wantBody: okBody, wantProto: "HTTP/1.1"},
		{name: "a suffix matcher is case-sensitive without ignore_case", cert: ca.Issue(t, "eu.API.provider.test"), protos: []string{"http/1.1"},
			tc: func() *tlsv3.UpstreamTlsContext {
				return tlsContext(caFile, []*tlsv3.SubjectAltNameMatcher{
					dnsSAN(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: ".api.provider.test"}}),
				}, "http/1.1")
			},
			wantReason: "verify cert failed: SAN matcher, certificate SANs are [eu.API.provider.test]"},
		{name: "a trusted CA without SAN matchers verifies the chain only", cert: ca.Issue(t, "other.test"), protos: []string{"http/1.1"},
			tc:       func() *tlsv3.UpstreamTlsContext { return tlsContext(caFile, nil, "http/1.1") },
			wantBody: okBody, wantProto: "HTTP/1.1"},
		{name: "no validation context: any certificate is accepted", cert: other.Issue(t, "elsewhere.test"), protos: []string{"http/1.1"},
			tc:       func() *tlsv3.UpstreamTlsContext { return tlsContext("", nil, "http/1.1") },
			wantBody: okBody, wantProto: "HTTP/1.1"},
		{name: "ALPN the server does not speak", cert: good, protos: []string{"http/1.1"}, http2: true,
			tc: func() *tlsv3.UpstreamTlsContext {
				return tlsContext(caFile, []*tlsv3.SubjectAltNameMatcher{exactSAN(tlsHost)}, "h2")
			},
			wantReason: "TLS_error:|268436576:SSL routines:OPENSSL_internal:TLSV1_ALERT_NO_APPLICATION_PROTOCOL:TLS_error_end"},
		{name: "a plaintext server behind a TLS cluster", plain: true,
			tc: func() *tlsv3.UpstreamTlsContext {
				return tlsContext(caFile, []*tlsv3.SubjectAltNameMatcher{exactSAN(tlsHost)}, "http/1.1")
			},
			wantReason: "TLS_error:|268435703:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER:TLS_error_end"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var srv *tlsServer
			var addr string
			if c.plain {
				addr = startHTTP(t, &upstream{})
			} else {
				srv = startTLS(t, c.cert, c.protos...)
				addr = srv.addr
			}
			e, base := startEmulator(t, testBootstrap(t, routeAll("a"), []*clusterv3.Cluster{tlsCluster(t, addr, c.http2, c.tc())}), Options{})
			resp, err := http.Get(base + "/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			x := waitExchanges(t, e, 1)[0]
			tc := c.tc()
			if srv != nil {
				// What the emulator offered: the context's SNI and ALPN,
				// and TLS 1.2 only (Envoy's client default).
				h, ok := srv.hellos.Last()
				if !ok || h.ServerName != tc.GetSni() || !slices.Equal(h.ALPN, tc.GetCommonTlsContext().GetAlpnProtocols()) || !slices.Equal(h.Versions, []uint16{tls.VersionTLS12}) {
					t.Errorf("ClientHello %+v (seen %v), want SNI %q, ALPN %q, versions [TLS 1.2]", h, ok, tc.GetSni(), tc.GetCommonTlsContext().GetAlpnProtocols())
				}
			}
			if c.wantReason == "" {
				if resp.StatusCode != 200 || string(body) != c.wantBody {
					t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, body, c.wantBody)
				}
				select {
				case r := <-srv.got:
					alpn := tc.GetCommonTlsContext().GetAlpnProtocols()[0]
					if r.Proto != c.wantProto || r.TLS == nil || r.TLS.NegotiatedProtocol != alpn {
						t.Errorf("the server saw %s (TLS %+v), want %s over TLS with ALPN %s", r.Proto, r.TLS, c.wantProto, alpn)
					}
				default:
					t.Error("the server's handler saw no request")
				}
				return
			}
			reason := c.wantReason
			if strings.HasPrefix(reason, "verify cert failed: ") {
				reason = "TLS_error:|268435581:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED:" + reason + ":TLS_error_end"
			}
			wantBody, wantDetails := connectFailure(reason)
			if resp.StatusCode != 503 || string(body) != wantBody {
				t.Errorf("got %d %q\nwant 503 %q", resp.StatusCode, body, wantBody)
			}
			if x.Details != wantDetails || x.ResponseFlags != "UF" {
				t.Errorf("details %q, flags %q\nwant %q, UF", x.Details, x.ResponseFlags, wantDetails)
			}
			if srv != nil && len(srv.got) != 0 {
				t.Error("a request reached the server through a failed handshake")
			}
		})
	}
}

// TestUpstreamTLSRetry: a failed handshake is a connect failure, which
// retry_on connect-failure retries (and the reply says so).
func TestUpstreamTLSRetry(t *testing.T) {
	ca := testtls.NewCA(t, "provider CA")
	srv := startTLS(t, testtls.NewCA(t, "another CA").Issue(t, tlsHost), "http/1.1")
	tc := tlsContext(ca.WriteFile(t), []*tlsv3.SubjectAltNameMatcher{exactSAN(tlsHost)}, "http/1.1")
	b := testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) { ra.RetryPolicy = retryOn("connect-failure", 1) }),
		[]*clusterv3.Cluster{tlsCluster(t, srv.addr, false, tc)})
	e, base := startEmulator(t, b, Options{})
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	x := waitExchanges(t, e, 1)[0]
	reason := "TLS_error:|268435581:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED:verify cert failed: X509_verify_cert: certificate verification error at depth 0: unable to get local issuer certificate:TLS_error_end"
	want := "upstream connect error or disconnect/reset before headers. retried and the latest reset reason: remote connection failure, transport failure reason: " + reason
	if resp.StatusCode != 503 || string(body) != want {
		t.Errorf("got %d %q\nwant 503 %q", resp.StatusCode, body, want)
	}
	if d := describeAttempts(x); len(d) != 2 || len(srv.hellos.All()) != 2 {
		t.Errorf("attempts %q, handshakes %d; want two of each", d, len(srv.hellos.All()))
	}
}

// TestUpstreamTLSLoad: what Envoy refuses at load and what the emulator
// does not implement are refused, naming the cluster and the field;
// trusted_ca may be inline.
func TestUpstreamTLSLoad(t *testing.T) {
	ca := testtls.NewCA(t, "provider CA")
	caFile := ca.WriteFile(t)
	noCert := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(noCert, []byte("# no certificate here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	up := startHTTP(t, &upstream{})
	load := func(tc *tlsv3.UpstreamTlsContext) error {
		e, err := New(testBootstrap(t, routeAll("a"), []*clusterv3.Cluster{tlsCluster(t, up, false, tc)}), Options{})
		if err == nil {
			e.conns.close()
		}
		return err
	}
	withVC := func(edit func(vc *tlsv3.CertificateValidationContext)) *tlsv3.UpstreamTlsContext {
		tc := tlsContext(caFile, []*tlsv3.SubjectAltNameMatcher{exactSAN(tlsHost)}, "http/1.1")
		edit(tc.GetCommonTlsContext().GetValidationContext())
		return tc
	}
	for _, c := range []struct {
		name string
		tc   *tlsv3.UpstreamTlsContext
		want string // "" loads
	}{
		{"a SAN matcher without trusted_ca (Envoy)", tlsContext("", []*tlsv3.SubjectAltNameMatcher{exactSAN(tlsHost)}),
			`cluster "a": transport_socket UpstreamTlsContext: SAN-based verification of peer certificates without trusted CA is insecure and not allowed`},
		{"system_root_certs is no trusted CA (Envoy does not implement it)", withVC(func(vc *tlsv3.CertificateValidationContext) {
			vc.TrustedCa = nil
			vc.SystemRootCerts = &tlsv3.CertificateValidationContext_SystemRootCerts{}
		}), "SAN-based verification of peer certificates without trusted CA is insecure and not allowed"},
		{"a CA file without a certificate (Envoy)", withVC(func(vc *tlsv3.CertificateValidationContext) {
			vc.TrustedCa = &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: noCert}}
		}), "Failed to load trusted CA certificates from " + noCert},
		{"a CA file that does not exist", withVC(func(vc *tlsv3.CertificateValidationContext) {
			vc.TrustedCa = &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: noCert + ".missing"}}
		}), "common_tls_context.validation_context.trusted_ca: open " + noCert + ".missing: no such file or directory"},
		{"no common_tls_context: TLS without verification or ALPN", &tlsv3.UpstreamTlsContext{Sni: tlsHost}, ""},
		{"an inline trusted_ca", withVC(func(vc *tlsv3.CertificateValidationContext) {
			vc.TrustedCa = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: string(ca.PEM())}}
		}), ""},
		{"a PKCS#12 client certificate", func() *tlsv3.UpstreamTlsContext {
			tc := tlsContext(caFile, nil)
			tc.CommonTlsContext.TlsCertificates = []*tlsv3.TlsCertificate{{Pkcs12: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte{0}}}}}
			return tc
		}(), "common_tls_context.tls_certificates[0].pkcs12 is not supported by the emulator"},
		{"tls_params", func() *tlsv3.UpstreamTlsContext {
			tc := tlsContext(caFile, nil)
			tc.CommonTlsContext.TlsParams = &tlsv3.TlsParameters{TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3}
			return tc
		}(), "common_tls_context.tls_params is not supported by the emulator"},
		{"auto_sni_san_validation", func() *tlsv3.UpstreamTlsContext {
			tc := tlsContext(caFile, nil)
			tc.AutoSniSanValidation = true
			return tc
		}(), "auto_sni_san_validation is not supported by the emulator"},
		{"verify_certificate_hash", withVC(func(vc *tlsv3.CertificateValidationContext) { vc.VerifyCertificateHash = []string{"00"} }),
			"common_tls_context.validation_context.verify_certificate_hash is not supported by the emulator"},
		{"an email SAN", withVC(func(vc *tlsv3.CertificateValidationContext) {
			vc.MatchTypedSubjectAltNames[0].SanType = tlsv3.SubjectAltNameMatcher_EMAIL
		}), "match_typed_subject_alt_names[0]: san_type EMAIL is not supported by the emulator (DNS and URI only)"},
		{"a regex SAN matcher", withVC(func(vc *tlsv3.CertificateValidationContext) {
			vc.MatchTypedSubjectAltNames[0].Matcher = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".*"}}}
		}), "match_typed_subject_alt_names[0].matcher.safe_regex is not supported by the emulator"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := load(c.tc)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}

	// A TLS cluster carries the emulator's own gRPC calls too
	// (grpctls_test.go tests them).
	grpcTLS := tlsCluster(t, up, true, tlsContext(caFile, nil, "h2"))
	grpcTLS.Name = "ext"
	b := testBootstrap(t, routeAll("a"), []*clusterv3.Cluster{testCluster(t, "a", up, false), grpcTLS},
		filterOf(t, "ext_proc", upstreamExtProc("ext", "a")))
	e, err := New(b, Options{})
	if err != nil {
		t.Fatalf("a gRPC service on a TLS cluster: %v", err)
	}
	e.conns.close()
}
