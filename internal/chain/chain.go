package chain

import (
	"regexp"
	"time"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Filter names as they appear in the HttpConnectionManager.
const (
	AuthzFilterName   = "envoy.filters.http.ext_authz"
	ExtProcFilterName = "envoy.filters.http.ext_proc"
	// UpstreamCodecFilterName is the terminal filter of an upstream HTTP
	// filter chain (Envoy requires it last).
	UpstreamCodecFilterName = "envoy.filters.http.upstream_codec"
)

// Namespaces of dynamic metadata.
const (
	// AuthzNamespace is where Envoy puts ext_authz's metadata (the
	// principal); ext_proc receives it through forwarding_namespaces.
	AuthzNamespace = "envoy.filters.http.ext_authz"
	// UsageNamespace is where ext_proc's final reply puts token counts and
	// cost, for access logs and apply_on_stream_done rate limits
	// (receiving_namespaces). Fields are documented in docs/architecture.md.
	UsageNamespace = "sluice"
)

// RoutingHeader is the request header ext_proc sets to the provider's name
// after choosing it (or, for a model whose providers are tried in order, to
// policies.FallbackClusterPrefix + the model's name); the route
// configuration matches on it. The upstream processor removes it, so no
// provider ever sees it.
const RoutingHeader = "x-sluice-provider"

// RequestIDHeader is the response header in which the downstream
// processor gives the client the gateway's id of its request: the
// x-request-id Envoy set on the request, which access logs and the spend
// record's client_request_id carry. The response's own x-request-id is
// the provider's, passed unchanged (the listener does not set
// always_set_request_id_in_response).
const RequestIDHeader = "x-sluice-request-id"

// Fallback attempts. Each attempt of a fallback request runs, in the
// upstream filter chain of the model's aggregate cluster (Envoy builds an
// attempt's upstream filters from the route's cluster, never from the
// aggregate's member the host came from: envoyproxy/envoy#29318), an
// ext_proc (UpstreamExtProc) whose gRPC stream carries the initial metadata
// UpstreamMetadataKey. That stream is served by the upstream processor: it
// learns the attempt's provider from the attempt's upstream host
// (UpstreamHostProviderAttribute, below), and the client's path and the
// model from the dynamic metadata the downstream processor left
// (FallbackPathKey in UsageNamespace; the header map is shared by all
// attempts, so the :path an attempt sees may be a previous attempt's
// rewrite). It rewrites the request for that provider and adds the
// served-by headers to its response; the downstream ext_proc reads them
// (to meter and record the provider that answered) and removes them before
// the response reaches the client.
const (
	// UpstreamMetadataKey is the gRPC initial-metadata key that marks an
	// upstream ext_proc stream (value UpstreamMetadataValue).
	UpstreamMetadataKey   = "x-sluice-upstream"
	UpstreamMetadataValue = "fallback"
	// AttemptCountHeader is the request header in which Envoy numbers the
	// attempts of a request, from 1 (include_request_attempt_count); the
	// attempt removes it, so no provider sees it.
	AttemptCountHeader = "x-envoy-attempt-count"
	// FallbackPathKey and FallbackAnthropicVersionKey are the dynamic
	// metadata fields (namespace UsageNamespace) in which the downstream
	// processor leaves, for the attempts, the :path the client sent and
	// whether it sent anthropic-version itself.
	FallbackPathKey             = "fallback_client_path"
	FallbackAnthropicVersionKey = "fallback_client_anthropic_version"
	// ServedByHeader is the response header naming the provider that
	// answered.
	ServedByHeader = "x-sluice-served-by"
	// ServedModelHeader is the response header naming the model sent to
	// that provider (its upstream name).
	ServedModelHeader = "x-sluice-served-model"
	// FallbackModelKey is the dynamic metadata field (namespace
	// UsageNamespace) in which the downstream processor names the model it
	// routed to the fallback cluster.
	FallbackModelKey = "fallback_model"
	// FallbackSignatureKey is the dynamic metadata field (namespace
	// UsageNamespace) holding the handoff's signature
	// (internal/principal, ForHandoff), without which an attempt is
	// refused and no credential is sent.
	FallbackSignatureKey = "fallback_sig"
)

// PrincipalSignatureKey is the field of ext_authz's dynamic metadata
// (AuthzNamespace) holding the principal's signature (internal/principal,
// ForPrincipal, over key_id, team and org and the request's x-request-id).
// ext_proc refuses a principal without a valid one. No access log format
// names it.
const PrincipalSignatureKey = "sig"

// The attempt's provider, from its upstream host. An aggregate cluster
// skips members without healthy hosts when it spreads load over the
// priorities (source/extensions/clusters/aggregate/cluster.cc), so an
// attempt's number does not name its member: attempt 1 goes to the second
// member when the first has no healthy host. Every endpoint of a provider's
// clusters carries the provider's name in its metadata
// (EndpointMetadataNamespace, EndpointProviderKey; xds builds it), and the
// upstream ext_proc asks Envoy for it as a request attribute
// (UpstreamHostProviderAttribute): a CEL expression over
// xds.upstream_host_metadata, the metadata of the host the attempt's
// UpstreamRequest was created for (source/common/router/upstream_request.cc
// sets it on the stream info before the upstream filters run;
// source/extensions/filters/common/expr/context.cc reads it), which
// ext_proc evaluates for the first request-direction message — the request
// headers — and sends in ProcessingRequest.attributes under
// ExtProcAttributesKey, a string value keyed by the expression itself
// (EP/matching_utils.cc: a CEL string stays a string).
const (
	EndpointMetadataNamespace     = "sluice"
	EndpointProviderKey           = "provider"
	UpstreamHostProviderAttribute = "xds.upstream_host_metadata.filter_metadata['" + EndpointMetadataNamespace + "']['" + EndpointProviderKey + "']"
	// ExtProcAttributesKey is the key of ProcessingRequest.attributes under
	// which Envoy's ext_proc puts the attributes it evaluated.
	ExtProcAttributesKey = "envoy.filters.http.ext_proc"
)

// Timeouts. ext_authz answers from memory; the ext_proc final reply waits
// for the spend record's group commit (a few ms), so its message timeout
// has headroom over Envoy's 200 ms default.
//
// ExtProcMaxTimeout is the filter's max_message_timeout: the most a reply
// carrying only override_message_timeout may give Envoy's running timer
// (envoy-protocol.md §1.3). Sluice sends one when the final reply's
// ledger Append has not returned ExtProcTimeout − ExtProcMargin after the
// message arrived (extproc/server.go); the margin covers Envoy-to-Sluice
// delivery and scheduling under load, so that the override reaches Envoy
// before its timer fires. 5 s leaves room for a stalled ledger's bounded
// wait (internal/ledger/hold, 2 s) and keeps the client from waiting much
// longer than the provider took (docs/architecture.md, "When the ledger is
// slow or cannot take records").
const (
	AuthzTimeout       = 200 * time.Millisecond
	ExtProcTimeout     = 500 * time.Millisecond
	ExtProcMaxTimeout  = 5 * time.Second
	ExtProcMargin      = 200 * time.Millisecond
	MaxRequestBodySize = 4 << 20 // default body limit; the listener's buffer must be at least this
)

// Options are the knobs of the chain that depend on deployment.
type Options struct {
	// Cluster is the name of the Envoy cluster of Sluice's gRPC service.
	Cluster string
	// Authority is the :authority of the filters' gRPC calls to Cluster.
	// Empty: Envoy's default, the cluster name, which must then be a valid
	// host. Istio's cluster names (outbound|9001||sluice.ns.svc.cluster.local)
	// are not, so the Istio manifest sets the Service's host here, as
	// istiod does for its own ext_authz providers.
	Authority string
	// FailOpen lets requests through when Sluice is unreachable (both
	// filters' failure_mode_allow). Default false: fail closed.
	FailOpen bool
	// NoStatusOnError: the Envoy predates ext_proc's status_on_error
	// (1.36; envoy/README.md, "Envoy versions"), which it would ignore as
	// an unknown field, answering 500 when Sluice cannot be reached.
	// ExtProc and UpstreamExtProc leave it out, and the listener's
	// local_reply_config sets the status instead (PinExtProcStatus).
	NoStatusOnError bool
	// NoFallback: the Envoy is served no fallback cluster (xds withholds
	// them from releases that cannot run them). ExtProc's stream then
	// carries the initial metadata FallbackMetadataKey, and the processor
	// sends a fallback model's requests to its first provider.
	NoFallback bool
}

// Authz is Sluice's ext_authz filter configuration: gRPC, 200 ms, no body
// (the key is in the headers), 503 when Sluice cannot answer (a
// retryable status, where Envoy's default 403 would read as "forbidden").
func Authz(o Options) *extauthzv3.ExtAuthz {
	return &extauthzv3.ExtAuthz{
		Services:            &extauthzv3.ExtAuthz_GrpcService{GrpcService: grpcService(o, AuthzTimeout)},
		TransportApiVersion: corev3.ApiVersion_V3,
		FailureModeAllow:    o.FailOpen,
		StatusOnError:       &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
	}
}

// ExtProc is Sluice's ext_proc filter configuration. The modes are chosen
// for the fewest round trips correctness allows (docs/architecture.md,
// "Processing modes"):
//   - request headers SEND: the path (which API), and the caller's
//     credentials when ext_authz is absent, arrive here;
//   - request body BUFFERED: the model is in the body, and routing must
//     happen while headers are still held — a BUFFERED body reply's
//     header_mutation and clear_route_cache re-route (envoy-protocol.md
//     §1.4), where a STREAMED one could not;
//   - response headers SEND: status, content type and encoding decide how
//     the body is metered;
//   - response body STREAMED: each chunk is metered and answered at once,
//     and the final reply carries the usage metadata;
//   - response trailers SEND: a response that ends in trailers delivers no
//     body chunk with end_of_stream (envoy-protocol.md §4), so its end is
//     the trailers message, sent only when trailers arrive (no round trip
//     for any other response) and after every chunk was answered; the
//     request is settled there and that reply carries the usage metadata;
//   - request trailers SKIP (the body is read whole before them).
//
// When Sluice cannot be reached it fails closed (unless Options.FailOpen)
// with 503, as ext_authz does: Envoy's default status_on_error is 500, and
// ext_authz's failure reply runs through ext_proc's encode path
// (FilterManager::sendLocalReplyViaFilterChain), where ext_proc's own
// stream fails too and its status_on_error is what the client gets
// (Filter::onGrpcError in ext_proc.cc, a second local reply, sent
// directly).
func ExtProc(o Options) *extprocv3.ExternalProcessor {
	gs := grpcService(o, 0)
	if o.NoFallback {
		gs.InitialMetadata = []*corev3.HeaderValue{{Key: FallbackMetadataKey, Value: FallbackMetadataWithheld}}
	}
	return &extprocv3.ExternalProcessor{
		GrpcService:      gs,
		FailureModeAllow: o.FailOpen,
		StatusOnError:    statusOnError(o),
		ProcessingMode: &extprocv3.ProcessingMode{
			RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
			RequestBodyMode:     extprocv3.ProcessingMode_BUFFERED,
			RequestTrailerMode:  extprocv3.ProcessingMode_SKIP,
			ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
			ResponseBodyMode:    extprocv3.ProcessingMode_STREAMED,
			ResponseTrailerMode: extprocv3.ProcessingMode_SEND,
		},
		MessageTimeout:    durationpb.New(ExtProcTimeout),
		MaxMessageTimeout: durationpb.New(ExtProcMaxTimeout),
		MetadataOptions: &extprocv3.MetadataOptions{
			ForwardingNamespaces: &extprocv3.MetadataOptions_MetadataNamespaces{Untyped: []string{AuthzNamespace}},
			ReceivingNamespaces:  &extprocv3.MetadataOptions_MetadataNamespaces{Untyped: []string{UsageNamespace}},
		},
	}
}

// HTTPFilters returns the filters Sluice needs before the router, in
// order: ext_authz, then ext_proc.
func HTTPFilters(o Options) []*hcmv3.HttpFilter {
	return []*hcmv3.HttpFilter{
		filter(AuthzFilterName, Authz(o)),
		filter(ExtProcFilterName, ExtProc(o)),
	}
}

// UpstreamExtProc is the ext_proc filter configuration of the upstream HTTP
// filter chain of a fallback model's aggregate cluster: one stream per
// attempt, marked by the gRPC initial metadata UpstreamMetadataKey. Modes:
// request headers SEND (with the host's provider; the routing and
// attempt-count headers are removed there), request body BUFFERED (the model is in the body, and the
// rewritten body and its headers go out together), response headers SEND
// (the served-by headers are added), response body NONE, trailers SKIP.
// Same cluster and message timeout as ExtProc; UsageNamespace is forwarded
// (the client's path, left by the downstream processor), nothing is
// received (the upstream processor never meters).
//
// It always fails closed, whatever Options.FailOpen says, with 503: an
// attempt Sluice could not rewrite would reach the provider without its
// credential and with the client's model name, so it could never succeed.
//
// It asks for UpstreamHostProviderAttribute, the provider of the host the
// attempt goes to, which names the attempt's provider.
func UpstreamExtProc(o Options) *extprocv3.ExternalProcessor {
	gs := grpcService(o, 0)
	gs.InitialMetadata = []*corev3.HeaderValue{{Key: UpstreamMetadataKey, Value: UpstreamMetadataValue}}
	return &extprocv3.ExternalProcessor{
		GrpcService:       gs,
		RequestAttributes: []string{UpstreamHostProviderAttribute},
		ProcessingMode: &extprocv3.ProcessingMode{
			RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
			RequestBodyMode:     extprocv3.ProcessingMode_BUFFERED,
			RequestTrailerMode:  extprocv3.ProcessingMode_SKIP,
			ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
			ResponseBodyMode:    extprocv3.ProcessingMode_NONE,
			ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
		},
		MessageTimeout: durationpb.New(ExtProcTimeout),
		StatusOnError:  statusOnError(o),
		MetadataOptions: &extprocv3.MetadataOptions{
			ForwardingNamespaces: &extprocv3.MetadataOptions_MetadataNamespaces{Untyped: []string{UsageNamespace}},
		},
		// Envoy refuses (silently ignores) mutations of x-envoy-* headers
		// unless the rules allow them
		// (source/extensions/filters/common/mutation_rules/mutation_rules.cc,
		// Checker::isAllowed), and the attempt's number must not reach the
		// provider: allow exactly that one header, nothing else of Envoy's.
		MutationRules: &mutationrulesv3.HeaderMutationRules{
			AllowExpression: &matcherv3.RegexMatcher{Regex: "^" + regexp.QuoteMeta(AttemptCountHeader) + "$"},
		},
	}
}

// UpstreamHTTPFilters returns the upstream HTTP filter chain of a fallback
// model's aggregate cluster, in order: UpstreamExtProc, then the
// upstream_codec filter Envoy requires last.
func UpstreamHTTPFilters(o Options) []*hcmv3.HttpFilter {
	return []*hcmv3.HttpFilter{
		filter(ExtProcFilterName, UpstreamExtProc(o)),
		filter(UpstreamCodecFilterName, &upstreamcodecv3.UpstreamCodec{}),
	}
}

func filter(name string, cfg proto.Message) *hcmv3.HttpFilter {
	a, err := anypb.New(cfg)
	if err != nil {
		panic("chain: " + err.Error()) // only fixed, known message types
	}
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}}
}

func grpcService(o Options, timeout time.Duration) *corev3.GrpcService {
	s := &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: o.Cluster, Authority: o.Authority}}}
	if timeout > 0 {
		s.Timeout = durationpb.New(timeout)
	}
	return s
}
