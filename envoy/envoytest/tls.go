package envoytest

// Upstream TLS: a cluster's envoy.transport_sockets.tls transport socket
// (an UpstreamTlsContext), spoken with crypto/tls and verified exactly as
// far as the context asks, as Envoy's TLS transport socket does
// (source/common/tls/: context_config_impl.cc, context_impl.cc,
// ssl_socket.cc, cert_validator/default_validator.cc, san_matcher.cc;
// source/common/ssl/certificate_validation_context_config_impl.cc,
// tls_certificate_config_impl.cc; source/common/secret/
// secret_manager_impl.cc for the bootstrap's static secrets). The same
// handshake carries the router's connections (dial) and the emulator's
// own gRPC calls to ext_authz, ext_proc and ADS (grpcconn.go). What the
// emulator does not implement is refused at load, naming the field.
//
// When files are read. Envoy reads a context's files (trusted_ca,
// certificate_chain, private_key, inline or from a static secret) each
// time it builds the cluster's TLS context: ContextConfigImpl creates
// Ssl::TlsCertificateConfigImpl and CertificateValidationContextConfigImpl
// from the provider's proto, and both read their DataSources then
// (Config::DataSource::read); the static secret providers only hold the
// proto (secret_provider_impl.cc). A cluster is built when it is loaded
// and again for each new version of it over CDS; a CDS update that leaves
// a cluster's proto as it was does not rebuild it
// (ClusterManagerImpl::addOrUpdateCluster: blockUpdate on an equal hash),
// and a static cluster is never rebuilt. clusterTLS does the same: a
// cluster keeps what it loaded while its proto is unchanged. Nothing is
// re-read when a file changes: watched_directory (on TlsCertificate,
// CertificateValidationContext or DataSource) takes effect only for a
// secret delivered by SDS (tls/v3/common.proto; the watches are set up in
// SdsApi::onConfigUpdate, source/common/secret/sds_api.cc), never for
// static secrets or inline contexts, so there it is accepted and has no
// effect, as in Envoy; SDS itself is refused.

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// upstreamTLS is a cluster's UpstreamTlsContext, checked and loaded. It is
// immutable once loaded: configurations share it (clusterTLS).
type upstreamTLS struct {
	sni string // sent as SNI; "" sends none
	// alpn is what is offered: alpn_protocols, or, when the context has
	// none, the protocol of the cluster's HTTP connection pool ("h2" or
	// "http/1.1"): HttpConnPoolImplBase sets it as the transport socket's
	// ALPN fallback (wrapTransportSocketOptions,
	// source/common/http/conn_pool_base.cc), which ClientContextImpl::newSsl
	// (source/common/tls/context_impl.cc) uses only when the context
	// configures none. The cluster's protocol is spoken whatever the
	// server picks.
	alpn []string
	// roots is trusted_ca; nil when the context has none, and then
	// nothing is verified: Envoy's verify mode is SSL_VERIFY_NONE
	// (DefaultCertValidator::initializeSslContexts).
	roots *x509.CertPool
	sans  []sanMatcher // match_typed_subject_alt_names (only with roots)
	// cert is the client certificate (tls_certificates, or a static
	// secret named by tls_certificate_sds_secret_configs); nil: none, and
	// a server asking for one gets an empty Certificate message.
	cert *tls.Certificate
	// id fingerprints everything above, as loaded (the context, the
	// secrets it named, the bytes of every file): gRPC connections are
	// shared between configurations only for equal ids.
	id string
}

// sanMatcher is one entry of match_typed_subject_alt_names: a DNS or URI
// SAN matcher.
type sanMatcher struct {
	typ tlsv3.SubjectAltNameMatcher_SanType
	m   *matcherv3.StringMatcher
}

// staticSecrets are the bootstrap's static_resources.secrets, filed by
// type as SecretManagerImpl::addStaticSecret files them
// (source/common/secret/secret_manager_impl.cc): a context's
// tls_certificate_sds_secret_configs / validation_context_sds_secret_config
// without sds_config name one of them (findStaticTlsCertificateProvider,
// findStaticCertificateValidationContextProvider, called from
// getTlsCertificateConfigProviders and getProviderFromSds in
// source/common/tls/context_config_impl.cc).
type staticSecrets struct {
	tlsCertificates    map[string]staticSecret
	validationContexts map[string]staticSecret
}

// staticSecret is one secret and its place in static_resources.secrets,
// for error messages.
type staticSecret struct {
	index  int
	secret *tlsv3.Secret
}

func (s staticSecret) path(field string) string {
	return fmt.Sprintf("static_resources.secrets[%d].%s", s.index, field)
}

