package chain

import (
	"fmt"
	"strconv"

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
	// byStatus matches the status too, for details Envoy sends with more
	// than one status (a timeout is 408 before the request is complete,
	// 504 after): the body's type follows the status, so each status
	// needs its own mapper.
	byStatus bool
	status   int
	code     string
	message  string
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
		// The connection manager's stream idle timeout — the listener's
		// stream_idle_timeout until a provider route is chosen, then that
		// route's idle_timeout — and its request_timeout
		// (ConnectionManagerImpl::ActiveStream::onIdleTimeout and
		// onRequestTimeout, conn_manager_impl.cc): 408 while the client has
		// not sent the whole request, 504 once it has
		// (Utility::maybeRequestTimeoutCode). Once response headers went
		// out the stream is reset instead, with no reply.
		{details: "stream_idle_timeout", byStatus: true, status: 408, code: apierr.CodeRequestTimeout,
			message: "the client sent nothing for too long before the request was complete; send the whole request without pausing"},
		{details: "stream_idle_timeout", byStatus: true, status: 504, code: apierr.CodeUpstreamTimeout,
			message: "the provider sent nothing for too long (the stream idle timeout); retry"},
		{details: "request_overall_timeout", byStatus: true, status: 408, code: apierr.CodeRequestTimeout,
			message: "the request was not received in time (the gateway's request timeout); send it faster or in fewer bytes"},
		{details: "request_overall_timeout", byStatus: true, status: 504, code: apierr.CodeGatewayTimeout,
			message: "the gateway did not hand the request on in time (its request timeout); retry"},
		// The router found the route's cluster gone (router.cc,
		// Filter::decodeHeaders: getThreadLocalCluster fails; the route
		// configuration's cluster_not_found_response_code, 503 unless
		// set, which Sluice's routes leave). A stream keeps the route table
		// it started with, but looks clusters up when it is routed, so a
		// configuration change that removes a provider answers this to a
		// request already routed to it.
		{details: "cluster_not_found", status: 503, code: apierr.CodeProviderNotConfigured,
			message: "the provider this request was routed to is no longer configured (the configuration changed while the request was in flight); retry"},
		// The overload manager's stop_accepting_requests action
		// (ConnectionManagerImpl::ActiveStream::decodeHeaders: "envoy
		// overloaded", before any filter exists). The HTTP/1 codec's own
		// overload reply has the same details but status 500.
		{details: "overload", byStatus: true, status: 503, code: apierr.CodeGatewayOverloaded,
			message: "the gateway is overloaded and sheds new requests; retry after a pause"},
		// The HTTP/1 codec's protocol errors
		// (source/common/http/http1/codec_impl.cc,
		// ServerConnectionImpl::sendProtocolError, with the status in
		// error_code_ and the details in Http1ResponseCodeDetails). They
		// come while the request headers are parsed, before the stream
		// has any, so no :path matches and they are always in OpenAI's
		// shape. Past the headers (a bad chunk) ext_proc holds the reply
		// while the codec closes the connection: the client gets none.
		{details: "http1.headers_too_large", status: 431, code: apierr.CodeHeadersTooLarge,
			message: "the request headers are larger in total than this gateway accepts; send fewer or smaller headers"},
		{details: "http1.too_many_headers", status: 431, code: apierr.CodeHeadersTooLarge,
			message: "the request has more headers than this gateway accepts; send fewer headers"},
		{details: "http1.invalid_transfer_encoding", status: 501, code: apierr.CodeMalformedRequest,
			message: "the request's transfer-encoding is not supported: send the body with a content-length or chunked"},
		{details: "http1.", prefix: true, byStatus: true, status: 400, code: apierr.CodeMalformedRequest,
			message: "the request is not valid HTTP/1.1 (its request line or headers); check the method, the path's characters and the headers"},
		// An HTTP/1.0 request, which the connection manager answers
		// "Upgrade Required" unless http_protocol_options.accept_http_10
		// (ActiveStream::decodeHeaders, details low_version).
		{details: "low_version", status: 426, code: apierr.CodeHTTPVersion,
			message: "HTTP/1.0 is not supported: use HTTP/1.1 or HTTP/2"},
		// A protocol upgrade (Connection: upgrade, Upgrade: websocket) on a
		// listener with no upgrade_configs: FilterManager::createFilterChain
		// finds no upgrade filter chain and decodeHeaders answers 403
		// (details upgrade_failed) through the encoder filters.
		{details: "upgrade_failed", status: 403, code: apierr.CodeUpgradeRefused,
			message: "protocol upgrades (WebSocket) are not supported by this gateway; use plain HTTP requests"},
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
// details d exactly, or those starting with d, and, when status is not 0,
// the status too (response.code, which LocalReplyImpl::rewrite sets on
// the stream info before it tries the mappers).
func DetailsExpression(d string, prefix bool, status int) string {
	x := "response.code_details == '" + d + "'"
	if prefix {
		x = "response.code_details.startsWith('" + d + "')"
	}
	if status != 0 {
		x += " && response.code == " + strconv.Itoa(status)
	}
	return x
}

func (r envoyReply) expression() string {
	if r.byStatus {
		return DetailsExpression(r.details, r.prefix, r.status)
	}
	return DetailsExpression(r.details, r.prefix, 0)
}

func detailsFilter(r envoyReply) *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ExtensionFilter{ExtensionFilter: &accesslogv3.ExtensionFilter{
		Name: LocalReplyFilterCEL,
		ConfigType: &accesslogv3.ExtensionFilter_TypedConfig{TypedConfig: anyOf(&celv3.ExpressionFilter{
			Expression: r.expression(),
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
