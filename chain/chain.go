// Package chain owns the HTTP filter chain Sluice asks Envoy to run in
// front of the router — the ext_authz and ext_proc filter configurations —
// in one place: the emulator tests build their bootstraps from it now, and
// the xDS server serves it later. Changing a mode, a timeout or a namespace
// here changes it everywhere.
//
// It must not hold request logic; it only describes configuration.
package chain

import (
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Filter names as they appear in the HttpConnectionManager.
const (
	AuthzFilterName   = "envoy.filters.http.ext_authz"
	ExtProcFilterName = "envoy.filters.http.ext_proc"
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
// after choosing it; the route configuration matches on it.
const RoutingHeader = "x-sluice-provider"

// Timeouts. ext_authz answers from memory; the ext_proc final reply waits
// for the spend record's group commit (a few ms), so its message timeout
// has headroom over Envoy's 200 ms default.
const (
	AuthzTimeout       = 200 * time.Millisecond
	ExtProcTimeout     = 500 * time.Millisecond
	MaxRequestBodySize = 4 << 20 // default body limit; the listener's buffer must be at least this
)

// Options are the knobs of the chain that depend on deployment.
type Options struct {
	// Cluster is the name of the Envoy cluster of Sluice's gRPC service.
	Cluster string
	// FailOpen lets requests through when Sluice is unreachable (both
	// filters' failure_mode_allow). Default false: fail closed.
	FailOpen bool
}

// Authz is Sluice's ext_authz filter configuration: gRPC, 200 ms, no body
// (the key is in the headers), 503 when Sluice cannot answer (a
// retryable status, where Envoy's default 403 would read as "forbidden").
func Authz(o Options) *extauthzv3.ExtAuthz {
	return &extauthzv3.ExtAuthz{
		Services:            &extauthzv3.ExtAuthz_GrpcService{GrpcService: grpcService(o.Cluster, AuthzTimeout)},
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
//   - trailers SKIP.
func ExtProc(o Options) *extprocv3.ExternalProcessor {
	return &extprocv3.ExternalProcessor{
		GrpcService:      grpcService(o.Cluster, 0),
		FailureModeAllow: o.FailOpen,
		ProcessingMode: &extprocv3.ProcessingMode{
			RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
			RequestBodyMode:     extprocv3.ProcessingMode_BUFFERED,
			RequestTrailerMode:  extprocv3.ProcessingMode_SKIP,
			ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
			ResponseBodyMode:    extprocv3.ProcessingMode_STREAMED,
			ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
		},
		MessageTimeout: durationpb.New(ExtProcTimeout),
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

func filter(name string, cfg proto.Message) *hcmv3.HttpFilter {
	a, err := anypb.New(cfg)
	if err != nil {
		panic("chain: " + err.Error()) // only fixed, known message types
	}
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}}
}

func grpcService(cluster string, timeout time.Duration) *corev3.GrpcService {
	s := &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster}}}
	if timeout > 0 {
		s.Timeout = durationpb.New(timeout)
	}
	return s
}
