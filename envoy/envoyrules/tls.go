package envoyrules

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

const (
	srcCVC = "source/common/ssl/certificate_validation_context_config_impl.cc, " +
		"CertificateValidationContextConfigImpl::initialize"
	srcClientCtx = "source/common/tls/context_config_impl.cc, ClientContextConfigImpl::ClientContextConfigImpl"
)

// tlsRules are the checks Envoy makes when it builds a TLS context.
//
// The validation-context rules apply to a CommonTlsContext's inline
// validation_context only: that one is checked on its own when the context
// is built (ContextConfigImpl, source/common/tls/context_config_impl.cc,
// via createInlineCertificateValidationContextProvider). A
// combined_validation_context is merged with an SDS secret first, and an
// SDS validation context arrives later, so neither can be judged from the
// resource alone.
func tlsRules() []*Rule {
	ctc := nameOf(&tlsv3.CommonTlsContext{})
	return []*Rule{
		{
			Name: "tls.san-without-trusted-ca", Applies: ctc, Source: srcCVC, Severity: Refused,
			Check: on(func(c *tlsv3.CommonTlsContext) []Finding {
				v := c.GetValidationContext()
				if !withoutCA(v) || len(v.GetMatchTypedSubjectAltNames())+len(v.GetMatchSubjectAltNames()) == 0 {
					return nil
				}
				return find("validation_context", "SAN-based verification of peer certificates without trusted CA is insecure and not allowed")
			}),
		},
		{
			Name: "tls.crl-without-trusted-ca", Applies: ctc, Source: srcCVC, Severity: Refused,
			Check: on(func(c *tlsv3.CommonTlsContext) []Finding {
				v := c.GetValidationContext()
				if !withoutCA(v) || !hasData(v.GetCrl()) {
					return nil
				}
				path := "<inline>"
				if f := v.GetCrl().GetFilename(); f != "" {
					path = f
				}
				return find("validation_context.crl", "Failed to load CRL from "+path+" without trusted CA")
			}),
		},
		{
			Name: "tls.allow-expired-without-trusted-ca", Applies: ctc, Source: srcCVC, Severity: Refused,
			Check: on(func(c *tlsv3.CommonTlsContext) []Finding {
				v := c.GetValidationContext()
				if !withoutCA(v) || !v.GetAllowExpiredCertificate() {
					return nil
				}
				return find("validation_context.allow_expired_certificate", "Certificate validity period is always ignored without trusted CA")
			}),
		},
		{
			Name: "tls.sni-null-byte", Applies: nameOf(&tlsv3.UpstreamTlsContext{}), Source: srcClientCtx, Severity: Refused,
			Check: on(func(c *tlsv3.UpstreamTlsContext) []Finding {
				if !strings.Contains(c.GetSni(), "\x00") {
					return nil
				}
				return find("sni", "SNI names containing NULL-byte are not allowed")
			}),
		},
		{
			Name: "tls.client-single-certificate", Applies: nameOf(&tlsv3.UpstreamTlsContext{}), Source: srcClientCtx, Severity: Refused,
			Check: on(func(c *tlsv3.UpstreamTlsContext) []Finding {
				ctc := c.GetCommonTlsContext()
				if len(ctc.GetTlsCertificates())+len(ctc.GetTlsCertificateSdsSecretConfigs()) <= 1 {
					return nil
				}
				return find("common_tls_context", "Multiple TLS certificates are not supported for client contexts")
			}),
		},
	}
}

// withoutCA reports whether v is a validation context that Envoy builds
// without a trusted CA: no trusted_ca data and no custom validator (the
// condition of CertificateValidationContextConfigImpl::initialize).
func withoutCA(v *tlsv3.CertificateValidationContext) bool {
	return v != nil && !hasData(v.GetTrustedCa()) && v.GetCustomValidatorConfig() == nil
}

// hasData reports whether a DataSource may hold data. Envoy reads a file
// or an environment variable at load; an empty one counts as no data
// there, which cannot be known here, so a named one counts as data.
func hasData(ds *corev3.DataSource) bool {
	switch s := ds.GetSpecifier().(type) {
	case *corev3.DataSource_Filename:
		return s.Filename != ""
	case *corev3.DataSource_InlineString:
		return s.InlineString != ""
	case *corev3.DataSource_InlineBytes:
		return len(s.InlineBytes) > 0
	case *corev3.DataSource_EnvironmentVariable:
		return s.EnvironmentVariable != ""
	}
	return false
}
