package envoyrules

import (
	"fmt"
	"regexp"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

const (
	srcExtProcConfig = "source/extensions/filters/http/ext_proc/config.cc, verifyFilterConfig"
	srcExtProcModes  = "source/extensions/filters/http/ext_proc/config.cc, verifyProcessingModeConfig"
	srcExtAuthzCfg   = "source/extensions/filters/http/ext_authz/config.cc, ExtAuthzFilterConfig::createFilterFactoryFromProtoTyped; " +
		"source/common/config/utility.h, Utility::checkTransportVersion"
	srcExtAuthz = "source/extensions/filters/http/ext_authz/ext_authz.cc, FilterConfig::FilterConfig"
	srcRegex    = "source/common/common/regex.cc, CompiledGoogleReMatcher::CompiledGoogleReMatcher"
)

// filterRules are the checks of the ext_proc and ext_authz filter
// factories, and the regex compilation every RegexMatcher goes through.
//
// Not here, because Envoy does not check them at load: message_timeout
// against max_message_timeout, allow_mode_override with a
// FULL_DUPLEX_STREAMED body mode (the override is ignored at run time),
// observability_mode with body modes other than STREAMED (the body is not
// sent), and the clusters of grpc_service (ext_authz asks for its client
// with skip_cluster_check, ext_proc opens its stream per request: a
// missing cluster fails each request). Also not here: request_attributes
// and response_attributes are CEL expressions that Envoy parses at load
// ("Unable to parse descriptor expression: …",
// source/extensions/filters/http/ext_proc/matching_utils.cc,
// ExpressionManager::initExpressions); there is no CEL parser in this
// module to check them with.
func filterRules() []*Rule {
	ep := nameOf(&extprocv3.ExternalProcessor{})
	az := nameOf(&extauthzv3.ExtAuthz{})
	return []*Rule{
		{
			Name: "extproc.one-service", Applies: ep, Source: srcExtProcConfig, Severity: Refused,
			Check: on(func(c *extprocv3.ExternalProcessor) []Finding {
				if (c.GetGrpcService() != nil) != (c.GetHttpService() != nil) {
					return nil
				}
				return find("", "One and only one of grpc_service or http_service must be configured")
			}),
		},
		{
			Name: "extproc.route-cache", Applies: ep, Source: srcExtProcConfig, Severity: Refused,
			Check: on(func(c *extprocv3.ExternalProcessor) []Finding {
				if !c.GetDisableClearRouteCache() || c.GetRouteCacheAction() == extprocv3.ExternalProcessor_DEFAULT {
					return nil
				}
				return find("route_cache_action", "disable_clear_route_cache and route_cache_action can not be set to none-default at the same time.")
			}),
		},
		{
			Name: "extproc.http-service-headers-only", Applies: ep, Source: srcExtProcModes, Severity: Refused,
			Check: on(func(c *extprocv3.ExternalProcessor) []Finding {
				pm := c.GetProcessingMode()
				if c.GetHttpService() == nil ||
					(pm.GetRequestBodyMode() == extprocv3.ProcessingMode_NONE && pm.GetResponseBodyMode() == extprocv3.ProcessingMode_NONE &&
						pm.GetRequestTrailerMode() != extprocv3.ProcessingMode_SEND && pm.GetResponseTrailerMode() != extprocv3.ProcessingMode_SEND) {
					return nil
				}
				return find("processing_mode", "If the ext_proc filter is configured with http_service instead of gRPC service, "+
					"then the processing modes of this filter can not be configured to send body or trailer.")
			}),
		},
		{
			Name: "extproc.full-duplex-trailers", Applies: ep, Source: srcExtProcModes, Severity: Refused,
			Check: on(func(c *extprocv3.ExternalProcessor) []Finding {
				pm := c.GetProcessingMode()
				var out []Finding
				if pm.GetRequestBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED && pm.GetRequestTrailerMode() != extprocv3.ProcessingMode_SEND {
					out = append(out, Finding{Path: "processing_mode.request_trailer_mode", Msg: "If the ext_proc filter has the request_body_mode set to FULL_DUPLEX_STREAMED, " +
						"then the request_trailer_mode has to be set to SEND"})
				}
				if pm.GetResponseBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED && pm.GetResponseTrailerMode() != extprocv3.ProcessingMode_SEND {
					out = append(out, Finding{Path: "processing_mode.response_trailer_mode", Msg: "If the ext_proc filter has the response_body_mode set to FULL_DUPLEX_STREAMED, " +
						"then the response_trailer_mode has to be set to SEND"})
				}
				return out
			}),
		},
		{
			Name: "extproc.full-duplex-fail-closed", Applies: ep, Source: srcExtProcModes, Severity: Refused,
			Check: on(func(c *extprocv3.ExternalProcessor) []Finding {
				pm := c.GetProcessingMode()
				if !c.GetFailureModeAllow() || (pm.GetRequestBodyMode() != extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED &&
					pm.GetResponseBodyMode() != extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED) {
					return nil
				}
				return find("failure_mode_allow", "If the ext_proc filter has either the request_body_mode or the response_body_mode set "+
					"to FULL_DUPLEX_STREAMED, then the failure_mode_allow has to be left as false")
			}),
		},
		{
			Name: "extauthz.transport-api-v3", Applies: az, Source: srcExtAuthzCfg, Severity: Refused,
			Check: on(func(c *extauthzv3.ExtAuthz) []Finding {
				// Only the gRPC client checks it; the HTTP client has no
				// transport API.
				if c.GetGrpcService() == nil || c.GetTransportApiVersion() == corev3.ApiVersion_V3 {
					return nil
				}
				return find("transport_api_version", fmt.Sprintf("V2 (and AUTO) xDS transport protocol versions are deprecated in "+
					"transport_api_version: %s. The v2 xDS major version has been removed and is no longer supported. "+
					"You may be missing explicit V3 configuration of the transport API version, "+
					"see the advice in https://www.envoyproxy.io/docs/envoy/latest/faq/api/envoy_v3.", c.GetTransportApiVersion()))
			}),
		},
		{
			Name: "extauthz.duplicate-allowed-headers", Applies: az, Source: srcExtAuthz, Severity: Refused,
			Check: on(func(c *extauthzv3.ExtAuthz) []Finding {
				if c.GetAllowedHeaders() == nil || c.GetHttpService().GetAuthorizationRequest().GetAllowedHeaders() == nil {
					return nil
				}
				return find("allowed_headers", "Invalid duplicate configuration for allowed_headers.")
			}),
		},
		{
			Name: "regex.re2-syntax", Applies: nameOf(&matcherv3.RegexMatcher{}), Source: srcRegex, Severity: Refused,
			Check: on(func(m *matcherv3.RegexMatcher) []Finding {
				// Go's regexp accepts RE2's syntax (it refuses only RE2's \C).
				// Envoy gives RE2's own error text, and also refuses a regex
				// whose RE2 program is larger than re2.max_program_size.error_level
				// (default 100), which Go cannot measure.
				if _, err := regexp.Compile(m.GetRegex()); err != nil {
					return find("regex", fmt.Sprintf("RE2 refuses the regex %q: %v", m.GetRegex(), err))
				}
				return nil
			}),
		},
	}
}
