// Package envoyrules is the table of the checks Envoy makes when it loads
// a configuration that the protoc-gen-validate rules (ValidateAll) do not
// express: a configuration can pass ValidateAll and still be refused by
// Envoy, or be accepted with a field Envoy never reads. Each Rule names
// the message it applies to, the Envoy source file and function it
// follows, what Envoy does (Severity) and a check that returns Envoy's own
// error text. The source was read through an index holding several
// revisions of each file, without their dates; where revisions differed
// the newest was taken (the absl::Status form of the constructors, the
// fields of go-control-plane envoy v1.40.0). A rule whose check Envoy has
// since relaxed would refuse what a newer Envoy accepts: the FULL_DUPLEX
// fail-closed rule is the one most likely to move.
//
// Sluice's control plane (xds.Validate, xds.ValidateSet) and the Envoy
// emulator (envoy/envoytest) both run this one table, so Sluice refuses to
// serve, and the emulator refuses to load, what a real Envoy refuses. The
// package must not import either of them; it imports only Envoy's API.
//
// Walk is the one traversal of a configuration: every message inside a
// root, maps in key order, each google.protobuf.Any unpacked, with its
// Path (rendered only on demand, e.g.
// filter_chains[0].filters[0].typed_config(envoy…HttpConnectionManager).stat_prefix).
// Check walks with a Checker, which runs the table; xds.Validate walks
// once with its own Visitor, which also runs PGV and reports the Anys that
// cannot be unpacked, and a Checker inside it.
//
// # Severity
//
// Refused: Envoy rejects the resource (an xDS NACK, or exit for a
// bootstrap). Ignored: the field is marked [#not-implemented-hide:] in
// Envoy's API and the code that consumes the message never reads it, so it
// has no effect in Envoy. Both are reported; what a caller does with an
// Ignored violation is its policy: xds.Validate treats it as an error
// (Sluice must never emit a field that does nothing — system_root_certs
// was one: the trust store it names is never loaded), while the emulator
// loads the resource, as Envoy does, and logs a warning.
//
// # What the table covers
//
//   - TLS (CommonTlsContext, UpstreamTlsContext): SAN matchers, a CRL or
//     allow_expired_certificate in an inline validation context without
//     trusted_ca (CertificateValidationContextConfigImpl::initialize); a
//     NUL byte in sni and more than one client certificate
//     (ClientContextConfigImpl).
//   - Static secrets, in a bootstrap (the one place where a context and
//     the secrets it names are both known): a TLS context naming a
//     certificate or validation-context secret without sds_config that
//     static_resources.secrets does not define ("Unknown static secret",
//     getTlsCertificateConfigProviders, getProviderFromSds); a static
//     validation-context secret that, merged under a combined validation
//     context's default_validation_context, has SAN matchers, a CRL or
//     allow_expired_certificate without trusted_ca
//     (getCombinedValidationContextConfig, then
//     CertificateValidationContextConfigImpl::initialize).
//   - [#not-implemented-hide:] fields of the messages Sluice emits or the
//     emulator loads, each checked against the code that consumes the
//     message: system_root_certs, ca_certificate_provider_instance and
//     require_signed_certificate_timestamp of CertificateValidationContext;
//     the certificate-provider fields of CommonTlsContext and of its
//     combined validation context; path_normalization_options and
//     represent_ipv4_remote_address_as_ipv4_mapped_ipv6 of the connection
//     manager; async_mode, request_attributes and response_attributes of
//     ExtProcOverrides — all Ignored; typed_header_validation_config of the
//     connection manager and header_validation_config of the upstream
//     HttpProtocolOptions — Refused by release builds, which are built
//     without universal header validation.
//   - The connection manager: a terminal filter (router) that is not last,
//     a non-terminal one (ext_authz, ext_proc) that is, in the HTTP and
//     upgrade filter chains; a disabled last filter; duplicate upgrade
//     types; max_response_headers_kb; both strip-port modes; original IP
//     detection with use_remote_address or xff_num_trusted_hops;
//     access_log_options with the deprecated flush fields; an HTTP/3 codec
//     on a non-QUIC listener and the reverse.
//   - Clusters: eds_cluster_config on a non-EDS cluster;
//     max_requests_per_connection on both the cluster and its
//     HttpProtocolOptions; lb_policy CLUSTER_PROVIDED on a cluster that
//     provides no load balancer, and an aggregate cluster without it;
//     upstream HTTP filters that do not end with upstream_codec, or that
//     have a terminal filter before the end.
//   - Routes: duplicate domains across a configuration's virtual hosts and
//     a second "*"; an inline direct-response body over
//     max_direct_response_body_size_bytes (default 4096); more than one
//     path rewrite in a route; duplicate upgrade types and a
//     connect_config on a non-CONNECT upgrade.
//   - ext_proc: exactly one of grpc_service and http_service;
//     disable_clear_route_cache with a route_cache_action; an http_service
//     with body or trailer modes; FULL_DUPLEX_STREAMED without the matching
//     trailer mode SEND, or with failure_mode_allow.
//   - ext_authz: a gRPC service without transport_api_version V3;
//     allowed_headers both on the filter and in http_service.
//   - Every RegexMatcher compiles (RE2 syntax).
//   - Across a resource set (CheckSet): duplicate cluster and listener
//     names; the clusters of a route configuration that validates them —
//     one inline in a connection manager (validate_clusters defaults to
//     true there), or any with validate_clusters true.
//
// # Cross-references Envoy does not check at load
//
// These are run-time outcomes, not load errors, so they are not rules:
//
//   - A route naming a cluster that does not exist, in a route
//     configuration served over RDS (validate_clusters defaults to false):
//     the request gets 503, flag NC, details cluster_not_found
//     (source/common/router/router.cc, Filter::decodeHeaders).
//   - An aggregate cluster naming a member that does not exist: the member
//     is skipped when the priority set is linearised ("the included cluster
//     doesn't exist … could be added dynamically by xDS",
//     source/extensions/clusters/aggregate/cluster.cc); with no member
//     left the request gets 503 no_healthy_upstream.
//   - A connection manager's RDS route_config_name that is not served: the
//     listener warms until the route configuration arrives or the config
//     source's initial_fetch_timeout (15 s) passes, then serves with no
//     routes (404, NR).
//   - An EDS cluster whose ClusterLoadAssignment is not served: it warms
//     the same way, then has no hosts (503, UH).
//   - An ext_authz or ext_proc grpc_service naming a cluster that does not
//     exist: ext_authz creates its client with skip_cluster_check
//     (config.cc, getOrCreateRawAsyncClientWithHashKey(…, true)) and
//     ext_proc opens its stream per request, so each request fails:
//     ext_authz answers status_on_error (403 by default), ext_proc 500
//     (status_on_error), unless failure_mode_allow.
//
// Sluice's own xds.Snapshot checks all of these anyway (checkRefs): its
// policy is stricter than Envoy's.
//
// # Not covered
//
// What needs the file system or a parser this module lacks: file
// contents (a trusted_ca file that is empty or not PEM, certificates and
// keys), CEL expressions (ext_proc request_attributes, the CEL access-log
// filter), RE2 program sizes, cipher suites and curves. What Envoy checks
// in extension factories Sluice does not use. A TLS context of a resource
// served over xDS that names a static secret: whether the secret exists,
// and what it holds, is in a bootstrap the resource's checker does not
// see (a cluster naming a missing one is NACKed: "Unknown static
// secret").
package envoyrules
