package tlsserve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicegw/sluice/internal/testtls"
)

// TestMTLS: a real gRPC server with mTLS admits the clients the CA and
// the allowed identities admit, and refuses every other with its reason
// counted and a log line naming the peer and what its certificate
// presented.
func TestMTLS(t *testing.T) {
	serverCA, clientCA, otherCA := testtls.NewCA(t, "server CA"), testtls.NewCA(t, "client CA"), testtls.NewCA(t, "other CA")
	serverCert := serverCA.Issue(t, serverName)
	expired := func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	}
	tests := []struct {
		name       string
		cert       *tls.Certificate // nil: none
		maxVersion uint16           // 0: TLS 1.3
		reason     string           // "": admitted
		peer       string           // the identity PeerIdentity names when admitted
	}{
		{name: "allowed URI SAN", cert: ptr(clientCert(t, clientCA, []string{allowedURI}, nil, nil)), peer: allowedURI},
		{name: "allowed DNS SAN", cert: ptr(clientCert(t, clientCA, nil, []string{allowedDNS}, nil)), peer: allowedDNS},
		{name: "one of several SANs allowed", cert: ptr(clientCert(t, clientCA,
			[]string{"spiffe://sluice.test/ns/other/sa/x"}, []string{"x.sluice.test", allowedDNS}, nil)), peer: "spiffe://sluice.test/ns/other/sa/x"},
		{name: "DNS SAN in other case", cert: ptr(clientCert(t, clientCA, nil, []string{"Envoy.Sluice.Test"}, nil)), peer: "Envoy.Sluice.Test"},
		{name: "no extended key usage is any usage", cert: ptr(clientCert(t, clientCA, []string{allowedURI}, nil,
			func(c *x509.Certificate) { c.ExtKeyUsage = nil })), peer: allowedURI},
		{name: "TLS 1.2", cert: ptr(clientCert(t, clientCA, []string{allowedURI}, nil, nil)), maxVersion: tls.VersionTLS12, peer: allowedURI},
		{name: "no certificate", reason: reasonNoCertificate},
		{name: "no certificate, TLS 1.2", maxVersion: tls.VersionTLS12, reason: reasonNoCertificate},
		{name: "another CA", cert: ptr(clientCert(t, otherCA, []string{allowedURI}, nil, nil)), reason: reasonUntrusted},
		{name: "expired", cert: ptr(clientCert(t, clientCA, []string{allowedURI}, nil, expired)), reason: reasonUntrusted},
		{name: "serverAuth only", cert: ptr(clientCert(t, clientCA, []string{allowedURI}, nil,
			func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth} })), reason: reasonUntrusted},
		{name: "identity not allowed", cert: ptr(clientCert(t, clientCA,
			[]string{"spiffe://sluice.test/ns/other/sa/x"}, []string{"x.sluice.test"}, nil)), reason: reasonIdentityNotAllowed},
		{name: "allowed name as CN only", cert: ptr(clientCert(t, clientCA, nil, nil,
			func(c *x509.Certificate) { c.Subject.CommonName = allowedDNS })), reason: reasonIdentityNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := deadline(t)
			f := newFiles(t, renamed)
			f.write(serverCert, clientCA)
			h := start(t, Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca,
				AllowedURIs: []string{allowedURI}, AllowedDNS: []string{allowedDNS}})
			cfg := clientTLS(serverCA, tt.cert)
			cfg.MaxVersion = tt.maxVersion
			local, err := h.call(ctx, cfg)

			if tt.reason == "" {
				if err != nil {
					t.Fatalf("call: %v", err)
				}
				if want := tt.peer + " (" + local + ")"; h.lastPeer() != want {
					t.Errorf("PeerIdentity = %q, want %q", h.lastPeer(), want)
				}
				for _, r := range []string{reasonNoCertificate, reasonUntrusted, reasonIdentityNotAllowed} {
					if n := h.refused(r); n != 0 {
						t.Errorf("refused{reason=%s} = %v, want 0", r, n)
					}
				}
				return
			}
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("call: %v, want Unavailable", err)
			}
			for _, r := range []string{reasonNoCertificate, reasonUntrusted, reasonIdentityNotAllowed} {
				n := h.refused(r)
				if r == tt.reason && n < 1 {
					t.Errorf("refused{reason=%s} = %v, want at least 1", r, n)
				}
				if r != tt.reason && n != 0 {
					t.Errorf("refused{reason=%s} = %v, want 0", r, n)
				}
			}
			// The line of the first connection: the client may have
			// dialled again since.
			lines := h.logLines("refused a TLS client")
			i := slices.IndexFunc(lines, func(l map[string]any) bool { return l["peer"] == local })
			if i < 0 {
				t.Fatalf("no refusal logged for peer %s; logs:\n%s", local, h.logs.String())
			}
			l := lines[i]
			if l["level"] != "WARN" || l["component"] != "tlsserve" || l["server"] != "grpc" || l["reason"] != tt.reason || l["error"] == "" {
				t.Errorf("refusal line %v, want level WARN, component tlsserve, server grpc, reason %s and an error", l, tt.reason)
			}
			if tt.cert != nil {
				leaf := tt.cert.Leaf
				if l["cn"] != leaf.Subject.CommonName || !sameStrings(l["uris"], uriStrings(leaf)) || !sameStrings(l["dns"], leaf.DNSNames) {
					t.Errorf("refusal line %v, want the certificate's cn %q, uris %q, dns %q", l, leaf.Subject.CommonName, uriStrings(leaf), leaf.DNSNames)
				}
			}
		})
	}
}

