package envoyrules

import (
	"fmt"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

const (
	srcCVC = "source/common/ssl/certificate_validation_context_config_impl.cc, " +
		"CertificateValidationContextConfigImpl::initialize"
	srcClientCtx = "source/common/tls/context_config_impl.cc, ClientContextConfigImpl::ClientContextConfigImpl"
	// Static secrets are added before any static cluster or listener is
	// built (source/server/configuration_impl.cc, MainImpl::initialize),
	// and a context naming one without sds_config takes it from them.
	srcStaticSecret = "source/common/tls/context_config_impl.cc, getTlsCertificateConfigProviders, getProviderFromSds " +
		"(ContextConfigImpl::ContextConfigImpl)"
	srcCombinedCVC = "source/common/tls/context_config_impl.cc, ContextConfigImpl::ContextConfigImpl and " +
		"getCombinedValidationContextConfig; " + srcCVC
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

// staticSecretRules are the checks Envoy makes of a TLS context that names
// a secret without an sds_config: the secret comes from the bootstrap's
// static_resources.secrets, so they apply to a bootstrap, where both are
// known (a context served over xDS names secrets of a bootstrap Sluice
// does not see). Envoy reads a static secret when it builds the context,
// so a missing one, or a validation context that is not valid once
// merged, refuses the cluster or listener — in a bootstrap, Envoy exits.
func staticSecretRules() []*Rule {
	b := nameOf(&bootstrapv3.Bootstrap{})
	return []*Rule{
		{
			Name: "tls.static-secret-unknown", Applies: b, Source: srcStaticSecret, Severity: Refused,
			Check: on(func(b *bootstrapv3.Bootstrap) []Finding {
				var out []Finding
				certs, cvcs := staticSecrets(b)
				for _, c := range tlsContexts(b) {
					for _, r := range c.staticRefs() {
						switch {
						case r.cert && certs[r.name] == nil:
							out = append(out, Finding{Path: r.path, Msg: "Unknown static secret: " + r.name})
						case !r.cert && cvcs[r.name] == nil:
							out = append(out, Finding{Path: r.path, Msg: "Unknown static certificate validation context: " + r.name})
						}
					}
				}
				return out
			}),
		},
		{
			// The inline case is tls.san-without-trusted-ca and its
			// siblings; this is the one where the CA comes from a secret.
			Name: "tls.static-validation-without-trusted-ca", Applies: b, Source: srcCombinedCVC, Severity: Refused,
			Check: on(func(b *bootstrapv3.Bootstrap) []Finding {
				var out []Finding
				_, cvcs := staticSecrets(b)
				for _, c := range tlsContexts(b) {
					for _, r := range c.staticRefs() {
						secret := cvcs[r.name]
						if r.cert || secret == nil {
							continue
						}
						// The combined context: default_validation_context,
						// then the secret merged over it.
						merged := &tlsv3.CertificateValidationContext{}
						if d := c.ctc.GetCombinedValidationContext().GetDefaultValidationContext(); d != nil {
							merged = proto.Clone(d).(*tlsv3.CertificateValidationContext)
						}
						proto.Merge(merged, secret)
						if msg := validationWithoutCA(merged); msg != "" {
							out = append(out, Finding{Path: r.ctxPath, Msg: msg})
						}
					}
				}
				return out
			}),
		},
	}
}

// staticSecrets indexes a bootstrap's static secrets by name: TLS
// certificates and validation contexts (the two maps of SecretManagerImpl).
func staticSecrets(b *bootstrapv3.Bootstrap) (certs map[string]*tlsv3.TlsCertificate, cvcs map[string]*tlsv3.CertificateValidationContext) {
	certs, cvcs = map[string]*tlsv3.TlsCertificate{}, map[string]*tlsv3.CertificateValidationContext{}
	for _, s := range b.GetStaticResources().GetSecrets() {
		switch t := s.GetType().(type) {
		case *tlsv3.Secret_TlsCertificate:
			certs[s.GetName()] = t.TlsCertificate
		case *tlsv3.Secret_ValidationContext:
			cvcs[s.GetName()] = t.ValidationContext
		}
	}
	return certs, cvcs
}

// tlsContext is a CommonTlsContext found in a bootstrap, with its path.
type tlsContext struct {
	path string
	ctc  *tlsv3.CommonTlsContext
}

// tlsContexts finds every CommonTlsContext inside b, Anys unpacked.
func tlsContexts(b *bootstrapv3.Bootstrap) []tlsContext {
	f := &ctcFinder{}
	Walk(b.ProtoReflect(), f)
	return f.found
}

type ctcFinder struct{ found []tlsContext }

func (f *ctcFinder) Message(p Path, m protoreflect.Message) {
	if c, ok := m.Interface().(*tlsv3.CommonTlsContext); ok {
		f.found = append(f.found, tlsContext{path: p.String(), ctc: c})
	}
}

func (f *ctcFinder) BadAny(Path, string, bool, error) {}

// staticRef is a context's reference to a static secret.
type staticRef struct {
	name    string
	cert    bool   // a TLS certificate; else a validation context
	path    string // of the SdsSecretConfig
	ctxPath string // of the validation context field that holds it
}

// staticRefs are the secrets c takes from static resources: each one
// named without sds_config, as getTlsCertificateConfigProviders and
// getCertificateValidationContextConfigProvider read them (certificates
// from tls_certificate_sds_secret_configs only when tls_certificates is
// empty).
func (c tlsContext) staticRefs() []staticRef {
	var out []staticRef
	at := func(rel string) string { return joinPath(c.path, rel) }
	if len(c.ctc.GetTlsCertificates()) == 0 {
		for i, s := range c.ctc.GetTlsCertificateSdsSecretConfigs() {
			if s.GetSdsConfig() == nil {
				out = append(out, staticRef{name: s.GetName(), cert: true, path: at(fmt.Sprintf("tls_certificate_sds_secret_configs[%d]", i))})
			}
		}
	}
	if s := c.ctc.GetValidationContextSdsSecretConfig(); s != nil && s.GetSdsConfig() == nil {
		p := at("validation_context_sds_secret_config")
		out = append(out, staticRef{name: s.GetName(), path: p, ctxPath: p})
	}
	if s := c.ctc.GetCombinedValidationContext().GetValidationContextSdsSecretConfig(); s != nil && s.GetSdsConfig() == nil {
		out = append(out, staticRef{name: s.GetName(), path: at("combined_validation_context.validation_context_sds_secret_config"),
			ctxPath: at("combined_validation_context")})
	}
	return out
}

// validationWithoutCA is Envoy's error for a validation context built
// without a trusted CA that asks for what needs one, in
// CertificateValidationContextConfigImpl::initialize's order; "" if none.
func validationWithoutCA(v *tlsv3.CertificateValidationContext) string {
	switch {
	case !withoutCA(v):
		return ""
	case hasData(v.GetCrl()):
		path := "<inline>"
		if f := v.GetCrl().GetFilename(); f != "" {
			path = f
		}
		return "Failed to load CRL from " + path + " without trusted CA"
	case len(v.GetMatchTypedSubjectAltNames())+len(v.GetMatchSubjectAltNames()) > 0:
		return "SAN-based verification of peer certificates without trusted CA is insecure and not allowed"
	case v.GetAllowExpiredCertificate():
		return "Certificate validity period is always ignored without trusted CA"
	}
	return ""
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
