package policies

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Security holds what keeps provider credentials with Envoy alone: the
// keys that sign the principal ext_authz hands ext_proc, and the TLS of
// Sluice's own gRPC and xDS servers.
type Security struct {
	// PrincipalKeys are the HMAC-SHA256 secrets of the signed principal
	// (docs/architecture.md, "The signed principal"): Sluice signs with
	// the first and accepts any, so a secret rotates without downtime
	// (add the new one second everywhere, then first, then drop the old).
	// Every replica of a fleet needs the same list. Empty: each process
	// makes a random one at start, which only that process accepts.
	PrincipalKeys []PrincipalKey `yaml:"principal_keys"`
	// PrincipalMaxAge is how old a signed principal may be when ext_proc
	// reads it, and how far its issue time may lie ahead of this
	// process's clock (replicas' clocks differ). Default 30s.
	PrincipalMaxAge time.Duration `yaml:"principal_max_age"`
	// TLS is the TLS of Sluice's gRPC (ext_authz, ext_proc) and xDS
	// servers. Nil: plaintext.
	TLS *ServerTLS `yaml:"tls"`
}

// PrincipalKey is one signing secret: its value (normally "${ENV}") or
// a file holding it (a trailing newline is dropped). At least 32 bytes.
type PrincipalKey struct {
	Value Secret `yaml:"value"`
	File  string `yaml:"file"`
}

// ServerTLS is the server side of TLS on Sluice's gRPC and xDS ports.
// The files are read at start and again whenever they change on disk
// (cert-manager and SPIFFE helpers replace them), without a restart; a
// change that does not load keeps the last good certificate.
type ServerTLS struct {
	// CertFile and KeyFile are Sluice's certificate chain and key, PEM.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile turns on mTLS: a client must present a certificate
	// that chains to one of these CAs (PEM bundle).
	ClientCAFile string `yaml:"client_ca_file"`
	// AllowedClients are the client identities admitted (any one of a
	// certificate's URI or DNS SANs listed). Empty with ClientCAFile:
	// any certificate of the CA.
	AllowedClients Identities `yaml:"allowed_clients"`
}

// MTLS reports whether t asks for client certificates.
func (t *ServerTLS) MTLS() bool { return t != nil && t.ClientCAFile != "" }

// MinPrincipalSecretBytes is the shortest secret security.principal_keys
// takes: 256 bits, what the HMAC-SHA256 signing keys require
// (internal/principal's MinSecretBytes, which their user makes from
// these secrets).
const MinPrincipalSecretBytes = 32

// maxPrincipalMaxAge bounds security.principal_max_age: a signed
// principal lives from ext_authz's answer to ext_proc's first message.
const maxPrincipalMaxAge = time.Hour

func (v *validator) security(s Security) {
	for i, k := range s.PrincipalKeys {
		path := indexPath("security.principal_keys", i)
		switch {
		case (k.Value == "") == (k.File == ""):
			v.add(path, "set exactly one of value (normally ${ENV}) or file")
		case k.Value != "" && len(k.Value) < MinPrincipalSecretBytes:
			v.add(path+".value", "must be at least %d bytes, got %d (make one with: openssl rand -base64 32)", MinPrincipalSecretBytes, len(k.Value))
		}
	}
	if s.PrincipalMaxAge < time.Second || s.PrincipalMaxAge > maxPrincipalMaxAge {
		v.add("security.principal_max_age", "must be between 1s and %v, got %v", maxPrincipalMaxAge, s.PrincipalMaxAge)
	}
	if t := s.TLS; t != nil {
		if t.CertFile == "" {
			v.add("security.tls.cert_file", "required (Sluice's certificate chain, PEM)")
		}
		if t.KeyFile == "" {
			v.add("security.tls.key_file", "required (the certificate's private key, PEM)")
		}
		if !t.AllowedClients.Empty() && t.ClientCAFile == "" {
			v.add("security.tls.allowed_clients", "requires client_ca_file: client identities are only known from verified client certificates")
		}
		v.identities("security.tls.allowed_clients", t.AllowedClients)
	}
}