// newStaticSecrets files the bootstrap's static secrets, refusing what
// addStaticSecret refuses: a name used twice for one type, a secret
// without a type. Session ticket keys and generic secrets are filed too
// (nothing the emulator runs uses them); what a secret holds is checked
// when a context uses it, as Envoy reads it only then.
func newStaticSecrets(secrets []*tlsv3.Secret) (*staticSecrets, error) {
	s := &staticSecrets{tlsCertificates: map[string]staticSecret{}, validationContexts: map[string]staticSecret{}}
	other := map[string]bool{}
	for i, sec := range secrets {
		var m map[string]staticSecret
		var kind string
		switch sec.GetType().(type) {
		case *tlsv3.Secret_TlsCertificate:
			m, kind = s.tlsCertificates, "TlsCertificate"
		case *tlsv3.Secret_ValidationContext:
			m, kind = s.validationContexts, "CertificateValidationContext"
		case *tlsv3.Secret_SessionTicketKeys:
			kind = "TlsSessionTicketKeys"
		case *tlsv3.Secret_GenericSecret:
			kind = "GenericSecret"
		default:
			return nil, fmt.Errorf("static_resources.secrets[%d]: Secret type not implemented", i)
		}
		if m == nil {
			if other[kind+"\x00"+sec.GetName()] {
				return nil, fmt.Errorf("static_resources.secrets[%d]: Duplicate static %s secret name %s", i, kind, sec.GetName())
			}
			other[kind+"\x00"+sec.GetName()] = true
			continue
		}
		if _, dup := m[sec.GetName()]; dup {
			return nil, fmt.Errorf("static_resources.secrets[%d]: Duplicate static %s secret name %s", i, kind, sec.GetName())
		}
		m[sec.GetName()] = staticSecret{index: i, secret: sec}
	}
	return s, nil
}

// clusterTLS loads clusters' UpstreamTlsContexts for one emulator and
// keeps, per cluster name, the cluster last loaded and what it loaded: a
// cluster whose proto has not changed keeps its context without reading
// its files again, as Envoy keeps a cluster a CDS update leaves unchanged
// (see "When files are read" above).
type clusterTLS struct {
	secrets *staticSecrets // nil until the bootstrap is read: none

	mu     sync.Mutex
	loaded map[string]loadedTLS
}

type loadedTLS struct {
	cluster *clusterv3.Cluster
	tls     *upstreamTLS
}

// load returns the UpstreamTlsContext of cluster c, whose HTTP connection
// pool speaks HTTP/2 when http2 is set.
func (ct *clusterTLS) load(c *clusterv3.Cluster, http2 bool) (*upstreamTLS, error) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if l, ok := ct.loaded[c.GetName()]; ok && proto.Equal(l.cluster, c) {
		return l.tls, nil
	}
	u, err := newUpstreamTLS(c.GetTransportSocket(), http2, ct.secrets)
	if err != nil {
		return nil, err
	}
	if ct.loaded == nil {
		ct.loaded = map[string]loadedTLS{}
	}
	ct.loaded[c.GetName()] = loadedTLS{cluster: c, tls: u}
	return u, nil
}

// tlsLoader reads what one context names, fingerprinting all of it.
type tlsLoader struct {
	secrets *staticSecrets
	h       hash.Hash
}

// read is readDataSource, its bytes added to the fingerprint.
func (l *tlsLoader) read(ds *corev3.DataSource, field string) ([]byte, string, error) {
	b, path, err := readDataSource(ds, field)
	if err == nil {
		fmt.Fprintf(l.h, "%s:%d:", field, len(b))
		l.h.Write(b)
	}
	return b, path, err
}

// message adds a proto to the fingerprint.
func (l *tlsLoader) message(m proto.Message) {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	fmt.Fprintf(l.h, "%d:", len(b))
	l.h.Write(b)
}

