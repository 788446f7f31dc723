package chain

import (
	"fmt"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/llmapi"
)

// Envoy's own local replies. Envoy answers some requests itself, before or
// instead of the provider: a body larger than the listener's buffer (413
// "Payload Too Large"), an upstream timeout (504 "upstream request
// timeout"), a provider that cannot be reached (503 "upstream connect
// error or disconnect/reset before headers…", "no healthy upstream"). Its
// bodies are text/plain, which no OpenAI or Anthropic client can read as
// an error. The connection manager's local_reply_config rewrites them
// into the API's JSON error (LocalReply).
//
// How Envoy applies it (source/common/local_reply/local_reply.cc,
// LocalReplyImpl::rewrite, and source/common/http/utility.cc,
// Utility::sendLocalReply): every local reply — Envoy's own, and those
// ext_authz denials and ext_proc ImmediateResponses are sent as — passes
// through it; the mappers are tried in order and the first whose filter
// matches applies; its body_format_override replaces the body and, since
// the body changed and no mapper header set a content-type, the
// formatter's content_type becomes the reply's. So the mappers must match
// Envoy's replies only, never Sluice's own JSON refusals: they match on
// the response-code details (a CEL filter on response.code_details, which
// Envoy sets before the rewrite), which for Sluice's replies are
// "ext_authz_denied" and "sluice_<code>", never one of Envoy's. Envoy's
// replies when Sluice cannot answer at all — ext_authz_error,
// ext_proc_error_… — have no body, and get one here.

// LocalReplyFilterCEL is the access-log extension filter a mapper matches
// with (envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter).
const LocalReplyFilterCEL = "envoy.access_loggers.extension_filters.cel"

// AnthropicPathRegex matches, as a whole, the :path of a request that
// speaks Anthropic's dialect: exactly the paths llmapi.DialectFor calls
// Anthropic (a query string allowed). A mapper's header_filter uses it to
// answer in Anthropic's error shape.
const AnthropicPathRegex = `/v1/(messages(/[^?#]*)?|complete)([?#].*)?`

// envoyReply is one kind of Envoy local reply and the error it becomes.
type envoyReply struct {
	// details is Envoy's response-code details (its
	// StreamInfo::ResponseCodeDetails); prefix says they start with it.
	details string
	prefix  bool
	status  int
	code    string
	message string
	// anthropic is Anthropic's own words for the reply, when it has them.
	anthropic string
}

// NoRoute is the error of the listener's last route, a direct response
// (details direct_response) to a request that reached the router without
// a routing header Sluice set: ext_proc did not run on it, or it names no
// configured provider.
var NoRoute = &apierr.Error{Status: 404, Code: apierr.CodeNoRoute,
	Message: "no provider route: this request was not routed by Sluice (it is not an LLM API path Sluice handles, or names no configured provider)"}

func envoyReplies(maxBody int64) []envoyReply {
	return []envoyReply{
		// The listener's buffer (max_request_body_bytes + a margin) is
		// full: FilterManager's requestDataTooLarge.
		{details: "request_payload_too_large", status: 413, code: apierr.CodeBodyTooLarge,
			message:   fmt.Sprintf("the request body is larger than %d bytes, the most this gateway accepts", maxBody),
			anthropic: fmt.Sprintf("Request exceeds the maximum size (the request body is larger than %d bytes, the most this gateway accepts)", maxBody)},
		// The route's timeout, or a retry's per-try timeout (router.cc,
		// onResponseTimeout / onPerTryTimeout).
		{details: "upstream_response_timeout", status: 504, code: apierr.CodeUpstreamTimeout,
			message: "the provider did not answer in time"},
		{details: "upstream_per_try_timeout", status: 504, code: apierr.CodeUpstreamTimeout,
			message: "the provider did not answer in time"},
		// No host to send to, or the connection failed or was reset
		// before a response started (router.cc, onUpstreamReset: the
		// details end in {reason}).
		{details: "no_healthy_upstream", status: 503, code: apierr.CodeUpstreamUnavailable,
			message: "the provider is unavailable: no healthy endpoint"},
		{details: "upstream_reset_before_response_started", prefix: true, status: 503, code: apierr.CodeUpstreamUnavailable,
			message: "the provider is unavailable: the connection failed or was reset before a response"},
		// Sluice itself cannot be reached (fail closed): ext_authz's
		// failure reply (ext_authz.cc, RcDetails AuthzError; its status is
		// Authz's status_on_error), ext_proc's (Filter::onGrpcError in
		// ext_proc.cc: "ext_proc_error_gRPC_error_<code>{<message>}", its
		// status ExtProc's status_on_error — the one the client gets when
		// both fail, since ext_authz's reply runs through ext_proc) and
		// ext_proc's message timeout (Filter::onMessageTimeout, always 504).
		// Envoy sends them without a body.
		{details: "ext_authz_error", status: 503, code: apierr.CodeGatewayUnavailable,
			message: "the gateway's policy service is unavailable; retry"},
		{details: "ext_proc_error_gRPC_error_", prefix: true, status: 503, code: apierr.CodeGatewayUnavailable,
			message: "the gateway's policy service is unavailable; retry"},
		{details: "ext_proc_error_per-message_timeout_exceeded", status: 504, code: apierr.CodeGatewayTimeout,
			message: "the gateway's policy service did not answer in time; retry"},
		// The connection manager refused the path before any filter ran
		// (ConnectionManagerImpl::ActiveStream::decodeHeaders on
		// maybeNormalizePath's Reject, conn_manager_utility.cc): an
		// escaped slash or backslash (%2F, %5C) with
		// path_with_escaped_slashes_action REJECT_REQUEST, a path
		// normalize_path cannot canonicalize (an escaped NUL), or a
		// fragment. Envoy sends it without a body. The code is the one
		// Sluice's own path classification answers with.
		{details: "path_normalization_failed", status: 400, code: apierr.CodeNonCanonicalPath,
			message: "the request path is not canonical: it holds a percent-encoded slash or backslash, a fragment, or a character no path may hold"},
		// The listener's no-provider route. Its body is already OpenAI's
		// JSON, but a direct response gets content-type text/plain
		// (Utility::prepareLocalReply sets it when no header did), and an
		// Anthropic client needs Anthropic's shape.
		{details: "direct_response", status: NoRoute.Status, code: NoRoute.Code, message: NoRoute.Message},
	}
}

