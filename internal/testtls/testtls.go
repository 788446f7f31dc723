// Package testtls is test support: a throwaway certificate authority per
// test (crypto/x509, ECDSA P-256), the server certificates it issues, and a
// server tls.Config that records every ClientHello it sees, so a test can
// check the SNI and ALPN a client offered. It knows nothing of Sluice and
// is never linked into a binary.
package testtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// CA is a certificate authority that lives for one test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// NewCA makes a self-signed CA named name, valid from an hour ago for a
// day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"testtls"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testtls: CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testtls: CA certificate: %v", err)
	}
	return &CA{Cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// PEM is the CA certificate, PEM-encoded: a trust bundle of one.
func (ca *CA) PEM() []byte { return slices.Clone(ca.pem) }

// Pool is a certificate pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// WriteFile writes the CA's PEM to a file in t.TempDir() and returns its
// absolute path.
func (ca *CA) WriteFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, ca.pem, 0o600); err != nil {
		t.Fatalf("testtls: %v", err)
	}
	return path
}

// Issue is a server certificate signed by the CA for names (an IP address
// becomes an IP SAN, anything else a DNS SAN), with ExtKeyUsageServerAuth,
// valid from an hour ago for a day.
func (ca *CA) Issue(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	return ca.IssueWith(t, nil, names...)
}

// IssueWith is Issue with edit applied to the template before signing
// (validity, usages, a subject).
func (ca *CA) IssueWith(t testing.TB, edit func(*x509.Certificate), names ...string) tls.Certificate {
	t.Helper()
	key := newKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{Organization: []string{"testtls"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if len(names) > 0 {
		tmpl.Subject.CommonName = names[0]
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	if edit != nil {
		edit(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("testtls: server certificate: %v", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testtls: server certificate: %v", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// Hello is what a client offered in its ClientHello.
type Hello struct {
	ServerName string   // SNI; "" when none was sent
	ALPN       []string // the protocols offered, in order
	Versions   []uint16 // the TLS versions offered
}

// Hellos records the ClientHellos a server configured by ServerConfig
// sees; safe for the server's goroutines.
type Hellos struct {
	mu  sync.Mutex
	got []Hello
}

// All returns the hellos seen so far, oldest first.
func (h *Hellos) All() []Hello {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

// Last returns the newest hello and whether there was one.
func (h *Hellos) Last() (Hello, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.got) == 0 {
		return Hello{}, false
	}
	return h.got[len(h.got)-1], true
}

func (h *Hellos) add(hi *tls.ClientHelloInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, Hello{ServerName: hi.ServerName, ALPN: slices.Clone(hi.SupportedProtos), Versions: slices.Clone(hi.SupportedVersions)})
}

// ServerConfig is a server tls.Config presenting cert and selecting from
// nextProtos (none: no ALPN), recording every ClientHello in hellos when
// it is not nil.
func ServerConfig(cert tls.Certificate, nextProtos []string, hellos *Hellos) *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: slices.Clone(nextProtos)}
	if hellos != nil {
		cfg.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			hellos.add(hi)
			return nil, nil // the config itself
		}
	}
	return cfg
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testtls: key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatalf("testtls: serial: %v", err)
	}
	return n
}

// CertPEM is c's certificate chain, PEM-encoded.
func CertPEM(c tls.Certificate) []byte {
	var b []byte
	for _, der := range c.Certificate {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	return b
}

// KeyPEM is c's private key, PEM-encoded PKCS #8.
func KeyPEM(t testing.TB, c tls.Certificate) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatalf("testtls: key: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}