// newUpstreamTLS loads an UpstreamTlsContext for a cluster speaking HTTP/2
// when http2 is set. Its checks at load are Envoy's (a SAN matcher
// without trusted_ca; a trusted_ca without a certificate; an unknown
// static secret; more than one client certificate; an incomplete or
// unreadable certificate or key) and the emulator's (every field it does
// not implement).
func newUpstreamTLS(ts *corev3.TransportSocket, http2 bool, secrets *staticSecrets) (*upstreamTLS, error) {
	if secrets == nil {
		secrets = &staticSecrets{}
	}
	tc := &tlsv3.UpstreamTlsContext{}
	if err := anyTo(ts.GetTypedConfig(), typeUpstreamTLS, tc); err != nil {
		return nil, err
	}
	if err := onlyFields(tc, "", "sni", "common_tls_context"); err != nil {
		return nil, err
	}
	l := &tlsLoader{secrets: secrets, h: sha256.New()}
	l.message(tc)
	ctc := tc.GetCommonTlsContext()
	if err := onlyFields(ctc, "common_tls_context.", "alpn_protocols", "validation_context", "validation_context_sds_secret_config",
		"tls_certificates", "tls_certificate_sds_secret_configs"); err != nil {
		return nil, err
	}
	u := &upstreamTLS{sni: tc.GetSni(), alpn: ctc.GetAlpnProtocols()}
	if len(u.alpn) == 0 {
		u.alpn = []string{"http/1.1"}
		if http2 {
			u.alpn = []string{"h2"}
		}
	}
	// The order of Envoy's checks: the providers (ContextConfigImpl:
	// certificates, then the validation context), the validation context
	// itself, the certificates' files, then ClientContextConfigImpl's own.
	certs, err := l.certificateSecrets(ctc)
	if err != nil {
		return nil, err
	}
	vc, vcPath, err := l.validationContext(ctc)
	if err != nil {
		return nil, err
	}
	if vc != nil {
		if err := l.loadValidation(u, vc, vcPath); err != nil {
			return nil, err
		}
	}
	if strings.ContainsRune(u.sni, 0) {
		return nil, errors.New("SNI names containing NULL-byte are not allowed")
	}
	if len(ctc.GetTlsCertificates())+len(ctc.GetTlsCertificateSdsSecretConfigs()) > 1 {
		return nil, errors.New("Multiple TLS certificates are not supported for client contexts")
	}
	for _, c := range certs {
		if u.cert, err = l.loadCertificate(c.cert, c.path); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(l.h, "alpn:%q", u.alpn)
	u.id = hex.EncodeToString(l.h.Sum(nil))
	return u, nil
}

// namedCertificate is a TlsCertificate and the path naming it.
type namedCertificate struct {
	cert *tlsv3.TlsCertificate
	path string
}

// certificateSecrets is getTlsCertificateConfigProviders: tls_certificates
// if there are any (an entry without certificate_chain and private_key is
// skipped), else the static secrets tls_certificate_sds_secret_configs
// names. An SdsSecretConfig with sds_config would be fetched over SDS,
// which the emulator does not do.
func (l *tlsLoader) certificateSecrets(ctc *tlsv3.CommonTlsContext) ([]namedCertificate, error) {
	var out []namedCertificate
	if cs := ctc.GetTlsCertificates(); len(cs) > 0 {
		for i, c := range cs {
			path := fmt.Sprintf("common_tls_context.tls_certificates[%d]", i)
			if err := onlyFields(c, path+".", "certificate_chain", "private_key", "watched_directory"); err != nil {
				return nil, err
			}
			if c.GetCertificateChain() == nil && c.GetPrivateKey() == nil {
				continue
			}
			out = append(out, namedCertificate{c, path})
		}
		return out, nil
	}
	for i, sc := range ctc.GetTlsCertificateSdsSecretConfigs() {
		field := fmt.Sprintf("common_tls_context.tls_certificate_sds_secret_configs[%d]", i)
		s, err := l.secret(sc, field, l.secrets.tlsCertificates, "Unknown static secret: ")
		if err != nil {
			return nil, err
		}
		path := s.path("tls_certificate")
		if err := onlyFields(s.secret.GetTlsCertificate(), path+".", "certificate_chain", "private_key", "watched_directory"); err != nil {
			return nil, fmt.Errorf("%s (static secret %q): %w", field, sc.GetName(), err)
		}
		out = append(out, namedCertificate{s.secret.GetTlsCertificate(), path})
	}
	return out, nil
}

// validationContext is getCertificateValidationContextConfigProvider:
// validation_context, or the static secret
// validation_context_sds_secret_config names (nil: none). It returns the
// path of the context for error messages.
func (l *tlsLoader) validationContext(ctc *tlsv3.CommonTlsContext) (*tlsv3.CertificateValidationContext, string, error) {
	if sc := ctc.GetValidationContextSdsSecretConfig(); sc != nil {
		const field = "common_tls_context.validation_context_sds_secret_config"
		s, err := l.secret(sc, field, l.secrets.validationContexts, "Unknown static certificate validation context: ")
		if err != nil {
			return nil, "", err
		}
		return s.secret.GetValidationContext(), s.path("validation_context."), nil
	}
	return ctc.GetValidationContext(), "common_tls_context.validation_context.", nil
}

// secret resolves an SdsSecretConfig to a static secret, as
// ContextConfigImpl does when it has no sds_config.
func (l *tlsLoader) secret(sc *tlsv3.SdsSecretConfig, field string, in map[string]staticSecret, unknown string) (staticSecret, error) {
	if err := onlyFields(sc, field+".", "name", "sds_config"); err != nil {
		return staticSecret{}, err
	}
	if sc.GetSdsConfig() != nil {
		return staticSecret{}, fmt.Errorf("%s.sds_config: SDS is not supported by the emulator (without sds_config, the secret named is taken from static_resources.secrets)", field)
	}
	s, ok := in[sc.GetName()]
	if !ok {
		return staticSecret{}, fmt.Errorf("%s: %s%s", field, unknown, sc.GetName())
	}
	l.message(s.secret)
	return s, nil
}

// loadValidation loads a CertificateValidationContext into u, as
// CertificateValidationContextConfigImpl::create and the default
// validator do; vcPath names it in errors.
func (l *tlsLoader) loadValidation(u *upstreamTLS, vc *tlsv3.CertificateValidationContext, vcPath string) error {
	// system_root_certs is [#not-implemented-hide:] (tls/v3/common.proto):
	// Envoy ignores it, and so does the emulator. watched_directory only
	// acts for a context delivered by SDS (see the top of this file).
	if err := onlyFields(vc, vcPath, "trusted_ca", "match_typed_subject_alt_names", "system_root_certs", "watched_directory"); err != nil {
		return err
	}
	ca, caPath, err := l.read(vc.GetTrustedCa(), vcPath+"trusted_ca")
	if err != nil {
		return err
	}
	// CertificateValidationContextConfigImpl: an empty trusted_ca is none.
	if len(ca) == 0 && len(vc.GetMatchTypedSubjectAltNames()) > 0 {
		return errors.New("SAN-based verification of peer certificates without trusted CA is insecure and not allowed")
	}
	if len(ca) > 0 {
		if u.roots, err = parseCABundle(ca, caPath); err != nil {
			return err
		}
	}
	for i, m := range vc.GetMatchTypedSubjectAltNames() {
		path := fmt.Sprintf("%smatch_typed_subject_alt_names[%d]", vcPath, i)
		if err := onlyFields(m, path+".", "san_type", "matcher"); err != nil {
			return err
		}
		switch m.GetSanType() {
		case tlsv3.SubjectAltNameMatcher_DNS, tlsv3.SubjectAltNameMatcher_URI:
		default:
			return fmt.Errorf("%s: san_type %s is not supported by the emulator (DNS and URI only)", path, m.GetSanType())
		}
		sm := m.GetMatcher()
		if err := onlyFields(sm, path+".matcher.", "exact", "prefix", "suffix", "contains", "ignore_case"); err != nil {
			return err
		}
		if sm.GetMatchPattern() == nil {
			return fmt.Errorf("%s.matcher: a match pattern is required", path)
		}
		u.sans = append(u.sans, sanMatcher{typ: m.GetSanType(), m: sm})
	}
	return nil
}

// loadCertificate is Ssl::TlsCertificateConfigImpl (reading the files;
// source/common/ssl/tls_certificate_config_impl.cc) and the context's
// loading of the chain and key into the SSL_CTX (context_impl.cc), with
// Envoy's messages. crypto/tls stands in for BoringSSL's PEM parsing.
func (l *tlsLoader) loadCertificate(c *tlsv3.TlsCertificate, path string) (*tls.Certificate, error) {
	chain, chainPath, err := l.read(c.GetCertificateChain(), path+".certificate_chain")
	if err != nil {
		return nil, err
	}
	key, keyPath, err := l.read(c.GetPrivateKey(), path+".private_key")
	if err != nil {
		return nil, err
	}
	if len(chain) == 0 {
		return nil, fmt.Errorf("%s: Failed to load incomplete certificate from %s: certificate chain not set", path, chainPath)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("%s: Failed to load incomplete private key from path: %s", path, keyPath)
	}
	// PEM_read_bio_X509 skips blocks of other types; a certificate that
	// does not parse fails the chain.
	n := 0
	for rest := chain; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			n = 0
			break
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: Failed to load certificate chain from %s", path, chainPath)
	}
	pair, err := tls.X509KeyPair(chain, key)
	if err != nil {
		// An unreadable key, or one that does not match the certificate
		// (SSL_CTX_use_PrivateKey fails on both).
		return nil, fmt.Errorf("%s: Failed to load private key from %s: %v", path, keyPath, err)
	}
	return &pair, nil
}

