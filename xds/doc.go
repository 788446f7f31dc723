// Package xds is Sluice's xDS control plane. It turns each compiled
// policies.Snapshot into Envoy resources (Build: a cluster per provider,
// fallback member and aggregate clusters, Sluice's own cluster (over TLS
// with xds.extension_tls), one route configuration routing on
// chain.RoutingHeader, and the listener whose filters are
// chain.HTTPFilters then the router — or an api_listener for proxyless
// gRPC clients, which run no Sluice filter and so get the provider routes
// and clusters only with xds.proxyless: routing_only, and otherwise a
// virtual host without routes), validates them before they are served
// (Snapshot: deep proto validation into every Any, Envoy's load-time rules
// from envoy/envoyrules for resources served to Envoy, Consistent, and
// cross-references), and serves them over ADS, state-of-the-world and
// delta, with go-control-plane (Server).
//
// Server keeps one cache entry per node, all nodes of a group and variant
// sharing one immutable snapshot; a variant is the node's flavour and, for
// an Envoy, the features its release runs (envoyversion.go: NodeVersion,
// FeaturesOf, BuildFor; envoy/README.md, "Envoy versions"), so an Envoy too
// old for fallback or status_on_error is served the config without it,
// with a warning, and one older than MinEnvoy is refused. Its callbacks
// detect NACKs, which go-control-plane ignores, and pin the node to the
// version it accepted so the rejected one is not resent in a loop, and it
// warns once per proxyless node that is served no routes. Bootstrap prints the Envoy bootstrap that points an
// Envoy at this server, over the same TLS.
//
// It must not make per-request decisions: that is authz's and extproc's.
// docs/architecture.md ("The control plane") describes the resources.
package xds