// identities checks a list of certificate identities: URIs with a scheme
// (spiffe://trust-domain/path), DNS names without spaces or schemes.
func (v *validator) identities(path string, ids Identities) {
	for i, u := range ids.URIs {
		p, err := url.Parse(u)
		if err != nil || p.Scheme == "" || strings.ContainsAny(u, " \t") {
			v.add(indexPath(path+".uris", i), "must be a URI such as spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account, got %q", u)
		}
	}
	for i, d := range ids.DNS {
		if d == "" || strings.ContainsAny(d, " \t/:") {
			v.add(indexPath(path+".dns", i), "must be a DNS name such as envoy.example.internal, got %q", d)
		}
	}
}

// extensionTLS checks xds.extension_tls: paths on Envoy's machine, so
// absolute; one source for the client certificate and one for the CA.
func (v *validator) extensionTLS(t *ExtensionTLS) {
	if t == nil {
		return
	}
	const path = "xds.extension_tls"
	files := t.CertFile != "" || t.KeyFile != ""
	switch {
	case files && t.SDSCertificate != "":
		v.add(path, "set either cert_file and key_file or sds_certificate, not both")
	case files && (t.CertFile == "" || t.KeyFile == ""):
		v.add(path, "cert_file and key_file go together (Envoy's client certificate and its key)")
	case !files && t.SDSCertificate == "":
		v.add(path, "set cert_file and key_file, or sds_certificate: Envoy needs a client certificate for Sluice's mTLS")
	}
	switch {
	case t.CAFile != "" && t.SDSValidation != "":
		v.add(path, "set either ca_file or sds_validation, not both")
	case t.CAFile == "" && t.SDSValidation == "":
		v.add(path, "set ca_file or sds_validation: Envoy must verify Sluice's certificate")
	}
	for _, f := range []struct{ name, val string }{{"cert_file", t.CertFile}, {"key_file", t.KeyFile}, {"ca_file", t.CAFile}} {
		if f.val != "" && !filepath.IsAbs(f.val) {
			v.add(path+"."+f.name, "must be an absolute path on Envoy's machine, got %q", f.val)
		}
	}
	if t.SNI != "" && strings.ContainsAny(t.SNI, " \t/:") {
		v.add(path+".sni", "must be a DNS name, got %q", t.SNI)
	}
	v.identities(path+".server_sans", t.ServerSANs)
}

func (v *validator) proxyless(p string) {
	if p != ProxylessOff && p != ProxylessRoutingOnly {
		v.add("xds.proxyless", "must be %s or %s, got %q", ProxylessOff, ProxylessRoutingOnly, p)
	}
}

// principalSecrets reads the signing secrets of s, a file's relative to
// the config file's directory; nil when none is configured. A file that
// cannot be read, or holds too short a secret, is a problem of its path:
// files are read once, here, so that a reload that cannot read one keeps
// the last good snapshot.
func principalSecrets(s Security, file string) ([]Secret, error) {
	if len(s.PrincipalKeys) == 0 {
		return nil, nil
	}
	secrets := make([]Secret, 0, len(s.PrincipalKeys))
	var ps Problems
	for i, k := range s.PrincipalKeys {
		if k.File == "" {
			secrets = append(secrets, k.Value)
			continue
		}
		path := indexPath("security.principal_keys", i) + ".file"
		name := k.File
		if !filepath.IsAbs(name) {
			name = filepath.Join(filepath.Dir(file), name)
		}
		b, err := os.ReadFile(name)
		if err != nil {
			ps = append(ps, Problem{File: file, Path: path, Msg: fmt.Sprintf("cannot read the secret: %v", err)})
			continue
		}
		b = bytes.TrimRight(b, "\r\n")
		if len(b) < MinPrincipalSecretBytes {
			ps = append(ps, Problem{File: file, Path: path, Msg: fmt.Sprintf("%s holds %d bytes; a secret needs at least %d (make one with: openssl rand -base64 32 > %s)", name, len(b), MinPrincipalSecretBytes, name)})
			continue
		}
		secrets = append(secrets, Secret(b))
	}
	if len(ps) > 0 {
		return nil, ps
	}
	return secrets, nil
}

// resolveTLS is t with its files resolved against the config file's
// directory.
func resolveTLS(t *ServerTLS, file string) *ServerTLS {
	if t == nil {
		return nil
	}
	out := *t
	for _, p := range []*string{&out.CertFile, &out.KeyFile, &out.ClientCAFile} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(filepath.Dir(file), *p)
		}
	}
	out.AllowedClients = Identities{URIs: slices.Clone(t.AllowedClients.URIs), DNS: slices.Clone(t.AllowedClients.DNS)}
	return &out
}
