package policies

import "time"

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