// onlyFields refuses any field of m that is set and not listed, naming it
// under prefix.
func onlyFields(m proto.Message, prefix string, allowed ...string) error {
	var bad string
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		name := string(fd.Name())
		for _, a := range allowed {
			if a == name {
				return true
			}
		}
		bad = name
		return false
	})
	if bad != "" {
		return fmt.Errorf("%s%s is not supported by the emulator", prefix, bad)
	}
	return nil
}

// readDataSource reads a DataSource (filename, inline_string or
// inline_bytes) and names it as Envoy does in its messages: the path, or
// "<inline>" (Config::DataSource::getPath). A file that cannot be read
// fails the load, as in Envoy.
func readDataSource(ds *corev3.DataSource, field string) ([]byte, string, error) {
	switch s := ds.GetSpecifier().(type) {
	case nil:
		return nil, "", nil
	case *corev3.DataSource_Filename:
		b, err := os.ReadFile(s.Filename)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", field, err)
		}
		return b, s.Filename, nil
	case *corev3.DataSource_InlineString:
		return []byte(s.InlineString), "<inline>", nil
	case *corev3.DataSource_InlineBytes:
		return s.InlineBytes, "<inline>", nil
	default:
		return nil, "", fmt.Errorf("%s: %T is not supported by the emulator (filename, inline_string or inline_bytes)", field, s)
	}
}

