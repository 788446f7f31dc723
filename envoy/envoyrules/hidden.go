package envoyrules

import (
	"fmt"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// hiddenField is a field marked [#not-implemented-hide:] in Envoy's API
// (the comment is in go-control-plane's generated code too) of a message
// Sluice emits or the emulator loads, with what Envoy does when it is set,
// read in the code that consumes the message.
type hiddenField struct {
	msg    proto.Message
	field  protoreflect.Name
	source string
	// effect says what happens instead, for an Ignored field.
	effect string
	// refused gives Envoy's error text for a field Envoy refuses.
	refused func(m protoreflect.Message) string
}

const (
	srcCtxConfig = "source/common/tls/context_config_impl.cc, ContextConfigImpl::ContextConfigImpl " +
		"(getTlsCertificateConfigProviders, getCertificateValidationContextConfigProvider)"
	srcHCMConfig = "source/extensions/filters/network/http_connection_manager/config.cc, " +
		"HttpConnectionManagerConfig::HttpConnectionManagerConfig"
)

var hiddenFields = []hiddenField{
	// CertificateValidationContextConfigImpl reads trusted_ca, crl, the SAN
	// matchers, the certificate hashes and SPKIs, allow_expired_certificate,
	// trust_chain_verification, custom_validator_config,
	// only_verify_leaf_cert_crl and max_verify_depth, nothing else.
	{msg: &tlsv3.CertificateValidationContext{}, field: "system_root_certs", source: srcCVC,
		effect: "the system trust store is not loaded; without trusted_ca the peer's certificate chain is not verified against any CA"},
	{msg: &tlsv3.CertificateValidationContext{}, field: "ca_certificate_provider_instance", source: srcCVC,
		effect: "no CA is loaded from it; without trusted_ca the peer's certificate chain is not verified against any CA"},
	{msg: &tlsv3.CertificateValidationContext{}, field: "require_signed_certificate_timestamp", source: srcCVC,
		effect: "no signed certificate timestamp is required"},
	// ContextConfigImpl takes certificates only from tls_certificates and
	// tls_certificate_sds_secret_configs, and a validation context only
	// from validation_context, validation_context_sds_secret_config and
	// combined_validation_context (any other case: none).
	{msg: &tlsv3.CommonTlsContext{}, field: "tls_certificate_provider_instance", source: srcCtxConfig,
		effect: "no certificate is loaded from it"},
	{msg: &tlsv3.CommonTlsContext{}, field: "tls_certificate_certificate_provider_instance", source: srcCtxConfig,
		effect: "no certificate is loaded from it"},
	{msg: &tlsv3.CommonTlsContext{}, field: "validation_context_certificate_provider", source: srcCtxConfig,
		effect: "the context has no validation context: the peer's certificate is not verified"},
	{msg: &tlsv3.CommonTlsContext{}, field: "validation_context_certificate_provider_instance", source: srcCtxConfig,
		effect: "the context has no validation context: the peer's certificate is not verified"},
	{msg: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{}, field: "validation_context_certificate_provider", source: srcCtxConfig,
		effect: "only default_validation_context and the SDS secret are used"},
	{msg: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{}, field: "validation_context_certificate_provider_instance", source: srcCtxConfig,
		effect: "only default_validation_context and the SDS secret are used"},
	// Universal header validation is compiled in only with
	// --define=uhv=enabled, which release builds do not set; without it the
	// connection manager and the upstream protocol options refuse a
	// header validator (the #else branch of createHeaderValidatorFactory).
	{msg: &hcmv3.HttpConnectionManager{}, field: "typed_header_validation_config",
		source: srcHCMConfig + " (createHeaderValidatorFactory, builds without ENVOY_ENABLE_UHV)",
		refused: func(m protoreflect.Message) string {
			return fmt.Sprintf("This Envoy binary does not support header validator extensions.: '%s'",
				m.Interface().(*hcmv3.HttpConnectionManager).GetTypedHeaderValidationConfig().GetName())
		}},
	{msg: &upstreamhttpv3.HttpProtocolOptions{}, field: "header_validation_config",
		source: "source/extensions/upstreams/http/config.cc, createHeaderValidatorFactory (builds without ENVOY_ENABLE_UHV)",
		refused: func(m protoreflect.Message) string {
			return fmt.Sprintf("This Envoy binary does not support header validator extensions: '%s'",
				m.Interface().(*upstreamhttpv3.HttpProtocolOptions).GetHeaderValidationConfig().GetName())
		}},
	// HttpConnectionManagerConfig reads neither; nothing else reads the
	// connection manager's proto.
	{msg: &hcmv3.HttpConnectionManager{}, field: "path_normalization_options", source: srcHCMConfig,
		effect: "paths are not transformed"},
	{msg: &hcmv3.HttpConnectionManager{}, field: "represent_ipv4_remote_address_as_ipv4_mapped_ipv6", source: srcHCMConfig,
		effect: "IPv4 remote addresses stay IPv4"},
	// FilterConfigPerRoute reads processing_mode, grpc_service,
	// grpc_initial_metadata, metadata_options, failure_mode_allow and
	// processing_request_modifier of the overrides.
	{msg: &extprocv3.ExtProcOverrides{}, field: "async_mode", source: srcExtProcPerRoute,
		effect: "the route is processed synchronously"},
	{msg: &extprocv3.ExtProcOverrides{}, field: "request_attributes", source: srcExtProcPerRoute,
		effect: "the filter's request_attributes are sent"},
	{msg: &extprocv3.ExtProcOverrides{}, field: "response_attributes", source: srcExtProcPerRoute,
		effect: "the filter's response_attributes are sent"},
}

const srcExtProcPerRoute = "source/extensions/filters/http/ext_proc/ext_proc.cc, FilterConfigPerRoute::FilterConfigPerRoute"

// hiddenRules makes one rule per hidden field.
func hiddenRules() []*Rule {
	var out []*Rule
	for _, h := range hiddenFields {
		d := h.msg.ProtoReflect().Descriptor()
		fd := d.Fields().ByName(h.field)
		if fd == nil {
			panic(fmt.Sprintf("envoyrules: %s has no field %s", d.FullName(), h.field)) // the table is wrong
		}
		r := &Rule{
			Name:    "hidden." + string(d.Name()) + "." + string(h.field),
			Applies: d.FullName(),
			Source:  h.source,
		}
		if h.refused != nil {
			r.Severity = Refused
			refused := h.refused
			r.Check = func(m proto.Message) []Finding {
				pm := m.ProtoReflect()
				if !pm.Has(fd) {
					return nil
				}
				return find(string(h.field), refused(pm))
			}
		} else {
			r.Severity = Ignored
			msg := fmt.Sprintf("%s is [#not-implemented-hide:] in Envoy's API and Envoy never reads it, so it has no effect in Envoy: %s", h.field, h.effect)
			r.Check = func(m proto.Message) []Finding {
				if !m.ProtoReflect().Has(fd) {
					return nil
				}
				return find(string(h.field), msg)
			}
		}
		out = append(out, r)
	}
	return out
}