// TestTLSOnly: without a client CA file the server asks for no client
// certificate, and PeerIdentity names the address alone.
func TestTLSOnly(t *testing.T) {
	ctx := deadline(t)
	serverCA := testtls.NewCA(t, "server CA")
	f := newFiles(t, renamed)
	f.write(serverCA.Issue(t, serverName), nil)
	h := start(t, Options{CertFile: f.cert, KeyFile: f.key})
	local, err := h.call(ctx, clientTLS(serverCA, nil))
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	if h.lastPeer() != local {
		t.Errorf("PeerIdentity = %q, want %q", h.lastPeer(), local)
	}
	if _, err := h.call(ctx, clientTLS(testtls.NewCA(t, "other CA"), nil)); status.Code(err) != codes.Unavailable {
		t.Errorf("call trusting another CA: %v, want Unavailable", err)
	}
	for name := range gathered(t, h.reg) {
		if strings.HasPrefix(name, "sluice_tls_refused_total") {
			t.Errorf("series %s, want no refusal series without mTLS", name)
		}
	}
}

// TestServerConfig: TLS 1.2 at least, ALPN h2.
func TestServerConfig(t *testing.T) {
	ctx := deadline(t)
	serverCA := testtls.NewCA(t, "server CA")
	f := newFiles(t, renamed)
	f.write(serverCA.Issue(t, serverName), nil)
	h := start(t, Options{CertFile: f.cert, KeyFile: f.key})

	dial := func(cfg *tls.Config) (tls.ConnectionState, error) {
		d := tls.Dialer{Config: cfg}
		c, err := d.DialContext(ctx, "tcp", h.addr)
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer c.Close()
		return c.(*tls.Conn).ConnectionState(), nil
	}
	cfg := clientTLS(serverCA, nil)
	cfg.NextProtos = []string{"h2"}
	cs, err := dial(cfg)
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	if cs.NegotiatedProtocol != "h2" {
		t.Errorf("ALPN %q, want h2", cs.NegotiatedProtocol)
	}
	cfg = clientTLS(serverCA, nil)
	cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if _, err := dial(cfg); err == nil {
		t.Error("a TLS 1.1 client was served, want refused")
	}
	if got := h.r.ServerConfig(); got.MinVersion != tls.VersionTLS12 || !slices.Contains(got.NextProtos, "h2") {
		t.Errorf("ServerConfig MinVersion %x NextProtos %q, want TLS 1.2 and h2", got.MinVersion, got.NextProtos)
	}
}

// TestPeerIdentityPlaintext: a plaintext peer is its address; outside a
// call there is no peer.
func TestPeerIdentityPlaintext(t *testing.T) {
	ctx := deadline(t)
	seen := make(chan string, 1)
	addr := serve(t, insecure.NewCredentials(), func(ctx context.Context) { seen <- PeerIdentity(ctx) })
	local, err := call(ctx, addr, insecure.NewCredentials())
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	if got := <-seen; got != local {
		t.Errorf("PeerIdentity = %q, want %q", got, local)
	}
	if got := PeerIdentity(context.Background()); got != "unknown" {
		t.Errorf("PeerIdentity outside a call = %q, want unknown", got)
	}
}

// TestMetricsShared: the grpc and xds servers count in one Metrics, told
// apart by the server label.
func TestMetricsShared(t *testing.T) {
	ca := testtls.NewCA(t, "CA")
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	var notAfter []time.Time
	for _, server := range []string{"grpc", "xds"} {
		f := newFiles(t, renamed)
		cert := ca.IssueWith(t, func(c *x509.Certificate) { c.NotAfter = c.NotAfter.Add(-time.Duration(len(notAfter)+1) * time.Hour) }, serverName)
		notAfter = append(notAfter, cert.Leaf.NotAfter)
		f.write(cert, ca)
		if _, err := New(Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca, Server: server, Metrics: m}); err != nil {
			t.Fatalf("New(%s): %v", server, err)
		}
	}
	want := map[string]float64{
		"sluice_tls_certificate_expiry_timestamp_seconds{server=grpc}":      float64(notAfter[0].Unix()),
		"sluice_tls_certificate_expiry_timestamp_seconds{server=xds}":       float64(notAfter[1].Unix()),
		"sluice_tls_refused_total{reason=identity_not_allowed,server=grpc}": 0,
		"sluice_tls_refused_total{reason=identity_not_allowed,server=xds}":  0,
		"sluice_tls_refused_total{reason=no_certificate,server=grpc}":       0,
		"sluice_tls_refused_total{reason=no_certificate,server=xds}":        0,
		"sluice_tls_refused_total{reason=untrusted,server=grpc}":            0,
		"sluice_tls_refused_total{reason=untrusted,server=xds}":             0,
		"sluice_tls_reloads_total{result=failed,server=grpc}":               0,
		"sluice_tls_reloads_total{result=failed,server=xds}":                0,
		"sluice_tls_reloads_total{result=ok,server=grpc}":                   0,
		"sluice_tls_reloads_total{result=ok,server=xds}":                    0,
	}
	if diff := cmp.Diff(want, gathered(t, reg)); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}
}

func ptr[T any](v T) *T { return &v }

// sameStrings reports whether a decoded JSON value v is the list want
// (null for an empty one).
func sameStrings(v any, want []string) bool {
	got, _ := v.([]any)
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
