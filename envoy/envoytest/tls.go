package envoytest

// Upstream TLS: a cluster's envoy.transport_sockets.tls transport socket
// (an UpstreamTlsContext), spoken with crypto/tls and verified exactly as
// far as the context asks, as Envoy's TLS transport socket does
// (source/common/tls/: context_config_impl.cc, context_impl.cc,
// ssl_socket.cc, cert_validator/default_validator.cc, san_matcher.cc;
// source/common/ssl/certificate_validation_context_config_impl.cc). What
// the emulator does not implement is refused at load, naming the field.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// upstreamTLS is a cluster's UpstreamTlsContext, checked and loaded.
type upstreamTLS struct {
	sni  string   // sent as SNI; "" sends none
	alpn []string // offered; the cluster's protocol is spoken whatever is picked
	// roots is trusted_ca; nil when the context has none, and then
	// nothing is verified: Envoy's verify mode is SSL_VERIFY_NONE
	// (DefaultCertValidator::initializeSslContexts).
	roots *x509.CertPool
	sans  []sanMatcher // match_typed_subject_alt_names (only with roots)
}

// sanMatcher is one DNS entry of match_typed_subject_alt_names.
type sanMatcher struct {
	m *matcherv3.StringMatcher
}

// newUpstreamTLS loads an UpstreamTlsContext. Its checks at load are
// Envoy's (a SAN matcher without trusted_ca; a trusted_ca without a
// certificate) and the emulator's (every field it does not implement).
func newUpstreamTLS(ts *corev3.TransportSocket) (*upstreamTLS, error) {
	tc := &tlsv3.UpstreamTlsContext{}
	if err := anyTo(ts.GetTypedConfig(), typeUpstreamTLS, tc); err != nil {
		return nil, err
	}
	if err := onlyFields(tc, "", "sni", "common_tls_context"); err != nil {
		return nil, err
	}
	ctc := tc.GetCommonTlsContext()
	if err := onlyFields(ctc, "common_tls_context.", "alpn_protocols", "validation_context"); err != nil {
		return nil, err
	}
	u := &upstreamTLS{sni: tc.GetSni(), alpn: ctc.GetAlpnProtocols()}
	vc := ctc.GetValidationContext()
	if vc == nil {
		return u, nil
	}
	const vcPath = "common_tls_context.validation_context."
	// system_root_certs is [#not-implemented-hide:] (tls/v3/common.proto):
	// Envoy ignores it, and so does the emulator.
	if err := onlyFields(vc, vcPath, "trusted_ca", "match_typed_subject_alt_names", "system_root_certs"); err != nil {
		return nil, err
	}
	ca, caPath, err := readDataSource(vc.GetTrustedCa(), vcPath+"trusted_ca")
	if err != nil {
		return nil, err
	}
	// CertificateValidationContextConfigImpl: an empty trusted_ca is none.
	if len(ca) == 0 && len(vc.GetMatchTypedSubjectAltNames()) > 0 {
		return nil, errors.New("SAN-based verification of peer certificates without trusted CA is insecure and not allowed")
	}
	if len(ca) > 0 {
		if u.roots, err = parseCABundle(ca, caPath); err != nil {
			return nil, err
		}
	}
	for i, m := range vc.GetMatchTypedSubjectAltNames() {
		path := fmt.Sprintf("%smatch_typed_subject_alt_names[%d]", vcPath, i)
		if err := onlyFields(m, path+".", "san_type", "matcher"); err != nil {
			return nil, err
		}
		if m.GetSanType() != tlsv3.SubjectAltNameMatcher_DNS {
			return nil, fmt.Errorf("%s: san_type %s is not supported by the emulator (DNS only)", path, m.GetSanType())
		}
		sm := m.GetMatcher()
		if err := onlyFields(sm, path+".matcher.", "exact", "prefix", "suffix", "ignore_case"); err != nil {
			return nil, err
		}
		if sm.GetMatchPattern() == nil {
			return nil, fmt.Errorf("%s.matcher: a match pattern is required", path)
		}
		u.sans = append(u.sans, sanMatcher{m: sm})
	}
	return u, nil
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
// verification is off; verify does Envoy's.
func (u *upstreamTLS) clientConfig() *tls.Config {
	return &tls.Config{
		ServerName:         u.sni,
		NextProtos:         u.alpn,
		MinVersion:         tls.VersionTLS12,
		MaxVersion:         tls.VersionTLS12,
		CipherSuites:       envoyCipherSuites,
		CurvePreferences:   envoyCurves,
		InsecureSkipVerify: true, // verify below is the verification
		VerifyConnection:   u.verify,
	}
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
		c := tls.Client(raw, u.clientConfig())
		if err := c.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, handshakeError(err)
		}
		return c, nil
	}
}

// tlsError is a failed upstream handshake with the transport failure
// reason Envoy reports for it (SslSocket::failureReason).
type tlsError struct {
	reason string // "" when Envoy's error queue would be empty
	err    error
}

func (e *tlsError) Error() string { return "upstream TLS: " + e.err.Error() }
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
// StringSanMatcher::match (san_matcher.cc): any matcher matching any DNS
// SAN. An exact matcher follows DNS rules (Utility::dnsNameMatch, the SAN
// as the pattern); prefix and suffix compare strings, with ignore_case.
func (u *upstreamTLS) matchSAN(leaf *x509.Certificate) bool {
	for _, m := range u.sans {
		for _, san := range leaf.DNSNames {
			if m.match(san) {
				return true
			}
		}
	}
	return false
}

func (s sanMatcher) match(san string) bool {
	m := s.m
	if m.GetIgnoreCase() {
		san = strings.ToLower(san)
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return dnsNameMatch(p.Exact, san)
	case *matcherv3.StringMatcher_Prefix:
		want := p.Prefix
		if m.GetIgnoreCase() {
			want = strings.ToLower(want)
		}
		return strings.HasPrefix(san, want)
	case *matcherv3.StringMatcher_Suffix:
		want := p.Suffix
		if m.GetIgnoreCase() {
			want = strings.ToLower(want)
		}
		return strings.HasSuffix(san, want)
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
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return out
}
