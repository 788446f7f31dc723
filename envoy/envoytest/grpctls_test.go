package envoytest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicegw/sluice/internal/testtls"
)

// TLS and mTLS on the emulator's own gRPC clusters — ext_authz, ext_proc
// and ADS — against real grpc-go servers with TLS credentials on
// 127.0.0.1:0.

// The gRPC service's host name (SNI and DNS SAN) and the SPIFFE IDs of
// the two sides.
const (
	svcHost   = "authz.sluice.test"
	envoyID   = "spiffe://sluice.test/ns/gateway/sa/envoy"
	sluiceID  = "spiffe://sluice.test/ns/gateway/sa/sluice"
	strangeID = "spiffe://other.test/ns/gateway/sa/sluice"
)

// spiffeCert is a certificate from ca for dns names and the URI SAN id,
// for usage (server or client authentication).
func spiffeCert(t *testing.T, ca *testtls.CA, id string, usage x509.ExtKeyUsage, dns ...string) tls.Certificate {
	t.Helper()
	u, err := url.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	return ca.IssueWith(t, func(c *x509.Certificate) {
		c.ExtKeyUsage = []x509.ExtKeyUsage{usage}
		c.URIs = []*url.URL{u}
	}, dns...)
}

// certPEM is a certificate chain and its key, PEM-encoded.
func certPEM(t *testing.T, c tls.Certificate) (chain, key []byte) {
	t.Helper()
	for _, der := range c.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	k, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return chain, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k})
}

// writeCert writes a certificate and its key to dir (t.TempDir() when
// ""), as name.pem and name.key, and returns the paths.
func writeCert(t *testing.T, dir, name string, c tls.Certificate) (chainFile, keyFile string) {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	chain, key := certPEM(t, c)
	chainFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	for f, b := range map[string][]byte{chainFile: chain, keyFile: key} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return chainFile, keyFile
}

func fileDS(path string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: path}}
}

func uriSAN(m *matcherv3.StringMatcher) *tlsv3.SubjectAltNameMatcher {
	return &tlsv3.SubjectAltNameMatcher{SanType: tlsv3.SubjectAltNameMatcher_URI, Matcher: m}
}

func exactURI(id string) *tlsv3.SubjectAltNameMatcher {
	return uriSAN(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: id}})
}

// mtlsContext is the UpstreamTlsContext Sluice emits for its extension
// cluster: SNI, the client certificate from files, the CA file and the
// server's SAN matchers.
func mtlsContext(caFile, chainFile, keyFile string, sans ...*tlsv3.SubjectAltNameMatcher) *tlsv3.UpstreamTlsContext {
	tc := tlsContext(caFile, sans)
	if tc.CommonTlsContext.ValidationContextType == nil {
		tc.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{}}
	}
	tc.Sni = svcHost
	if chainFile != "" {
		tc.CommonTlsContext.TlsCertificates = []*tlsv3.TlsCertificate{{CertificateChain: fileDS(chainFile), PrivateKey: fileDS(keyFile)}}
	}
	return tc
}

// sdsContext names its client certificate and validation context among
// the bootstrap's static secrets.
func sdsContext(certSecret, caSecret string) *tlsv3.UpstreamTlsContext {
	return &tlsv3.UpstreamTlsContext{Sni: svcHost, CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: certSecret}},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{
			ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: caSecret},
		},
	}}
}

func certSecret(name, chainFile, keyFile string) *tlsv3.Secret {
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: fileDS(chainFile), PrivateKey: fileDS(keyFile),
	}}}
}

func caSecret(name, caFile string, sans ...*tlsv3.SubjectAltNameMatcher) *tlsv3.Secret {
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		TrustedCa: fileDS(caFile), MatchTypedSubjectAltNames: sans,
	}}}
}

func tlsSocket(t *testing.T, tc *tlsv3.UpstreamTlsContext) *corev3.TransportSocket {
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(t, tc)}}
}

// grpcTLSServer is a grpc-go server with TLS credentials, recording the
// ClientHellos it saw and the client certificate behind each call.
type grpcTLSServer struct {
	addr   string
	hellos *testtls.Hellos
	// cert is the certificate presented; set replaces it.
	mu    sync.Mutex
	cert  tls.Certificate
	peers []string // the client's URI SANs per call ("-" for no certificate)
}

// startGRPCTLS serves register's services on 127.0.0.1:0 over TLS with
// cert, requiring and verifying a client certificate from clientCA when
// it is not nil.
func startGRPCTLS(t *testing.T, cert tls.Certificate, clientCA *testtls.CA, register func(*grpc.Server, *grpcTLSServer)) *grpcTLSServer {
	t.Helper()
	s := &grpcTLSServer{hellos: &testtls.Hellos{}, cert: cert}
	cfg := testtls.ServerConfig(cert, nil, s.hellos) // credentials.NewTLS adds ALPN h2
	cfg.Certificates = nil
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		c := s.cert
		return &c, nil
	}
	if clientCA != nil {
		cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, clientCA.Pool()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	register(gs, s)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	s.addr = ln.Addr().String()
	return s
}