// parseCABundle is parseCaCertList (default_validator.cc): every
// certificate of a PEM bundle is trusted, and a bundle without one is
// refused. A CRL in the bundle, which would turn on revocation checks, is
// refused by the emulator.
func parseCABundle(data []byte, path string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		switch b.Type {
		case "CERTIFICATE", "TRUSTED CERTIFICATE":
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("Failed to load trusted CA certificates from %s: %v", path, err)
			}
			pool.AddCert(c)
			n++
		case "X509 CRL":
			return nil, fmt.Errorf("trusted_ca %s: a CRL in the CA bundle is not supported by the emulator", path)
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("Failed to load trusted CA certificates from %s", path)
	}
	return pool, nil
}

// Envoy's client defaults (ClientContextConfigImpl, context_config_impl.cc:
// DEFAULT_MIN_VERSION and DEFAULT_MAX_VERSION TLS 1.2, the non-FIPS
// DEFAULT_CIPHER_SUITES; curves X25519 and P-256, tls/v3/common.proto).
var (
	envoyCipherSuites = []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
		tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	}
	envoyCurves = []tls.CurveID{tls.X25519, tls.CurveP256}
)

// clientConfig is the crypto/tls side of the context. crypto/tls's own
// verification is off; verify does Envoy's. A client certificate is sent
// whenever the server asks for one, whatever CAs it names, as BoringSSL
// sends the context's certificate (crypto/tls would send none when the
// server's certificate_authorities do not name its issuer).
func (u *upstreamTLS) clientConfig() *tls.Config {
	cfg := &tls.Config{
		ServerName:         u.sni,
		NextProtos:         u.alpn,
		MinVersion:         tls.VersionTLS12,
		MaxVersion:         tls.VersionTLS12,
		CipherSuites:       envoyCipherSuites,
		CurvePreferences:   envoyCurves,
		InsecureSkipVerify: true, // verify below is the verification
		VerifyConnection:   u.verify,
	}
	if u.cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return u.cert, nil }
	}
	return cfg
}

// handshake runs the client handshake over raw; a failure closes raw and
// carries Envoy's transport failure reason (handshakeError).
func (u *upstreamTLS) handshake(ctx context.Context, raw net.Conn) (*tls.Conn, error) {
	c := tls.Client(raw, u.clientConfig())
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, handshakeError(err)
	}
	return c, nil
}

// dial is the cluster's dialer with the TLS handshake on top, both within
// connect_timeout: Envoy's connect timer stops at the Connected event,
// which SslSocket raises when the handshake completes (onSuccess). The
// transport then speaks the cluster's protocol over the connection,
// whatever ALPN chose, as Envoy does with explicit_http_config.
func (u *upstreamTLS) dial(d *net.Dialer, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return u.handshake(ctx, raw)
	}
}

// tlsError is a failed upstream handshake with the transport failure
// reason Envoy reports for it (SslSocket::failureReason).
type tlsError struct {
	reason string // "" when Envoy's error queue would be empty
	err    error
}

// Error is the failure reason Envoy reports (what a gRPC call failing on
// the handshake carries in its message), or crypto/tls's error when the
// reason is empty.
func (e *tlsError) Error() string {
	if e.reason != "" {
		return "upstream TLS: " + e.reason
	}
	return "upstream TLS: " + e.err.Error()
}
func (e *tlsError) Unwrap() error { return e.err }

// The BoringSSL errors of Envoy's failure reasons, packed as ERR_PACK(lib,
// reason): ERR_LIB_SSL is 16, ERR_LIB_SYS 2; SSL_R_CERTIFICATE_VERIFY_FAILED
// is 125, SSL_R_WRONG_VERSION_NUMBER 247, a received alert
// SSL_AD_REASON_OFFSET (1000) + its code.
const (
	errLibSSL             = 16 << 24
	errLibSys             = 2 << 24
	sslCertVerifyFailed   = errLibSSL + 125
	sslWrongVersionNumber = errLibSSL + 247
	sslAlertOffset        = 1000
)

// failureReason is SslSocket::drainErrorQueue's string for one error:
// "TLS_error:|<packed>:<lib>:OPENSSL_internal:<reason>[:<detail>]:TLS_error_end"
// (BoringSSL's ERR_func_error_string is always "OPENSSL_internal").
func failureReason(packed int, lib, reason, detail string) string {
	s := fmt.Sprintf("TLS_error:|%d:%s:OPENSSL_internal:%s", packed, lib, reason)
	if detail != "" {
		s += ":" + detail
	}
	return s + ":TLS_error_end"
}

