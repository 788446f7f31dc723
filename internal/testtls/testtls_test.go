package testtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"slices"
	"testing"
	"time"
)

// handshake connects to a TLS server presenting cert (ALPN h2) with a
// client trusting roots and sending serverName; it returns the
// hellos the server saw and the client's error.
func handshake(t *testing.T, cert tls.Certificate, roots *x509.CertPool, serverName string) ([]Hello, error) {
	t.Helper()
	var hellos Hellos
	ln, err := tls.Listen("tcp", "127.0.0.1:0", ServerConfig(cert, []string{"h2"}, &hellos))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.(*tls.Conn).Handshake() // the client reports the outcome
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: serverName, NextProtos: []string{"h2", "http/1.1"}})
	if err == nil {
		c.Close()
	}
	<-served
	return hellos.All(), err
}

func TestCA(t *testing.T) {
	ca := NewCA(t, "test CA")
	cert := ca.Issue(t, "provider.test", "127.0.0.1")
	if got := cert.Leaf; !slices.Equal(got.DNSNames, []string{"provider.test"}) || len(got.IPAddresses) != 1 || !got.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("SANs: DNS %v, IP %v", got.DNSNames, got.IPAddresses)
	}

	hellos, err := handshake(t, cert, ca.Pool(), "provider.test")
	if err != nil {
		t.Fatalf("a client trusting the CA: %v", err)
	}
	if len(hellos) != 1 || hellos[0].ServerName != "provider.test" || !slices.Equal(hellos[0].ALPN, []string{"h2", "http/1.1"}) {
		t.Errorf("hellos %+v, want one with SNI provider.test and ALPN [h2 http/1.1]", hellos)
	}

	// The PEM file is the trust bundle of one.
	data, err := os.ReadFile(ca.WriteFile(t))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data) {
		t.Fatal("the CA file holds no certificate")
	}
	if _, err := handshake(t, cert, roots, "provider.test"); err != nil {
		t.Errorf("a client trusting the CA file: %v", err)
	}

	// Another CA's client refuses the certificate; so does one that asks
	// for a name the certificate does not carry, and any client once the
	// certificate has expired.
	var unknown x509.UnknownAuthorityError
	if _, err := handshake(t, cert, NewCA(t, "other CA").Pool(), "provider.test"); !errors.As(err, &unknown) {
		t.Errorf("a client trusting another CA: %v, want an unknown authority", err)
	}
	var hostname x509.HostnameError
	if _, err := handshake(t, cert, ca.Pool(), "other.test"); !errors.As(err, &hostname) {
		t.Errorf("a client for other.test: %v, want a hostname error", err)
	}
	expired := ca.IssueWith(t, func(c *x509.Certificate) { c.NotAfter = time.Now().Add(-time.Minute) }, "provider.test")
	var invalid x509.CertificateInvalidError
	if _, err := handshake(t, expired, ca.Pool(), "provider.test"); !errors.As(err, &invalid) || invalid.Reason != x509.Expired {
		t.Errorf("an expired certificate: %v, want expired", err)
	}
}