func (s *grpcTLSServer) set(cert tls.Certificate) {
	s.mu.Lock()
	s.cert = cert
	s.mu.Unlock()
}

// sawPeer records the client certificate of a call.
func (s *grpcTLSServer) sawPeer(ctx context.Context) {
	id := "-"
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			id = ""
			for _, u := range ti.State.PeerCertificates[0].URIs {
				id += u.String()
			}
		}
	}
	s.mu.Lock()
	s.peers = append(s.peers, id)
	s.mu.Unlock()
}

func (s *grpcTLSServer) seenPeers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.peers)
}

// authzOK registers an Authorization service that allows every request
// and records who called.
func authzOK(gs *grpc.Server, s *grpcTLSServer) {
	authv3.RegisterAuthorizationServer(gs, &scriptedAuthz{check: func(ctx context.Context, _ *authv3.CheckRequest) (*authv3.CheckResponse, error) {
		s.sawPeer(ctx)
		return okResp(nil), nil
	}})
}

// authzTLSBootstrap routes everything to upstream through an ext_authz
// filter whose cluster "authz" speaks TLS with tc.
func authzTLSBootstrap(t *testing.T, upstream, authz string, tc *tlsv3.UpstreamTlsContext, edit func(*extauthzv3.ExtAuthz), secrets ...*tlsv3.Secret) *bootstrapv3.Bootstrap {
	t.Helper()
	ac := testCluster(t, "authz", authz, true)
	ac.TransportSocket = tlsSocket(t, tc)
	cfg := &extauthzv3.ExtAuthz{Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: grpcCluster("authz", 0)}, TransportApiVersion: corev3.ApiVersion_V3}
	if edit != nil {
		edit(cfg)
	}
	b := testBootstrap(t, routeAll("upstream"), []*clusterv3.Cluster{testCluster(t, "upstream", upstream, false), ac}, filterOf(t, "authz", cfg))
	b.StaticResources.Secrets = secrets
	return b
}

// anyError stands for a connection failure whose message is not checked.
const anyError = "*"

// verifyFailed is the failure reason of a failed certificate
// verification (SslSocket::drainErrorQueue).
func verifyFailed(detail string) string {
	return "TLS_error:|268435581:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED:verify cert failed: " + detail + ":TLS_error_end"
}