// handshakeError maps a crypto/tls handshake error to Envoy's transport
// failure reason. A timeout stays as it is: it is a connect timeout.
func handshakeError(err error) error {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return err
	}
	var verr *verifyError
	var rh tls.RecordHeaderError
	var op *net.OpError
	var errno syscall.Errno
	switch {
	case errors.As(err, &verr):
		// The custom verify callback failed: SSL_R_CERTIFICATE_VERIFY_FAILED
		// with the validator's error details appended (drainErrorQueue).
		return &tlsError{failureReason(sslCertVerifyFailed, "SSL routines", "CERTIFICATE_VERIFY_FAILED", verr.detail), err}
	case errors.As(err, &rh):
		// Not TLS (a plaintext server): BoringSSL's WRONG_VERSION_NUMBER.
		return &tlsError{failureReason(sslWrongVersionNumber, "SSL routines", "WRONG_VERSION_NUMBER", ""), err}
	case errors.As(err, &op) && op.Op == "remote error":
		if code, name, ok := alertReason(op.Err.Error()); ok {
			return &tlsError{failureReason(errLibSSL+sslAlertOffset+code, "SSL routines", name, ""), err}
		}
	case errors.As(err, &errno):
		// A socket error: io_handle_bio.cc puts ERR_LIB_SYS with the errno,
		// whose reason string is strerror's.
		msg := errno.Error()
		if msg != "" {
			msg = strings.ToUpper(msg[:1]) + msg[1:]
		}
		return &tlsError{failureReason(errLibSys+int(errno), "system library", msg, ""), err}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		// The server closed the connection: BoringSSL queues no error, so
		// the failure reason stays empty.
		return &tlsError{"", err}
	}
	return &tlsError{err.Error(), err}
}

// alertReason maps a received alert, as crypto/tls names it ("tls: " and
// its alertText), to BoringSSL's SSL_R_* name for that alert.
func alertReason(msg string) (int, string, bool) {
	a, ok := alertNames[strings.TrimPrefix(msg, "tls: ")]
	return a.code, a.name, ok
}

var alertNames = map[string]struct {
	code int
	name string
}{
	"unexpected message":              {10, "SSLV3_ALERT_UNEXPECTED_MESSAGE"},
	"bad record MAC":                  {20, "SSLV3_ALERT_BAD_RECORD_MAC"},
	"record overflow":                 {22, "TLSV1_ALERT_RECORD_OVERFLOW"},
	"handshake failure":               {40, "SSLV3_ALERT_HANDSHAKE_FAILURE"},
	"bad certificate":                 {42, "SSLV3_ALERT_BAD_CERTIFICATE"},
	"unsupported certificate":         {43, "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE"},
	"revoked certificate":             {44, "SSLV3_ALERT_CERTIFICATE_REVOKED"},
	"expired certificate":             {45, "SSLV3_ALERT_CERTIFICATE_EXPIRED"},
	"unknown certificate":             {46, "SSLV3_ALERT_CERTIFICATE_UNKNOWN"},
	"illegal parameter":               {47, "SSLV3_ALERT_ILLEGAL_PARAMETER"},
	"unknown certificate authority":   {48, "TLSV1_ALERT_UNKNOWN_CA"},
	"access denied":                   {49, "TLSV1_ALERT_ACCESS_DENIED"},
	"error decoding message":          {50, "TLSV1_ALERT_DECODE_ERROR"},
	"error decrypting message":        {51, "TLSV1_ALERT_DECRYPT_ERROR"},
	"protocol version not supported":  {70, "TLSV1_ALERT_PROTOCOL_VERSION"},
	"insufficient security level":     {71, "TLSV1_ALERT_INSUFFICIENT_SECURITY"},
	"internal error":                  {80, "TLSV1_ALERT_INTERNAL_ERROR"},
	"inappropriate fallback":          {86, "TLSV1_ALERT_INAPPROPRIATE_FALLBACK"},
	"user canceled":                   {90, "TLSV1_ALERT_USER_CANCELLED"},
	"no renegotiation":                {100, "TLSV1_ALERT_NO_RENEGOTIATION"},
	"unsupported extension":           {110, "TLSV1_UNSUPPORTED_EXTENSION"},
	"unrecognized name":               {112, "TLSV1_UNRECOGNIZED_NAME"},
	"no application protocol":         {120, "TLSV1_ALERT_NO_APPLICATION_PROTOCOL"},
	"bad certificate status response": {113, "TLSV1_BAD_CERTIFICATE_STATUS_RESPONSE"},
	"bad certificate hash value":      {114, "TLSV1_BAD_CERTIFICATE_HASH_VALUE"},
	"unknown PSK identity":            {115, "TLSV1_ALERT_UNKNOWN_PSK_IDENTITY"},
	"certificate unobtainable":        {111, "TLSV1_CERTIFICATE_UNOBTAINABLE"},
}

