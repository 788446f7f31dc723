package xds

// Envoy extension types are resolved by type URL from the global protobuf
// registry, which holds only the packages linked into the binary. Without
// these imports protojson cannot parse an "@type" naming them and Validate
// cannot unpack the Any that carries them (go-control-plane has no "all
// extensions" package). This is the list of every extension type Sluice
// emits in xDS resources or ships in manifests (envoy/istio, the
// bootstraps); add a line here whenever a new one is used.
//
// The resource types themselves (Listener, Cluster, RouteConfiguration,
// ClusterLoadAssignment) are not extensions; the code that builds them
// imports them.
import (
	// envoy.access_loggers.file — the listener's JSON access log line
	// (xds.access_log, default /dev/stdout).
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	// envoy.access_loggers.extension_filters.cel — the CEL filter of the
	// listener's local_reply_config mappers (chain.LocalReply), matching
	// Envoy's own local replies by their response-code details. Package
	// chain imports it too.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	// envoy.access_loggers.stdout and .stderr — the stream loggers, the
	// alternative to a file path for containers.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	// envoy.clusters.aggregate — the sluice.fallback.<model> cluster over a
	// model's providers in priority order.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	// envoy.filters.http.ext_authz — Sluice's authorization filter
	// (chain.Authz; in envoy/istio/sluice-envoyfilter.yaml). Package chain
	// imports it too; it is listed so that this list is complete.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	// envoy.filters.http.ext_proc — Sluice's processing filter
	// (chain.ExtProc; in the Istio manifest), and the upstream ext_proc of
	// the .fallback member clusters.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	// envoy.filters.http.router — the last HTTP filter of every chain.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	// envoy.filters.http.upstream_codec — the last filter of the
	// .fallback member clusters' upstream HTTP filter chain.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	// envoy.filters.network.http_connection_manager — the listeners' (and
	// the gRPC api_listener's) network filter.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	// envoy.resource_monitors.fixed_heap — the overload manager's heap
	// monitor in a bootstrap with a heap limit (BootstrapOptions.MaxHeapBytes).
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/fixed_heap/v3"
	// envoy.retry_priorities.previous_priorities — moves each retry of a
	// fallback route to the next provider of the aggregate cluster.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	// envoy.transport_sockets.tls — UpstreamTlsContext of https provider
	// clusters (SNI, system trust bundle).
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	// envoy.extensions.upstreams.http.v3.HttpProtocolOptions — HTTP/1.1 or
	// HTTP/2 per cluster (typed_extension_protocol_options): HTTP/2 to
	// sluice.extension (also in the Istio manifest), explicit_http_config
	// and the upstream HTTP filters of provider clusters.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)