// TestGRPCServiceTLS: the cluster of an ext_authz service is dialled with
// TLS as its UpstreamTlsContext asks — client certificate from files,
// inline or a static secret, the server verified against trusted_ca and
// DNS or URI (SPIFFE) SAN matchers, SNI, ALPN h2 — and a failed handshake
// is a transport error of the Check: failure_mode_allow or
// status_on_error, as for a server that is down (envoy-protocol.md §2).
func TestGRPCServiceTLS(t *testing.T) {
	ca, other := testtls.NewCA(t, "mesh CA"), testtls.NewCA(t, "another CA")
	caFile := ca.WriteFile(t)
	serverCert := spiffeCert(t, ca, sluiceID, x509.ExtKeyUsageServerAuth, svcHost)
	clientCert := spiffeCert(t, ca, envoyID, x509.ExtKeyUsageClientAuth)
	chainFile, keyFile := writeCert(t, "", "envoy", clientCert)
	chainPEM, keyPEM := certPEM(t, clientCert)
	mtls := func(sans ...*tlsv3.SubjectAltNameMatcher) func() *tlsv3.UpstreamTlsContext {
		return func() *tlsv3.UpstreamTlsContext { return mtlsContext(caFile, chainFile, keyFile, sans...) }
	}
	for _, c := range []struct {
		name       string
		serverCert tls.Certificate
		clientCA   *testtls.CA // the server requires a client certificate from it
		tc         func() *tlsv3.UpstreamTlsContext
		secrets    []*tlsv3.Secret
		authz      func(*extauthzv3.ExtAuthz)
		wantStatus int
		wantPeer   string // the client identity the server saw
		wantReason string // the transport failure reason in the Check's error
		wantALPN   []string
		wantHeader string // x-envoy-auth-failure-mode-allowed at the upstream
	}{
		{name: "mTLS: client certificate from files, the server's SPIFFE ID matched exactly, SNI, ALPN h2 (the HTTP/2 pool's fallback)",
			serverCert: serverCert, clientCA: ca, tc: mtls(exactURI(sluiceID)),
			wantStatus: 200, wantPeer: envoyID, wantALPN: []string{"h2"}},
		{name: "mTLS: an inline client certificate, a URI prefix matcher",
			serverCert: serverCert, clientCA: ca,
			tc: func() *tlsv3.UpstreamTlsContext {
				tc := mtlsContext(caFile, "", "", uriSAN(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "spiffe://sluice.test/"}}))
				tc.CommonTlsContext.TlsCertificates = []*tlsv3.TlsCertificate{{
					CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: chainPEM}},
					PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: string(keyPEM)}},
				}}
				return tc
			},
			wantStatus: 200, wantPeer: envoyID, wantALPN: []string{"h2"}},
		{name: "mTLS from static secrets named without sds_config (SecretManagerImpl::findStatic…Provider)",
			serverCert: serverCert, clientCA: ca, tc: func() *tlsv3.UpstreamTlsContext { return sdsContext("envoy-cert", "mesh-ca") },
			secrets:    []*tlsv3.Secret{caSecret("mesh-ca", caFile, exactURI(sluiceID)), certSecret("envoy-cert", chainFile, keyFile)},
			wantStatus: 200, wantPeer: envoyID, wantALPN: []string{"h2"}},
		{name: "SAN matchers are any-of: a DNS matcher matches where the URI matcher does not",
			serverCert: serverCert, clientCA: ca, tc: mtls(exactURI(strangeID), exactSAN(svcHost)),
			wantStatus: 200, wantPeer: envoyID},
		{name: "TLS without a client certificate to a server that asks for none",
			serverCert: serverCert, tc: func() *tlsv3.UpstreamTlsContext { return mtlsContext(caFile, "", "", exactURI(sluiceID)) },
			wantStatus: 200, wantPeer: "-"},
		{name: "a server certificate from another CA: a transport error, status_on_error's default 403",
			serverCert: spiffeCert(t, other, sluiceID, x509.ExtKeyUsageServerAuth, svcHost), clientCA: ca, tc: mtls(exactURI(sluiceID)),
			wantStatus: 403, wantReason: verifyFailed("X509_verify_cert: certificate verification error at depth 0: unable to get local issuer certificate")},
		{name: "a SPIFFE ID outside the matcher",
			serverCert: spiffeCert(t, ca, strangeID, x509.ExtKeyUsageServerAuth, svcHost), clientCA: ca,
			tc:         mtls(uriSAN(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "spiffe://sluice.test/"}})),
			wantStatus: 403, wantReason: verifyFailed("SAN matcher, certificate SANs are [" + svcHost + ", " + strangeID + "]")},
		{name: "a URI matcher is case-sensitive without ignore_case",
			serverCert: serverCert, clientCA: ca, tc: mtls(exactURI(strings.ToUpper(sluiceID))),
			wantStatus: 403, wantReason: verifyFailed("SAN matcher, certificate SANs are [" + svcHost + ", " + sluiceID + "]")},
		// crypto/tls's server answers an empty Certificate with a
		// handshake_failure alert, which BoringSSL reports by its name.
		{name: "the server requires a client certificate the cluster does not have",
			serverCert: serverCert, clientCA: ca, tc: func() *tlsv3.UpstreamTlsContext { return mtlsContext(caFile, "", "", exactURI(sluiceID)) },
			wantStatus: 403, wantReason: "TLS_error:|268436496:SSL routines:OPENSSL_internal:SSLV3_ALERT_HANDSHAKE_FAILURE:TLS_error_end"},
		// crypto/tls's server completes a handshake that offers only
		// http/1.1 without ALPN (its http/1.1 fallback); grpc-go's server
		// then closes the connection: a connection failure all the same.
		{name: "alpn_protocols replace the h2 fallback: grpc-go's server refuses http/1.1",
			serverCert: serverCert, clientCA: ca,
			tc: func() *tlsv3.UpstreamTlsContext {
				tc := mtlsContext(caFile, chainFile, keyFile, exactURI(sluiceID))
				tc.CommonTlsContext.AlpnProtocols = []string{"http/1.1"}
				return tc
			},
			wantStatus: 403, wantALPN: []string{"http/1.1"}, wantReason: anyError},
		{name: "an ALPN protocol the server does not speak at all",
			serverCert: serverCert, clientCA: ca,
			tc: func() *tlsv3.UpstreamTlsContext {
				tc := mtlsContext(caFile, chainFile, keyFile, exactURI(sluiceID))
				tc.CommonTlsContext.AlpnProtocols = []string{"grpc-exp"}
				return tc
			},
			wantStatus: 403, wantALPN: []string{"grpc-exp"},
			wantReason: "TLS_error:|268436576:SSL routines:OPENSSL_internal:TLSV1_ALERT_NO_APPLICATION_PROTOCOL:TLS_error_end"},
		{name: "a handshake failure with status_on_error",
			serverCert: spiffeCert(t, other, sluiceID, x509.ExtKeyUsageServerAuth, svcHost), clientCA: ca, tc: mtls(exactURI(sluiceID)),
			authz: func(c *extauthzv3.ExtAuthz) {
				c.StatusOnError = &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}
			},
			wantStatus: 503, wantReason: verifyFailed("X509_verify_cert: certificate verification error at depth 0: unable to get local issuer certificate")},
		{name: "a handshake failure with failure_mode_allow: the request goes on, flagged",
			serverCert: serverCert, clientCA: ca, tc: func() *tlsv3.UpstreamTlsContext { return mtlsContext(caFile, "", "", exactURI(sluiceID)) },
			authz:      func(c *extauthzv3.ExtAuthz) { c.FailureModeAllow, c.FailureModeAllowHeaderAdd = true, true },
			wantStatus: 200, wantHeader: "true",
			wantReason: "TLS_error:|268436496:SSL routines:OPENSSL_internal:SSLV3_ALERT_HANDSHAKE_FAILURE:TLS_error_end"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := startGRPCTLS(t, c.serverCert, c.clientCA, authzOK)
			up := &echoUpstream{}
			b := authzTLSBootstrap(t, startHTTP(t, up), srv.addr, c.tc(), c.authz, c.secrets...)
			e, base := startEmulator(t, b, Options{})
			resp, err := http.Get(base + "/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			x := waitExchanges(t, e, 1)[0]
			if resp.StatusCode != c.wantStatus {
				t.Errorf("status %d, want %d (details %q)", resp.StatusCode, c.wantStatus, x.Details)
			}
			h, ok := srv.hellos.Last()
			if !ok || h.ServerName != svcHost || !slices.Equal(h.Versions, []uint16{tls.VersionTLS12}) {
				t.Errorf("ClientHello %+v (seen %v), want SNI %s, TLS 1.2", h, ok, svcHost)
			}
			if c.wantALPN != nil && !slices.Equal(h.ALPN, c.wantALPN) {
				t.Errorf("ALPN offered %q, want %q", h.ALPN, c.wantALPN)
			}
			if len(x.Authz) != 1 {
				t.Fatalf("%d checks recorded, want 1", len(x.Authz))
			}
			if c.wantReason == "" {
				if x.Authz[0].Err != nil {
					t.Errorf("Check failed: %v", x.Authz[0].Err)
				}
				if p := srv.seenPeers(); !slices.Equal(p, []string{c.wantPeer}) {
					t.Errorf("the server saw clients %q, want [%s]", p, c.wantPeer)
				}
				return
			}
			if err := x.Authz[0].Err; err == nil || c.wantReason != anyError && !strings.Contains(err.Error(), c.wantReason) {
				t.Errorf("Check error %v\nwant one carrying %q", err, c.wantReason)
			}
			if p := srv.seenPeers(); len(p) != 0 {
				t.Errorf("a call reached the server through a failed handshake: %q", p)
			}
			if c.wantHeader != "" {
				if got := up.received(); len(got) != 1 || got[0].Header.Get(authzFailureHeader) != c.wantHeader {
					t.Errorf("the upstream got %+v, want one request with %s: %s", got, authzFailureHeader, c.wantHeader)
				}
			} else if len(up.received()) != 0 {
				t.Error("a request denied on error reached the upstream")
			}
		})
	}
}