// verifyError is a failed certificate verification, with the validator's
// error details (DefaultCertValidator's error_details).
type verifyError struct{ detail string }

func (e *verifyError) Error() string { return e.detail }

// verify is DefaultCertValidator::doVerifyCertChain for an upstream: with
// a trusted CA, the chain (X509_verify_cert with purpose ssl_server and
// X509_V_FLAG_PARTIAL_CHAIN: any certificate of the bundle is a trust
// anchor; no host name check), then the SAN matchers
// (verifyCertAndUpdateStatus). Without a trusted CA nothing is verified.
func (u *upstreamTLS) verify(cs tls.ConnectionState) error {
	if u.roots == nil {
		return nil
	}
	chain := cs.PeerCertificates
	if len(chain) == 0 {
		return &verifyError{"verify cert failed: empty cert chain"}
	}
	if detail := verifyChain(chain, u.roots, time.Now()); detail != "" {
		return &verifyError{"verify cert failed: " + detail}
	}
	if len(u.sans) > 0 && !u.matchSAN(chain[0]) {
		return &verifyError{fmt.Sprintf("verify cert failed: SAN matcher, certificate SANs are [%s]", strings.Join(certificateSANs(chain[0]), ", "))}
	}
	return nil
}

// X509_verify_cert_error_string's texts (BoringSSL) for the errors mapped.
const (
	x509DepthZeroSelfSigned = "self signed certificate"
	x509SelfSignedInChain   = "self signed certificate in certificate chain"
	x509UnknownIssuer       = "unable to get local issuer certificate"
	x509Expired             = "certificate has expired"
	x509NotYetValid         = "certificate is not yet valid"
	x509InvalidPurpose      = "unsupported certificate purpose"
	x509InvalidCA           = "invalid CA certificate"
)

// verifyChain verifies chain against roots at now and returns "" or
// Utility::getX509VerificationErrorInfo's text, "X509_verify_cert:
// certificate verification error at depth <d>: <error>". crypto/x509
// stands in for X509_verify_cert; its errors are mapped to BoringSSL's.
// BoringSSL builds the chain before it checks validity periods, so a
// certificate both untrusted and expired is reported untrusted.
func verifyChain(chain []*x509.Certificate, roots *x509.CertPool, now time.Time) string {
	at := func(depth int, msg string) string {
		return fmt.Sprintf("X509_verify_cert: certificate verification error at depth %d: %s", depth, msg)
	}
	verify := func(t time.Time) error {
		inter := x509.NewCertPool()
		for _, c := range chain[1:] {
			inter.AddCert(c)
		}
		_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: t, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		return err
	}
	err := verify(now)
	if err == nil {
		return ""
	}
	var invalid x509.CertificateInvalidError
	if errors.As(err, &invalid) && invalid.Reason == x509.Expired && invalid.Cert != nil {
		// Is the chain trusted at all? Ask again at a time the
		// certificate was valid.
		c := invalid.Cert
		var unknown x509.UnknownAuthorityError
		if errors.As(verify(c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore)/2)), &unknown) {
			err = unknown
		}
	}
	var unknown x509.UnknownAuthorityError
	switch {
	case errors.As(err, &unknown):
		// Walk the chain as the server sent it, issuer by issuer: the
		// error is at the last certificate reached.
		d := 0
		for d+1 < len(chain) && chain[d].CheckSignatureFrom(chain[d+1]) == nil {
			d++
		}
		last := chain[d]
		switch {
		case !selfSigned(last):
			return at(d, x509UnknownIssuer)
		case d == 0:
			return at(0, x509DepthZeroSelfSigned)
		default:
			return at(d, x509SelfSignedInChain)
		}
	case errors.As(err, &invalid):
		d := depthOf(chain, invalid.Cert)
		switch invalid.Reason {
		case x509.Expired:
			if invalid.Cert != nil && now.Before(invalid.Cert.NotBefore) {
				return at(d, x509NotYetValid)
			}
			return at(d, x509Expired)
		case x509.IncompatibleUsage:
			return at(d, x509InvalidPurpose)
		case x509.NotAuthorizedToSign:
			return at(d, x509InvalidCA)
		}
	}
	// Not mapped: crypto/x509's own words.
	return at(0, err.Error())
}

func selfSigned(c *x509.Certificate) bool {
	return string(c.RawIssuer) == string(c.RawSubject) && c.CheckSignatureFrom(c) == nil
}

// depthOf is c's place in the chain (0 the leaf); a certificate not sent
// by the server is the trust anchor above it.
func depthOf(chain []*x509.Certificate, c *x509.Certificate) int {
	for i, x := range chain {
		if c != nil && x.Equal(c) {
			return i
		}
	}
	return len(chain)
}

