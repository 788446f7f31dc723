package load

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
)

// ClientTLS is the driver's mTLS, as Envoy's transport socket on the
// sluice.extension cluster speaks it: a client certificate, the CA that
// the server's certificate must chain to, and the name it must carry
// (also sent as SNI). The zero value is plaintext.
type ClientTLS struct {
	Cert, Key  string // the client certificate and its key, PEM files
	CA         string // the server's CA bundle, a PEM file
	ServerName string // the name verified in the server's certificate; "": the address's host
}

// On reports whether any TLS was asked for.
func (c ClientTLS) On() bool { return c != ClientTLS{} }

// mode is what Result.TLS says of c.
func (c ClientTLS) mode() string {
	switch {
	case c.Cert != "":
		return "mtls"
	case c.On():
		return "tls"
	}
	return ""
}

func (c ClientTLS) validate() error {
	if !c.On() {
		return nil
	}
	var errs []error
	if c.CA == "" {
		errs = append(errs, errors.New("tls-ca: required with TLS (the server's certificate is verified)"))
	}
	if (c.Cert == "") != (c.Key == "") {
		errs = append(errs, errors.New("tls-cert, tls-key: go together"))
	}
	return errors.Join(errs...)
}

// credentials are gRPC transport credentials for c: TLS 1.2 and up,
// ALPN h2, the server's certificate verified against CA and ServerName.
func (c ClientTLS) credentials() (credentials.TransportCredentials, error) {
	pool, err := caPool(c.CA)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}, RootCAs: pool, ServerName: c.ServerName}
	if c.Cert != "" {
		cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}

// FloorCredentials are the floor's gRPC transport credentials as Sluice's
// security.tls makes its own (internal/tlsserve): TLS 1.2 and up, ALPN
// h2, the certificate in certFile and keyFile and, with clientCAFile, a
// client certificate required and verified against that bundle.
func FloorCredentials(certFile, keyFile, clientCAFile string) (credentials.TransportCredentials, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}, Certificates: []tls.Certificate{cert}}
	if clientCAFile != "" {
		pool, err := caPool(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(cfg), nil
}

// caPool reads a PEM bundle of CA certificates.
func caPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate", path)
	}
	return pool, nil
}