// TestExtProcTLS: ext_proc's cluster speaks mTLS from static secrets; a
// failed handshake fails the stream's opening: status_on_error, details
// ext_proc_error_gRPC_error_14{…} (envoy-protocol.md §1.8).
func TestExtProcTLS(t *testing.T) {
	ca, other := testtls.NewCA(t, "mesh CA"), testtls.NewCA(t, "another CA")
	caFile := ca.WriteFile(t)
	chainFile, keyFile := writeCert(t, "", "envoy", spiffeCert(t, ca, envoyID, x509.ExtKeyUsageClientAuth))
	secrets := []*tlsv3.Secret{certSecret("envoy-cert", chainFile, keyFile), caSecret("mesh-ca", caFile, exactURI(sluiceID))}
	for _, c := range []struct {
		name       string
		serverCert tls.Certificate
		wantStatus int
		wantReason string
	}{
		{"mTLS: the stream opens and the request goes through", spiffeCert(t, ca, sluiceID, x509.ExtKeyUsageServerAuth, svcHost), 200, ""},
		{"a server certificate from another CA: status_on_error", spiffeCert(t, other, sluiceID, x509.ExtKeyUsageServerAuth, svcHost), 503,
			verifyFailed("X509_verify_cert: certificate verification error at depth 0: unable to get local issuer certificate")},
	} {
		t.Run(c.name, func(t *testing.T) {
			proc := &procServer{}
			srv := startGRPCTLS(t, c.serverCert, ca, func(gs *grpc.Server, _ *grpcTLSServer) { extprocsvc.RegisterExternalProcessorServer(gs, proc) })
			pc := testCluster(t, "proc", srv.addr, true)
			pc.TransportSocket = tlsSocket(t, sdsContext("envoy-cert", "mesh-ca"))
			ep := &extprocv3.ExternalProcessor{
				GrpcService:    grpcCluster("proc", -1),
				MessageTimeout: durationpb.New(5 * time.Second),
				StatusOnError:  &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
			}
			up := &echoUpstream{}
			b := testBootstrap(t, routeAll("upstream"), []*clusterv3.Cluster{testCluster(t, "upstream", startHTTP(t, up), false), pc}, filterOf(t, epFilterName, ep))
			b.StaticResources.Secrets = secrets
			e, base := startEmulator(t, b, Options{})
			resp, err := http.Get(base + "/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			x := waitExchanges(t, e, 1)[0]
			if resp.StatusCode != c.wantStatus {
				t.Errorf("status %d, want %d (details %q)", resp.StatusCode, c.wantStatus, x.Details)
			}
			if c.wantReason == "" {
				if n := len(proc.connections()); n != 1 {
					t.Errorf("%d ext_proc streams, want 1", n)
				}
				return
			}
			// Response-code details have their spaces replaced.
			if !strings.HasPrefix(x.Details, "ext_proc_error_gRPC_error_14{") || !strings.Contains(x.Details, strings.ReplaceAll(c.wantReason, " ", "_")) {
				t.Errorf("details %q\nwant ext_proc_error_gRPC_error_14{…%s…}", x.Details, c.wantReason)
			}
			if len(proc.connections()) != 0 || len(up.received()) != 0 {
				t.Error("the request got past a failed handshake")
			}
		})
	}
}

// TestGRPCServiceTLSLoad: what Envoy refuses when it builds the context,
// and every field the emulator does not implement, is refused at load,
// naming the field; the bootstrap's static secrets are filed as Envoy
// files them.
func TestGRPCServiceTLSLoad(t *testing.T) {
	ca := testtls.NewCA(t, "mesh CA")
	caFile := ca.WriteFile(t)
	dir := t.TempDir()
	chainFile, keyFile := writeCert(t, dir, "envoy", spiffeCert(t, ca, envoyID, x509.ExtKeyUsageClientAuth))
	_, otherKey := writeCert(t, dir, "other", spiffeCert(t, ca, envoyID, x509.ExtKeyUsageClientAuth))
	secrets := func(extra ...*tlsv3.Secret) []*tlsv3.Secret {
		return append([]*tlsv3.Secret{certSecret("envoy-cert", chainFile, keyFile), caSecret("mesh-ca", caFile, exactURI(sluiceID))}, extra...)
	}
	edit := func(tc *tlsv3.UpstreamTlsContext, f func(*tlsv3.UpstreamTlsContext)) func() *tlsv3.UpstreamTlsContext {
		return func() *tlsv3.UpstreamTlsContext { f(tc); return tc }
	}
	const cluster = `cluster "authz": transport_socket UpstreamTlsContext: `
	for _, c := range []struct {
		name    string
		tc      func() *tlsv3.UpstreamTlsContext
		secrets []*tlsv3.Secret
		want    string // "" loads
	}{
		{"files", func() *tlsv3.UpstreamTlsContext { return mtlsContext(caFile, chainFile, keyFile, exactURI(sluiceID)) }, nil, ""},
		{"static secrets", func() *tlsv3.UpstreamTlsContext { return sdsContext("envoy-cert", "mesh-ca") }, secrets(), ""},
		{"an empty tls_certificates entry is skipped, as Envoy skips it",
			edit(mtlsContext(caFile, "", "", exactURI(sluiceID)), func(tc *tlsv3.UpstreamTlsContext) {
				tc.CommonTlsContext.TlsCertificates = []*tlsv3.TlsCertificate{{}}
			}), nil, ""},
		{"watched_directory of a static secret is accepted: Envoy watches only SDS-delivered secrets",
			func() *tlsv3.UpstreamTlsContext { return sdsContext("envoy-cert", "mesh-ca") },
			func() []*tlsv3.Secret {
				s := secrets()
				s[0].GetTlsCertificate().WatchedDirectory = &corev3.WatchedDirectory{Path: dir}
				return s
			}(), ""},
		{"an unknown static secret", func() *tlsv3.UpstreamTlsContext { return sdsContext("nope", "mesh-ca") }, secrets(),
			cluster + "common_tls_context.tls_certificate_sds_secret_configs[0]: Unknown static secret: nope"},
		{"a validation context is not a TLS certificate", func() *tlsv3.UpstreamTlsContext { return sdsContext("mesh-ca", "mesh-ca") }, secrets(),
			"common_tls_context.tls_certificate_sds_secret_configs[0]: Unknown static secret: mesh-ca"},
		{"an unknown static validation context", func() *tlsv3.UpstreamTlsContext { return sdsContext("envoy-cert", "nope") }, secrets(),
			cluster + "common_tls_context.validation_context_sds_secret_config: Unknown static certificate validation context: nope"},
		{"SDS with sds_config", edit(sdsContext("envoy-cert", "mesh-ca"), func(tc *tlsv3.UpstreamTlsContext) {
			tc.CommonTlsContext.TlsCertificateSdsSecretConfigs[0].SdsConfig = adsSource()
		}), secrets(), cluster + "common_tls_context.tls_certificate_sds_secret_configs[0].sds_config: SDS is not supported by the emulator"},
		{"a field of a static secret", func() *tlsv3.UpstreamTlsContext { return sdsContext("envoy-cert", "mesh-ca") },
			func() []*tlsv3.Secret {
				s := secrets()
				s[0].GetTlsCertificate().Password = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "x"}}
				return s
			}(), "static_resources.secrets[0].tls_certificate.password is not supported by the emulator"},
		{"a SAN matcher without trusted_ca in a static validation context (Envoy)",
			func() *tlsv3.UpstreamTlsContext { return sdsContext("envoy-cert", "no-ca") },
			secrets(&tlsv3.Secret{Name: "no-ca", Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{exactURI(sluiceID)},
			}}}), cluster + "SAN-based verification of peer certificates without trusted CA is insecure and not allowed"},
		{"a field of a static validation context", func() *tlsv3.UpstreamTlsContext { return sdsContext("envoy-cert", "mesh-ca") },
			func() []*tlsv3.Secret {
				s := secrets()
				s[1].GetValidationContext().AllowExpiredCertificate = true
				return s
			}(), "static_resources.secrets[1].validation_context.allow_expired_certificate is not supported by the emulator"},
		{"two secrets of a type with one name (Envoy)", func() *tlsv3.UpstreamTlsContext { return sdsContext("envoy-cert", "mesh-ca") },
			secrets(certSecret("envoy-cert", chainFile, keyFile)), "static_resources.secrets[2]: Duplicate static TlsCertificate secret name envoy-cert"},
		{"two client certificates (Envoy)", edit(mtlsContext(caFile, chainFile, keyFile), func(tc *tlsv3.UpstreamTlsContext) {
			tc.CommonTlsContext.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{{Name: "envoy-cert"}}
		}), secrets(), "Multiple TLS certificates are not supported for client contexts"},
		{"a certificate without its key (Envoy)", edit(mtlsContext(caFile, chainFile, keyFile), func(tc *tlsv3.UpstreamTlsContext) {
			tc.CommonTlsContext.TlsCertificates[0].PrivateKey = nil
		}), nil, "common_tls_context.tls_certificates[0]: Failed to load incomplete private key from path: "},
		{"a key that is not the certificate's (Envoy)", edit(mtlsContext(caFile, chainFile, keyFile), func(tc *tlsv3.UpstreamTlsContext) {
			tc.CommonTlsContext.TlsCertificates[0].PrivateKey = fileDS(otherKey)
		}), nil, "common_tls_context.tls_certificates[0]: Failed to load private key from " + otherKey},
		{"a chain that is not PEM (Envoy)", edit(mtlsContext(caFile, chainFile, keyFile), func(tc *tlsv3.UpstreamTlsContext) {
			tc.CommonTlsContext.TlsCertificates[0].CertificateChain = fileDS(keyFile)
		}), nil, "common_tls_context.tls_certificates[0]: Failed to load certificate chain from " + keyFile},
		{"a certificate file that does not exist", edit(mtlsContext(caFile, chainFile, keyFile), func(tc *tlsv3.UpstreamTlsContext) {
			tc.CommonTlsContext.TlsCertificates[0].CertificateChain = fileDS(chainFile + ".missing")
		}), nil, "common_tls_context.tls_certificates[0].certificate_chain: open " + chainFile + ".missing: no such file or directory"},
		{"tls_params on a gRPC cluster", edit(mtlsContext(caFile, chainFile, keyFile), func(tc *tlsv3.UpstreamTlsContext) {
			tc.CommonTlsContext.TlsParams = &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_3}
		}), nil, cluster + "common_tls_context.tls_params is not supported by the emulator"},
		{"a private key provider", edit(mtlsContext(caFile, chainFile, keyFile), func(tc *tlsv3.UpstreamTlsContext) {
			tc.CommonTlsContext.TlsCertificates[0].PrivateKeyProvider = &tlsv3.PrivateKeyProvider{ProviderName: "cryptomb"}
		}), nil, "common_tls_context.tls_certificates[0].private_key_provider is not supported by the emulator"},
		{"a combined validation context", edit(sdsContext("envoy-cert", "mesh-ca"), func(tc *tlsv3.UpstreamTlsContext) {
			tc.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext: &tlsv3.CertificateValidationContext{}, ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "mesh-ca"},
			}}
		}), secrets(), "common_tls_context.combined_validation_context is not supported by the emulator"},
		{"max_session_keys", edit(mtlsContext(caFile, chainFile, keyFile), func(tc *tlsv3.UpstreamTlsContext) {
			tc.MaxSessionKeys = wrapperspb.UInt32(0)
		}), nil, cluster + "max_session_keys is not supported by the emulator"},
		{"a regex URI matcher", func() *tlsv3.UpstreamTlsContext {
			return mtlsContext(caFile, chainFile, keyFile, uriSAN(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "spiffe://.*"}}}))
		}, nil, "match_typed_subject_alt_names[0].matcher.safe_regex is not supported by the emulator"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := authzTLSBootstrap(t, closedAddr(t), closedAddr(t), c.tc(), nil, c.secrets...)
			e, err := New(b, Options{})
			if err == nil {
				e.conns.close()
			}
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v\nwant %q", err, c.want)
			}
		})
	}

	// The ADS cluster's context is checked at load too.
	b, err := ADSBootstrap(closedAddr(t), adsNode, "sluice-test")
	if err != nil {
		t.Fatal(err)
	}
	tc := sdsContext("envoy-cert", "nope")
	b.StaticResources.Clusters[0].TransportSocket = tlsSocket(t, tc)
	b.StaticResources.Secrets = secrets()
	want := `static_resources: cluster "xds_cluster": transport_socket UpstreamTlsContext: common_tls_context.validation_context_sds_secret_config: Unknown static certificate validation context: nope`
	if _, err := New(b, Options{}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("ADS cluster: error %v\nwant %q", err, want)
	}
}