// matchSAN is DefaultCertValidator::matchSubjectAltName with
// StringSanMatcher::match (san_matcher.cc): any matcher matching any SAN
// of its type. For a DNS SAN an exact matcher follows DNS rules
// (Utility::dnsNameMatch, the SAN as the pattern); everything else is the
// StringMatcher on the SAN as Utility::generalNameAsString writes it (a
// URI SAN as the certificate spells it: a SPIFFE ID compared exactly, by
// prefix, …).
func (u *upstreamTLS) matchSAN(leaf *x509.Certificate) bool {
	var uris []string
	for _, m := range u.sans {
		sans := leaf.DNSNames
		if m.typ == tlsv3.SubjectAltNameMatcher_URI {
			if uris == nil {
				uris = uriSANs(leaf)
			}
			sans = uris
		}
		for _, san := range sans {
			if m.match(san) {
				return true
			}
		}
	}
	return false
}

// match is StringSanMatcher::match for one SAN of the matcher's type.
func (s sanMatcher) match(san string) bool {
	m := s.m
	if _, exact := m.GetMatchPattern().(*matcherv3.StringMatcher_Exact); exact && s.typ == tlsv3.SubjectAltNameMatcher_DNS {
		return dnsNameMatch(m.GetExact(), san)
	}
	// StringMatcherImpl::match: ignore_case lower-cases both sides.
	want := ""
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		want = p.Exact
	case *matcherv3.StringMatcher_Prefix:
		want = p.Prefix
	case *matcherv3.StringMatcher_Suffix:
		want = p.Suffix
	case *matcherv3.StringMatcher_Contains:
		want = p.Contains
	}
	if m.GetIgnoreCase() {
		san, want = strings.ToLower(san), strings.ToLower(want)
	}
	switch m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return san == want
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(san, want)
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(san, want)
	case *matcherv3.StringMatcher_Contains:
		return strings.Contains(san, want)
	}
	return false
}

// dnsNameMatch is Utility::dnsNameMatch (source/common/tls/utility.cc):
// case-insensitive equality, or a pattern whose left-most label (not an
// A-label) holds a wildcard that covers that one label of name.
func dnsNameMatch(name, pattern string) bool {
	name, pattern = strings.ToLower(name), strings.ToLower(pattern)
	if name == pattern {
		return true
	}
	pl, pr, ok1 := strings.Cut(pattern, ".")
	nl, nr, ok2 := strings.Cut(name, ".")
	if !ok1 || !ok2 {
		return false
	}
	if strings.Contains(pl, "*") && !strings.Contains(pr, "*") && !strings.HasPrefix(pl, "xn--") {
		return nr == pr && labelWildcardMatch(nl, pl)
	}
	return false
}

// labelWildcardMatch is Utility::labelWildcardMatch: "*", or one '*' with
// the label starting and ending as the pattern does around it.
func labelWildcardMatch(label, pattern string) bool {
	if pattern == "*" {
		return true
	}
	if strings.Count(pattern, "*") != 1 {
		return false
	}
	before, after, _ := strings.Cut(pattern, "*")
	return len(pattern) <= len(label)+1 && strings.HasPrefix(label, before) && strings.HasSuffix(label, after)
}

// certificateSANs lists the leaf's SANs for the SAN matcher's error, each
// as Utility::generalNameAsString writes it. The order is crypto/x509's
// (DNS, email, IP, URI), which is the order of a certificate crypto/x509
// made; the emulator cannot see the encoded order of others.
func certificateSANs(c *x509.Certificate) []string {
	var out []string
	out = append(out, c.DNSNames...)
	out = append(out, c.EmailAddresses...)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	return append(out, uriSANs(c)...)
}

// oidSubjectAltName is the subjectAltName extension (RFC 5280, 4.2.1.6).
var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// uriSANs are the leaf's URI SANs as the certificate spells them: the
// uniformResourceIdentifier IA5Strings, which generalNameAsString takes
// as they are. (crypto/x509's parsed url.URL could respell one.)
func uriSANs(c *x509.Certificate) []string {
	fallback := func() []string {
		var out []string
		for _, u := range c.URIs {
			out = append(out, u.String())
		}
		return out
	}
	for _, ext := range c.Extensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			continue
		}
		var seq asn1.RawValue
		if rest, err := asn1.Unmarshal(ext.Value, &seq); err != nil || len(rest) > 0 || seq.Tag != asn1.TagSequence {
			return fallback()
		}
		var out []string
		for rest := seq.Bytes; len(rest) > 0; {
			var gn asn1.RawValue
			var err error
			if rest, err = asn1.Unmarshal(rest, &gn); err != nil {
				return fallback()
			}
			if gn.Class == asn1.ClassContextSpecific && gn.Tag == 6 { // uniformResourceIdentifier [6] IA5String
				out = append(out, string(gn.Bytes))
			}
		}
		return out
	}
	return nil
}
