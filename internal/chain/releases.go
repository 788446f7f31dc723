package chain

// What the chain does for Envoy releases that lack a feature it uses
// (Options.NoStatusOnError, Options.NoFallback). Which release has what is
// xds's to decide, from the node's version (envoy/README.md, "Envoy
// versions").

import (
	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// FallbackMetadataKey is the gRPC initial-metadata key of the downstream
// ext_proc stream of an Envoy that was served no fallback cluster (value
// FallbackMetadataWithheld): the processor then routes a fallback model
// to its first provider, as a single-provider model, instead of to the
// fallback cluster such an Envoy does not have. Only Sluice's own xDS
// config sets it; a client cannot (Envoy opens the stream).
const (
	FallbackMetadataKey      = "x-sluice-fallback"
	FallbackMetadataWithheld = "withheld"
)

// The response-code details of ext_proc's own failure replies (envoyReplies
// holds their mappers): a gRPC error (Filter::onGrpcError in
// source/extensions/filters/http/ext_proc/ext_proc.cc, a prefix) and the
// message timeout (Filter::onMessageTimeout).
const (
	extProcGRPCErrorDetails = "ext_proc_error_gRPC_error_"
	extProcTimeoutDetails   = "ext_proc_error_per-message_timeout_exceeded"
)

// statusOnError is ext_proc's status_on_error: 503, a retryable status,
// unless the Envoy predates the field.
func statusOnError(o Options) *typev3.HttpStatus {
	if o.NoStatusOnError {
		return nil
	}
	return &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}
}

// PinExtProcStatus sets the status_code of cfg's mappers for ext_proc's
// failure replies (a LocalReply config) to the status those replies have
// on a current Envoy: 503 for a gRPC error, 504 for a message timeout.
// It is for an Envoy without ext_proc's status_on_error (before 1.36),
// which answers a gRPC error with a hard-coded 500 (Filter::onGrpcError),
// and, before 1.31, a message timeout with 500 too (changelogs/1.31.0.yaml:
// "Timeout errors in external processor now returns 504"): the mapper,
// which already gives these replies their JSON body, rewrites the status
// (ResponseMapperImpl::matchAndRewrite in
// source/common/local_reply/local_reply.cc), so the client gets the same
// retryable 503 or 504 as from a current Envoy, never a 500 whose body says
// "retry". It changes no other mapper. The mappers it changes match on the
// details alone, not the status (byStatus): the reply they rewrite still
// has the old release's 500 (TestPinExtProcStatus).
func PinExtProcStatus(cfg *hcmv3.LocalReplyConfig) {
	status := map[string]uint32{}
	for _, r := range envoyReplies(0) {
		if r.details == extProcGRPCErrorDetails || r.details == extProcTimeoutDetails {
			status[r.expression()] = uint32(r.status)
		}
	}
	for _, m := range cfg.GetMappers() {
		if s, ok := status[celExpression(m.GetFilter())]; ok {
			m.StatusCode = wrapperspb.UInt32(s)
		}
	}
}

// celExpression is the expression of the CEL extension filter of a
// mapper's filter (alone, or inside its and_filter), or "".
func celExpression(f *accesslogv3.AccessLogFilter) string {
	if and := f.GetAndFilter(); and != nil {
		for _, sub := range and.GetFilters() {
			if e := celExpression(sub); e != "" {
				return e
			}
		}
		return ""
	}
	ext := f.GetExtensionFilter()
	if ext.GetName() != LocalReplyFilterCEL {
		return ""
	}
	cel := &celv3.ExpressionFilter{}
	if err := ext.GetTypedConfig().UnmarshalTo(cel); err != nil {
		return ""
	}
	return cel.GetExpression()
}