// startTLSControlPlane is startControlPlane over TLS with cert, requiring
// a client certificate from clientCA.
func startTLSControlPlane(t *testing.T, cert tls.Certificate, clientCA *testtls.CA) (*controlPlane, *grpcTLSServer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cp := &controlPlane{
		cache:     cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil),
		responses: map[string]*discoveryv3.DiscoveryResponse{},
		nacks:     make(chan *discoveryv3.DiscoveryRequest, 1),
		changed:   make(chan struct{}),
	}
	srv := sotw.NewServer(ctx, cp.cache, cp)
	s := startGRPCTLS(t, cert, clientCA, func(gs *grpc.Server, _ *grpcTLSServer) {
		discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, adsHandler{sotw: srv})
	})
	cp.addr = s.addr
	return cp, s
}

// startADSFrom is startADS with the bootstrap b.
func startADSFrom(t *testing.T, b *bootstrapv3.Bootstrap) *adsEmulator {
	t.Helper()
	e, err := New(b, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- e.Run(ctx) }()
	tr := &http.Transport{}
	t.Cleanup(func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
		tr.CloseIdleConnections()
	})
	return &adsEmulator{Emulator: e, ctx: ctx, cancel: cancel, client: &http.Client{Transport: tr}}
}

// poll waits up to 10 s for cond.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestADSTLS: the ADS connection goes through the xDS cluster's
// UpstreamTlsContext (mTLS from static secrets). While the server's
// certificate is not trusted no configuration arrives and the emulator
// keeps trying, as for a server that is down; once it is, the
// subscription proceeds.
func TestADSTLS(t *testing.T) {
	opts := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opts) })
	ca, other := testtls.NewCA(t, "mesh CA"), testtls.NewCA(t, "another CA")
	chainFile, keyFile := writeCert(t, "", "envoy", spiffeCert(t, ca, envoyID, x509.ExtKeyUsageClientAuth))
	cp, srv := startTLSControlPlane(t, spiffeCert(t, other, sluiceID, x509.ExtKeyUsageServerAuth, svcHost), ca)
	cp.set(t, snap{v: all("1"),
		clusters:  []types.Resource{testCluster(t, "backend", backend(t, "one"), false)},
		listeners: []types.Resource{must[*listenerv3.Listener](t)(RDSListener("ingress", "routes"))},
		routes:    []types.Resource{routes("routes", "/", "backend")},
	})
	b := must[*bootstrapv3.Bootstrap](t)(ADSBootstrap(cp.addr, adsNode, "sluice-test"))
	b.StaticResources.Clusters[0].TransportSocket = tlsSocket(t, sdsContext("envoy-cert", "mesh-ca"))
	b.StaticResources.Secrets = []*tlsv3.Secret{certSecret("envoy-cert", chainFile, keyFile), caSecret("mesh-ca", ca.WriteFile(t), exactURI(sluiceID))}
	e := startADSFrom(t, b)

	poll(t, "a refused handshake", func() bool { return len(srv.hellos.All()) >= 1 })
	if rs := cp.seen(); len(rs) != 0 || e.ListenAddr() != "" || e.XDSStatus() != (XDSStatus{}) {
		t.Fatalf("through an untrusted server: requests %v, listener %q, status %+v", rs, e.ListenAddr(), e.XDSStatus())
	}
	// The retries follow grpc-go's reconnection backoff (1 s, then x1.6)
	// and the ADS stream's (Envoy's 0.5 s doubling): allow for both.
	srv.set(spiffeCert(t, ca, sluiceID, x509.ExtKeyUsageServerAuth, svcHost))
	lctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	ln, err := e.Listen(lctx)
	if err != nil {
		t.Fatal(err)
	}
	e.serveOn(t, ln)
	e.wantGet(t, "/", "one")
	if n := len(srv.hellos.All()); n < 2 {
		t.Errorf("%d handshakes, want the refused one and a retry", n)
	}
	if h, _ := srv.hellos.Last(); h.ServerName != svcHost || !slices.Equal(h.ALPN, []string{"h2"}) {
		t.Errorf("ClientHello %+v, want SNI %s and ALPN h2", h, svcHost)
	}
}

