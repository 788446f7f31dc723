package load

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// The identities of the benchmark's throwaway certificates (WriteCerts):
// the server's DNS name (the driver's --tls-server-name) and URI SAN,
// and the client's URI SAN (what bench.yaml's copy allows under
// security.tls.allowed_clients with TLS=1).
const (
	BenchServerName = "sluice.bench"
	BenchServerURI  = "spiffe://bench/sluice"
	BenchClientURI  = "spiffe://bench/envoy"
)

// certValidity is how long the throwaway certificates are valid, from an
// hour before they are made (a clock a little behind still accepts them).
const certValidity = 7 * 24 * time.Hour

// CertFiles are the PEM files WriteCerts writes into its directory.
type CertFiles struct {
	CA         string // the CA's certificate: the trust bundle of both sides
	ServerCert string // the server's certificate, signed by the CA
	ServerKey  string // its key (PKCS #8)
	ClientCert string // the client's (Envoy's) certificate, signed by the CA
	ClientKey  string // its key (PKCS #8)
}

// CertFilesIn names the files WriteCerts writes into dir.
func CertFilesIn(dir string) CertFiles {
	return CertFiles{
		CA:         filepath.Join(dir, "ca.crt"),
		ServerCert: filepath.Join(dir, "server.crt"),
		ServerKey:  filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"),
		ClientKey:  filepath.Join(dir, "client.key"),
	}
}

// WriteCerts makes a throwaway CA, a server certificate (IP SAN
// 127.0.0.1, DNS SAN BenchServerName, URI SAN BenchServerURI; serverAuth
// and clientAuth, as a SPIFFE workload's) and a client certificate (URI
// SAN BenchClientURI; clientAuth), ECDSA P-256 keys, and writes them as
// PEM into dir (created if missing; the keys mode 0600). For the
// benchmark's mTLS only: the CA's key is not kept.
func WriteCerts(dir string, now time.Time) (CertFiles, error) {
	f := CertFilesIn(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "extprocload bench CA", Organization: []string{"sluice bench"}},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := sign(caTmpl, now, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return f, fmt.Errorf("CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return f, fmt.Errorf("CA certificate: %w", err)
	}
	leaves := []struct {
		cn        string
		dns       []string
		ips       []net.IP
		uri       string
		usages    []x509.ExtKeyUsage
		cert, key string
	}{
		{cn: BenchServerName, dns: []string{BenchServerName}, ips: []net.IP{net.IPv4(127, 0, 0, 1)}, uri: BenchServerURI,
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, cert: f.ServerCert, key: f.ServerKey},
		{cn: "envoy", uri: BenchClientURI,
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, cert: f.ClientCert, key: f.ClientKey},
	}
	for _, l := range leaves {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return f, err
		}
		u, err := url.Parse(l.uri)
		if err != nil {
			return f, err
		}
		der, err := sign(&x509.Certificate{
			Subject:     pkix.Name{CommonName: l.cn, Organization: []string{"sluice bench"}},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: l.usages,
			DNSNames:    l.dns,
			IPAddresses: l.ips,
			URIs:        []*url.URL{u},
		}, now, ca, &key.PublicKey, caKey)
		if err != nil {
			return f, fmt.Errorf("%s certificate: %w", l.cn, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return f, err
		}
		if err := writePEM(l.cert, "CERTIFICATE", der, 0o644); err != nil {
			return f, err
		}
		if err := writePEM(l.key, "PRIVATE KEY", keyDER, 0o600); err != nil {
			return f, err
		}
	}
	return f, writePEM(f.CA, "CERTIFICATE", caDER, 0o644)
}

// sign fills tmpl's serial number and validity and signs it with parent's
// key.
func sign(tmpl *x509.Certificate, now time.Time, parent *x509.Certificate, pub *ecdsa.PublicKey, priv *ecdsa.PrivateKey) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(certValidity)
	return x509.CreateCertificate(rand.Reader, tmpl, parent, pub, priv)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

func runCerts(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "write the CA, server and client certificates and keys into this `directory` (created if missing)")
	if err := fs.Parse(args); err != nil {
		return ErrUsage
	}
	if *dir == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "certs: --dir DIR is required, and nothing else")
		return ErrUsage
	}
	f, err := WriteCerts(*dir, time.Now())
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "ca %s\nserver %s %s\nclient %s %s\n", f.CA, f.ServerCert, f.ServerKey, f.ClientCert, f.ClientKey)
	return err
}