// LocalReply is the connection manager's local_reply_config: for each of
// Envoy's own local replies a client can get on Sluice's listener, a
// mapper answering in Anthropic's error shape on Anthropic's paths, then
// one answering in OpenAI's shape everywhere else, with content-type
// application/json. maxBody is gateway.max_request_body_bytes, which the
// 413's message states. Replies whose details no mapper names (Sluice's
// own among them) pass through unchanged.
func LocalReply(maxBody int64) *hcmv3.LocalReplyConfig {
	cfg := &hcmv3.LocalReplyConfig{}
	for _, r := range envoyReplies(maxBody) {
		e := &apierr.Error{Status: r.status, Code: r.code, Message: r.message, AnthropicMessage: r.anthropic}
		cfg.Mappers = append(cfg.Mappers,
			&hcmv3.ResponseMapper{
				Filter: &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{AndFilter: &accesslogv3.AndFilter{
					Filters: []*accesslogv3.AccessLogFilter{detailsFilter(r), anthropicPathFilter()},
				}}},
				BodyFormatOverride: jsonBody(apierr.Body(llmapi.Anthropic, e)),
			},
			&hcmv3.ResponseMapper{Filter: detailsFilter(r), BodyFormatOverride: jsonBody(apierr.Body(llmapi.OpenAI, e))},
		)
	}
	return cfg
}

// DetailsExpression is the CEL expression matching Envoy's response-code
// details d exactly, or those starting with d.
func DetailsExpression(d string, prefix bool) string {
	if prefix {
		return "response.code_details.startsWith('" + d + "')"
	}
	return "response.code_details == '" + d + "'"
}

func detailsFilter(r envoyReply) *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ExtensionFilter{ExtensionFilter: &accesslogv3.ExtensionFilter{
		Name: LocalReplyFilterCEL,
		ConfigType: &accesslogv3.ExtensionFilter_TypedConfig{TypedConfig: anyOf(&celv3.ExpressionFilter{
			Expression: DetailsExpression(r.details, r.prefix),
		})},
	}}}
}

func anyOf(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic("chain: " + err.Error()) // only fixed, known message types
	}
	return a
}

func anthropicPathFilter() *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_HeaderFilter{HeaderFilter: &accesslogv3.HeaderFilter{
		Header: &routev3.HeaderMatcher{
			Name: ":path",
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: AnthropicPathRegex}},
			}},
		},
	}}}
}

// jsonBody is a fixed body: a text_format with no command operators (no
// '%': the messages above hold none, and TestLocalReply checks it) and an
// explicit content type, so the bytes are exactly apierr.Body's.
func jsonBody(b []byte) *corev3.SubstitutionFormatString {
	return &corev3.SubstitutionFormatString{
		Format:      &corev3.SubstitutionFormatString_TextFormat{TextFormat: string(b)},
		ContentType: "application/json",
	}
}