// TestGRPCTLSFilesPerClusterVersion: a cluster's certificate files are
// read when the cluster is built — at load, and for each new version of
// it over CDS — and not when a CDS update leaves the cluster's proto as it
// was (ClusterManagerImpl::addOrUpdateCluster), even if the configuration
// is rebuilt for another change.
func TestGRPCTLSFilesPerClusterVersion(t *testing.T) {
	ca := testtls.NewCA(t, "mesh CA")
	caFile := ca.WriteFile(t)
	dir := t.TempDir()
	id := func(n string) string { return envoyID + "-" + n }
	issue := func(n string) { writeCert(t, dir, "envoy", spiffeCert(t, ca, id(n), x509.ExtKeyUsageClientAuth)) }
	issue("1")
	chainFile, keyFile := filepath.Join(dir, "envoy.pem"), filepath.Join(dir, "envoy.key")
	authz := startGRPCTLS(t, spiffeCert(t, ca, sluiceID, x509.ExtKeyUsageServerAuth, svcHost), ca, authzOK)
	cp := startControlPlane(t)
	backendCluster := testCluster(t, "backend", backend(t, "one"), false)
	authzCluster := func(connectTimeout time.Duration) *clusterv3.Cluster {
		c := testCluster(t, "authz", authz.addr, true)
		c.ConnectTimeout = durationpb.New(connectTimeout)
		c.TransportSocket = tlsSocket(t, mtlsContext(caFile, chainFile, keyFile, exactURI(sluiceID)))
		return c
	}
	listener := must[*listenerv3.Listener](t)(RDSListener("ingress", "routes", filterOf(t, "authz", &extauthzv3.ExtAuthz{
		Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: grpcCluster("authz", 0)}, TransportApiVersion: corev3.ApiVersion_V3,
	})))
	set := func(v string, authz *clusterv3.Cluster, prefix string) {
		cp.set(t, snap{v: all(v),
			clusters:  []types.Resource{backendCluster, authz},
			listeners: []types.Resource{listener},
			routes:    []types.Resource{routes("routes", prefix, "backend")},
		})
	}
	inForce := func(e *adsEmulator, v string) {
		e.waitStatus(t, "version "+v+" in force", func(s XDSStatus) bool { return s.Active.Clusters == v && s.Active.Routes == v })
	}
	wantPeer := func(e *adsEmulator, want string) {
		t.Helper()
		e.wantGet(t, "/v1/models", "one")
		if p := authz.seenPeers(); len(p) == 0 || p[len(p)-1] != want {
			t.Errorf("the authorization server saw %q, want %s last", p, want)
		}
	}
	set("1", authzCluster(time.Second), "/")
	e := startADS(t, cp)
	e.serve(t)
	wantPeer(e, id("1"))

	issue("2")
	set("2", authzCluster(time.Second), "/v1")
	inForce(e, "2")
	wantPeer(e, id("1"))

	set("3", authzCluster(2*time.Second), "/v1")
	inForce(e, "3")
	wantPeer(e, id("2"))
}
