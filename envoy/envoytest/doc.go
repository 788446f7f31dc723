// Package envoytest is an Envoy EMULATOR: test and demo infrastructure that
// plays Envoy's part on the wire so that Sluice's ext_authz and ext_proc
// services, and its xDS configuration, can be exercised end to end on
// machines where no Envoy binary can be installed. It is never a
// production proxy, and says so at start-up (Banner).
//
// It is configured with real Envoy protos — a bootstrapv3.Bootstrap with
// one listener whose http_connection_manager runs ext_authz and ext_proc
// filters and then the router, and the clusters they name, given in
// static_resources or taken over ADS from an xDS server (see xDS below) —
// so the same configuration runs on a real Envoy (StartRealEnvoy does that when an
// envoy binary is on PATH). What it cannot emulate it refuses at load with
// an error naming the field, never silently.
//
// It also refuses what a real Envoy refuses at load and PGV does not
// express (a SAN matcher without trusted_ca, ext_authz without
// transport_api_version V3, a terminal filter out of place, …): New runs
// the envoy/envoyrules table, the one xds.Validate runs, over the bootstrap
// and its static resources, and every ADS response is run through it
// before it is used (rules.go). A refused violation fails New (with the
// emulator's own refusals after it, if there are any), or NACKs the
// response, with Envoy's message and the field's path; a [#not-implemented-hide:]
// field Envoy ignores is loaded, as Envoy loads it, with a warning in the
// log. Over ADS only the resources of the response's type are judged, so a
// route configuration that validates its clusters is judged when it loads,
// against the clusters then known. Tests: TestRulesRefuseBootstrap,
// TestRulesIgnoredFieldLoads, TestRulesNackADS (rules_test.go).
//
// The specification is ../shared/envoy-protocol.md; each behaviour follows
// the Envoy source lines cited there. Every request is recorded as an
// Exchange (every CheckRequest/CheckResponse, every ext_proc message in both
// directions with stream events, the upstream request, the status and
// response-code details, the final dynamic metadata) for golden tests.
//
// # Coverage
//
// Each test case names the envoy-protocol.md item it covers:
//
//   - §1 ext_proc: TestExtProc (extproc_test.go), one or more cases for
//     every item of §1.1–§1.10, and TestExtProcConfig for what is refused.
//   - §2 ext_authz: TestExtAuthzClient (authz_test.go): CheckRequest shape
//     (pseudo-headers, lower-case keys, comma-joined duplicates, numeric id,
//     path with query, host, protocol, addresses, context_extensions), no
//     check without a route, OK (value, append semantics, headers_to_remove
//     restrictions, query parameters, response_headers_to_add and
//     append_action, dynamic metadata and ext_authz_duration, clear route
//     cache), Denied (status, body, non-append headers only), Error
//     (status_on_error default and range, error_response, failure_mode_allow
//     and its header, timeout), with_request_body (buffering, 413, partial).
//   - §4 streaming: TestExtProc's §4 cases (chunk by chunk, last empty
//     chunk, client disconnect and upstream reset without end_of_stream,
//     timeouts after headers become resets, upstream 5xx before headers),
//     TestRouterStreamsChunkByChunk, TestRouterUpstreamResetMidBody,
//     TestRouterClientDisconnect, TestRouterLocalReplyReachesExtProc (router
//     local replies reach ext_proc, as since v1.37),
//     TestLocalReplyThroughEncoderFilters (every filter's local reply
//     does: see Local replies). Byte-level chunk
//     splits (mid-event, mid-rune) are produced by the mock provider
//     (bench/mockllm, x-mock-split) and pass through the router unchanged:
//     the router turns each upstream read into one frame, as Envoy's codec
//     does. Compressed bodies pass through undecoded (no decompressor
//     filter is emulated).
//   - The router: TestRouterMatching, TestRouterFailures,
//     TestConfigRefusesWhatItCannotEmulate; retries, aggregate clusters,
//     host rewriting, the route idle timeout and TLS clusters:
//     TestRouterRetries (router_retry_test.go); a cluster gone from the
//     configuration in force: TestClusterNotFoundAfterUpdate; circuit breakers:
//     TestRouterCircuitBreakers; outlier detection: TestRouterOutlier*;
//     a reset while the request still streams:
//     TestRouterResetWhileRequestStreams;
//     upstream filters: TestRouterUpstreamFilters
//     (router_upstream_test.go); refusals: TestRouterConfigRefusals.
//
// # The router
//
// Follows source/common/router/router.cc, retry_state_impl.cc and
// upstream_request.cc. Supported:
//
//   - Virtual hosts by domain (exact, "*", "*.suffix", "prefix*"); route
//     matches on prefix or path plus header matchers (exact, prefix,
//     present, invert); actions cluster, cluster_header (with
//     cluster_not_found_response_code) and weighted_clusters, or
//     direct_response.
//   - timeout (default 15 s, 0 disables), from the end of the request,
//     across retries; x-envoy-expected-rq-timeout-ms per attempt.
//   - retry_policy on the route or the virtual host: retry_on 5xx,
//     gateway-error, connect-failure, reset, refused-stream (Go's HTTP/2
//     client retries refused streams itself, so it never fires) and
//     retriable-status-codes; num_retries (default 1); per_try_timeout
//     (504 upstream_per_try_timeout, flag UT; a reset retried as "local
//     reset"); retry_back_off (full jitter, base 25 ms, max 10 x base by
//     default); retry_priority envoy.retry_priorities.previous_priorities
//     with update_frequency (attempted priorities excluded; once none is
//     left, they are forgotten). A retry happens only before response
//     headers have gone downstream. The request body is buffered for
//     retries up to per_connection_buffer_limit_bytes; past it retries are
//     given up (and, during a back-off, the request ends with 507
//     request_payload_exceeded_retry_buffer_limit). Flags: URX when retries
//     are exhausted, UO when max_retries overflows; a failed attempt with no
//     retry is 503 upstream_reset_before_response_started{<reason>} with
//     Envoy's reason ("remote connection failure|delayed connect error:
//     Connection refused", "connection timeout", "connection termination"
//     for an HTTP/1 connection closed, "remote reset" for HTTP/2) and body
//     ("retried and the latest reset reason: …" after retries). Every
//     attempt is recorded in Exchange.Attempts.
//   - request_headers_to_remove of the route, the virtual host and the
//     route configuration (TestRouterRemovesRequestHeaders): removed from
//     the request the router forwards, after the route was chosen (a route
//     may match on a header it removes) and before the host rewrite and the
//     upstream filters, as RouteEntryImplBase::finalizeRequestHeaders does;
//     ":"-prefixed names and host are refused at load, as Envoy's
//     HeaderParser refuses them. (Envoy removes them from the downstream
//     header map itself; the emulator from the router's copy, so the
//     downstream filters' view is unchanged.)
//   - x-envoy-attempt-count in the request (virtual host
//     include_request_attempt_count) and in the response, including the
//     router's replies after the first attempt
//     (include_attempt_count_in_response).
//   - host_rewrite_literal, and auto_host_rewrite per attempt: the
//     selected host's endpoint.hostname, or for STRICT_DNS / LOGICAL_DNS
//     the DNS name of its address; nothing for a host with neither. Both
//     with append_x_forwarded_host.
//   - The route's idle_timeout, which replaces the connection manager's
//     stream_idle_timeout when the route is chosen (0 turns the timer
//     off): see "The connection manager" below.
//   - The cluster is looked up when the router gets the request, in the
//     configuration in force then (router.cc, Filter::decodeHeaders:
//     getThreadLocalCluster), while the stream keeps the route table it
//     started with: a cluster that a newer configuration no longer has
//     gives 503 (cluster_not_found_response_code), details
//     cluster_not_found, flag NC. Otherwise a stream keeps using its own
//     configuration's cluster, an updated one's old version included.
//   - Clusters: STATIC, STRICT_DNS, LOGICAL_DNS, EDS (health_status:
//     UNHEALTHY/DRAINING/TIMEOUT hosts are unhealthy, DEGRADED degraded)
//     and envoy.clusters.aggregate (ClusterConfig.clusters, which must
//     exist and not be aggregates). Priorities and load follow Envoy's
//     LoadBalancerBase: per-priority health with the overprovisioning
//     factor (default 140), load spilling to lower priorities, panic
//     below 50% healthy (all hosts used), an aggregate's priority set the
//     linearised members' non-empty priorities; round robin within a
//     priority. HTTP/1.1 or HTTP/2 (h2c) by explicit_http_config, taken
//     from the selected host's cluster (an aggregate's member).
//   - Upstream HTTP filters (HttpProtocolOptions.http_filters: ext_proc
//     filters, envoy.filters.http.upstream_codec last): every attempt runs
//     the chain with a new ext_proc stream and the filter's
//     grpc_service.initial_metadata. As in Envoy (UpstreamRequest builds
//     it from the router's cluster), the chain is the ROUTE cluster's:
//     behind an aggregate cluster, the aggregate's own http_filters run for
//     every member and the members' http_filters never run. The chain
//     works on the stream's one request header map, so header mutations of
//     one attempt are still there at the next; each attempt gets the
//     router's buffered original body. clear_route_cache is ignored there;
//     dynamic metadata is the stream's; a local reply of an upstream filter
//     is the stream's local reply and is never retried. auto_host_rewrite
//     applies after the upstream filters (in Envoy it applies when the
//     connection is ready, which may be before or after them).
//   - Circuit breakers (thresholds of priority DEFAULT; defaults 1024 /
//     1024 / 1024 / 3): max_requests and max_pending_requests of the
//     selected host's cluster give an overflow (503
//     upstream_reset_before_response_started{overflow}, x-envoy-overloaded:
//     true, flag UO, no retry); max_retries of the route's cluster stops
//     retrying (flag UO). Approximations: an attempt counts against
//     max_requests from its start, not only once it holds a connection; it
//     is pending from its start until the Go transport hands it a
//     connection, and overflows when max_pending_requests attempts are
//     already pending (so max_pending_requests 0 overflows only behind
//     another pending attempt, where Envoy also refuses the first request
//     of a cold pool); max_connections bounds connections per host (Envoy:
//     per cluster), for HTTP/1.1 only.
//   - Outlier detection by consecutive errors: consecutive_5xx,
//     consecutive_gateway_failure, their enforcing_ percentages (defaults
//     100 and 0), base_ejection_time, max_ejection_time,
//     max_ejection_percent (and always_eject_one_host), interval (un-
//     ejection at interval ticks, computed when a host is picked; the
//     ejection backoff decreases at each tick), in Envoy's non-split mode:
//     a reset or connect failure counts as a 503, a timeout as a 504.
//     Accepted but NOT enforced: success_rate_minimum_hosts,
//     success_rate_request_volume, success_rate_stdev_factor,
//     enforcing_success_rate (the success-rate detector),
//     failure_percentage_threshold, failure_percentage_minimum_hosts,
//     failure_percentage_request_volume, enforcing_failure_percentage,
//     enforcing_failure_percentage_local_origin,
//     consecutive_local_origin_failure,
//     enforcing_consecutive_local_origin_failure,
//     enforcing_local_origin_success_rate (meaningful only with
//     split_external_local_origin_errors, which is refused),
//     max_ejection_time_jitter, successful_active_health_check_uneject_host
//     and monitors.
//   - Active gRPC health checking (healthcheck.go; one health_checks
//     entry, grpc_health_check): each host starts out failed and the
//     cluster is ready once every host has had its first check; a
//     grpc.health.v1.Health/Check on a connection of its own (HTTP/2,
//     the cluster's TLS; reuse_connection), :authority from authority,
//     the host's hostname or the cluster name, service_name; success only
//     for grpc-status 0 and SERVING; an answer that is not, or not gRPC,
//     fails a host at once (ACTIVE), a failed connection or reset
//     (NETWORK) or no answer within timeout (NETWORK_TIMEOUT) after
//     unhealthy_threshold in a row; a failed host is healthy again at its
//     first check or after healthy_threshold successes; interval,
//     unhealthy_interval, the edge intervals, no_traffic_interval and
//     no_traffic_healthy_interval (until the cluster has carried a
//     request), initial_jitter, interval_jitter and
//     interval_jitter_percent. A cluster whose definition an xDS update
//     leaves unchanged keeps its checker and its hosts' health. Refused:
//     other checkers, several checks, initial_metadata, tls_options,
//     transport_socket_match_criteria, event logs.
//   - gRPC services on an envoy_grpc cluster (ext_authz, ext_proc) pick a
//     host per call or stream through the cluster's load balancer (above:
//     active health, outlier ejection, panic), and report to its outlier
//     detector as the router does: 200 for an answer, a trailers-only
//     status's HTTP mapping (Grpc::Utility::grpcToHttpStatus), 503 for a
//     failed connection, 504 for a timeout. HTTP/2 connection_keepalive
//     is grpc-go's client keepalive (interval and timeout, PINGs with or
//     without streams; grpc-go pings no more often than every 10 s and
//     without interval_jitter); on other clusters it is not emulated.
//   - Transport sockets: envoy.transport_sockets.tls, an
//     UpstreamTlsContext (tls.go), spoken with crypto/tls and verified
//     exactly as far as the context asks, as Envoy's TLS socket does
//     (source/common/tls/): sni is sent as SNI (none when unset);
//     alpn_protocols are offered, or, without them, the cluster's
//     protocol ("h2" or "http/1.1": the HTTP connection pool's ALPN
//     fallback, conn_pool_base.cc), and the cluster's protocol is spoken
//     whatever the server picks (explicit_http_config; HTTP/2 with prior
//     knowledge); TLS 1.2 only, with Envoy's client cipher suites and
//     curves (ClientContextConfigImpl's defaults). A client certificate
//     (tls_certificates' certificate_chain and private_key, filename,
//     inline_string or inline_bytes; or a static secret named by
//     tls_certificate_sds_secret_configs) is sent when the server asks
//     for one. trusted_ca (filename, inline_string or inline_bytes; every
//     certificate of the bundle a trust anchor, as with
//     X509_V_FLAG_PARTIAL_CHAIN), inline or from a static secret named by
//     validation_context_sds_secret_config, verifies the chain for server
//     use, without a host name check; then
//     match_typed_subject_alt_names must match, any of them, a SAN of
//     their type: DNS (exact with Envoy's DNS rules — case-insensitive, a
//     wildcard SAN label covers one label — or prefix, suffix, contains,
//     ignore_case) or URI (a SPIFFE ID: the StringMatcher on the URI as
//     the certificate spells it) (san_matcher.cc). Without trusted_ca
//     nothing is verified and any certificate is accepted;
//     system_root_certs, which Envoy does not implement, is ignored.
//     Secrets named without sds_config are looked up among
//     static_resources.secrets, as SecretManagerImpl does. Files are read
//     when the cluster is built — at load, for a new version of the
//     cluster over CDS — not for a CDS update that leaves the cluster
//     unchanged, and never because a file changed (watched_directory acts
//     only on secrets delivered by SDS; tls.go). Refused at load as Envoy
//     refuses them: SAN matchers without trusted_ca, a bundle without a
//     certificate, a file that cannot be read, an unknown static secret,
//     more than one client certificate, a certificate without its key or
//     a key that is not its own. A failed handshake is a
//     connect failure (retried on connect-failure, counted by outlier
//     detection): 503 with details
//     upstream_reset_before_response_started{remote_connection_failure|<reason>}
//     and the TLS socket's failure reason (SslSocket::drainErrorQueue),
//     "TLS_error:|268435581:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED:<detail>:TLS_error_end"
//     with the validator's detail ("verify cert failed: X509_verify_cert:
//     certificate verification error at depth 0: unable to get local
//     issuer certificate", "verify cert failed: SAN matcher, certificate
//     SANs are [a, b]"), WRONG_VERSION_NUMBER when the server does not
//     speak TLS, the alert's name when the server sends one (e.g.
//     TLSV1_ALERT_NO_APPLICATION_PROTOCOL), the errno for a socket error.
//     Approximated: crypto/x509 stands in for X509_verify_cert (unknown
//     issuer, self-signed, validity, purpose and CA errors are mapped to
//     BoringSSL's texts and depths, others keep Go's words at depth 0);
//     the alert sent after a failed verification is always
//     bad_certificate; sessions are never resumed; a server that closes
//     mid-handshake leaves the failure reason empty. Refused: every other
//     UpstreamTlsContext, CommonTlsContext, TlsCertificate and
//     CertificateValidationContext field (tls_params, pkcs12, passwords,
//     key providers, SDS with sds_config, combined validation contexts,
//     hashes, CRLs, auto SNI, …) and SAN types other than DNS and URI. Any
//     other transport socket is refused. The same TLS carries the
//     emulator's own gRPC calls on an envoy_grpc cluster — ext_authz,
//     ext_proc, ADS (grpcconn.go): a failed handshake is a failed
//     connection, so a Check fails (failure_mode_allow or
//     status_on_error), an ext_proc stream fails to open
//     (status_on_error, ext_proc_error_gRPC_error_14{…}), and ADS gets no
//     configuration and keeps retrying, as for a server that is down.
//     Tests: TestUpstreamTLS, TestUpstreamTLSRetry, TestUpstreamTLSLoad
//     (tls_test.go); TestGRPCServiceTLS, TestExtProcTLS,
//     TestGRPCServiceTLSLoad, TestADSTLS,
//     TestGRPCTLSFilesPerClusterVersion (grpctls_test.go).
//
// Router local replies: 404 no route (NR), 503 no cluster (NC) or
// cluster_not_found_response_code, 503 no healthy upstream (UH), 503
// upstream reset / connect failure / overflow, 504 route or per-try
// timeout (UT); Exchange.ResponseFlags holds the flags in
// %RESPONSE_FLAGS% order.
//
// Not supported, refused at load naming the field: regex, query-parameter,
// runtime and grpc route matches; redirects, filter and non-forwarding
// actions; path, prefix, regex and header-based host rewrites;
// request_mirror_policies, hedge_policy, internal redirects,
// max_stream_duration, flush_timeout, metadata_match, route priority
// HIGH, retry_policy_typed_config, per_request_buffer_limit_bytes and
// request_body_buffer_limit (route and virtual host),
// include_is_timeout_retry_header, virtual host matcher; retry_on values
// other than those above (retriable-4xx, retriable-headers,
// envoy-ratelimited, reset-before-request, http3-post-connect-failure,
// gRPC codes), retry_host_predicate, retry_options_predicates,
// rate_limited_retry_back_off, retriable_headers,
// retriable_request_headers, per_try_idle_timeout; other cluster_types,
// lb_policy other than ROUND_ROBIN (CLUSTER_PROVIDED for an aggregate),
// load_balancing_policy, lb_subset_config, health checks other than
// grpc_health_check (above), transport_socket_matches; HttpProtocolOptions retry_policy,
// outlier_detection, request_mirror_policies and HTTP/3; upstream filters
// other than ext_proc; nested aggregate clusters; circuit-breaker
// retry_budget, max_connection_pools and per_host_thresholds;
// split_external_local_origin_errors and detect_degraded_hosts. TLS on
// the listener is refused.
// Not emulated, and not refused: request trailers are not forwarded
// upstream; request_headers_to_add, response_headers_to_add and
// response_headers_to_remove (route, virtual host, route configuration)
// are ignored; the x-envoy-retry-on / x-envoy-max-retries / … request headers
// are neither honoured nor removed; locality weights (round
// robin over hosts); the x-envoy-upstream-service-time header.
//
// # The connection manager
//
// What Envoy's connection manager and HTTP/1 codec answer themselves,
// before or around the filter chain (hcm.go, overload.go; each a local
// reply through local_reply_config):
//
//   - stream_idle_timeout (default 5 min), replaced by a route's
//     idle_timeout when the route is chosen (refreshIdleTimeout), reset by
//     the request and response frames passing: the stream's idle timer
//     (ActiveStream::onIdleTimeout) answers "stream timeout", details
//     stream_idle_timeout, flag SI, 408 while the client has not sent the
//     whole request and 504 once it has (Utility::maybeRequestTimeoutCode);
//     through the encoder filters, or directly, or — response headers
//     gone downstream — as a reset.
//   - request_timeout (default none): "request timeout", details
//     request_overall_timeout, 408 or 504 likewise; disarmed once the
//     router has the whole request or a response started.
//   - The HTTP/1 codec (ServerConnectionImpl::sendProtocolError, before
//     the stream has request headers, so no :path matches; DPE; the
//     connection closed after it): a method the Balsa parser does not
//     know (unless http_protocol_options.allow_custom_methods) or a
//     request-target byte outside its URL characters (any byte ≥ 0x80):
//     400 "Bad Request", http1.codec_error; a header block (request line
//     and header lines) over max_request_headers_kb (default 60 KiB): 431,
//     http1.headers_too_large; more headers than
//     common_http_protocol_options.max_headers_count (default 100): 431,
//     http1.too_many_headers. An h2c upgrade is served as a plain request
//     (the codec removes it). Over HTTP/2 a header block past either limit
//     is a stream reset, details http2.too_many_headers, no reply.
//   - The overload manager (the bootstrap's overload_manager): resource
//     monitor envoy.resource_monitors.fixed_heap, whose pressure is what
//     Emulator.SetResourcePressure sets (the emulator measures no heap),
//     threshold and scaled triggers, actions
//     envoy.overload_actions.stop_accepting_requests — every new request
//     shed with that action's probability: 503 "envoy overloaded", details
//     overload, before any filter — and shrink_heap (nothing to do).
//     Refused: other monitors and actions, loadshed_points,
//     buffer_factory_config, what OverloadManagerImpl refuses.
//   - HTTP/1.0 (and any HTTP/1.x but 1.1): 426 with no body, details
//     low_version, unless http_protocol_options.accept_http_10.
//   - An upgrade (connection: upgrade, upgrade: websocket): 403 with no
//     body, details upgrade_failed, through the encoder filters, none of
//     the decoder filters seeing the request.
//   - "connection: close" on an HTTP/1 response sent before the client
//     finished its request, after a 400 local reply or a refused upgrade
//     (ActiveStream::encodeHeaders on a closing connection).
//
// Refused at load: request_headers_timeout, upgrade_configs,
// common_http_protocol_options.max_stream_duration and a
// headers_with_underscores_action other than ALLOW. Not emulated, because
// Go's HTTP server, which parses requests for the emulator, answers them
// itself before the emulator sees them: invalid characters in a header
// name or value, a malformed request line or Content-Length, two
// Content-Lengths, HTTP/1.1 without Host (Go's own 400 "Bad Request",
// text/plain, where Envoy's codec answers 400 through local_reply_config:
// http1.codec_error, http1.invalid_characters); a transfer-encoding other
// than chunked (Go's 501, where Envoy answers 501
// http1.invalid_transfer_encoding); a header block over 1 MiB (Go's own
// 431). Go serves a request with both Content-Length and
// Transfer-Encoding: chunked, dropping the length, where Envoy answers 400
// http1.content_length_and_chunked_not_allowed. A body that breaks the
// chunked framing ends the stream as a client that went away
// (downstream_remote_disconnect); Envoy's codec answers it 400
// http1.codec_error, which ext_proc then holds while the codec closes
// the connection, so there too the client gets no reply. The stream's
// timers start when Go's server has read the request headers, where
// Envoy's start at their first byte; Go closes a connection whose headers
// take over 30 s (its ReadHeaderTimeout) without a reply. The header
// block's size is counted on the block as Go parsed it (whitespace around
// values and obsolete line folding not counted). Tests: TestHTTP1Codec,
// TestHTTP2HeaderOverflow, TestStreamTimeouts, TestOverloadManager,
// TestHCMRefusals (hcm_test.go).
//
// # Local replies
//
// A local reply — an ext_authz denial or error reply, the buffer limits'
// 413, an ext_proc ImmediateResponse or error, the router's replies, an
// upstream filter's reply — is sent as Envoy's
// DownstreamFilterManager::sendLocalReply sends it
// (source/common/http/filter_manager.cc): the response-code details are
// set first; while no response headers exist it goes through the filter
// chain (sendLocalReplyViaFilterChain): prepared (Utility::prepareLocalReply
// in source/common/http/utility.cc: local_reply_config's rewrite, then
// content-length and content-type) and encoded from the FIRST encoder
// filter (encodeHeaders(nullptr, …)), so every encoder filter sees it —
// ext_proc's encodeHeaders/encodeData (EPC: it opens its stream then if
// none is open, sends response_headers with the attributes and metadata it
// has, and removes content-length as shouldRemoveContentLength says unless
// processing is complete), the sender's own encoder side included — and
// no decoder filter runs again (decoder_filter_chain_aborted_); the
// router's response, if one still comes, is dropped. A local reply sent
// while response headers are in the encoder filters but none went
// downstream — ext_proc's ImmediateResponse to a local reply's headers, or
// its stream failing on them (onGrpcError: status_on_error, details
// ext_proc_error_gRPC_error_<code>{<message>}) — goes to the client
// directly (sendDirectLocalReply), local_reply_config applied, the
// encoder filters bypassed; once response headers went downstream the
// stream is reset. Tests: TestLocalReplyThroughEncoderFilters
// (localreply_chain_test.go).
//
// # Path normalization
//
// The connection manager's normalize_path, merge_slashes and
// path_with_escaped_slashes_action are applied as Envoy's
// ConnectionManagerUtility::maybeNormalizePath applies them
// (source/common/http/conn_manager_utility.cc, path_utility.cc, and the
// Chromium path canonicalizer Envoy links), before any filter: ext_authz's
// CheckRequest, ext_proc's :path and the upstream see the normalized path,
// and a request refused (an escaped slash under REJECT_REQUEST, a fragment,
// a NUL) gets a 400 local reply, details path_normalization_failed.
// UNESCAPE_AND_REDIRECT is refused at load. Tests: path_test.go.
//
// # Local replies (local_reply_config)
//
// Every local reply — the router's, the buffer limits' 413, and ext_authz
// denials and ext_proc ImmediateResponses — passes through the connection
// manager's local_reply_config before it is sent, as in Envoy
// (source/common/local_reply/local_reply.cc, LocalReplyImpl::rewrite, and
// source/common/http/utility.cc, Utility::sendLocalReply): the first
// mapper whose filter matches formats the body, and when the body changed
// its formatter's content type replaces the reply's; a reply with a body
// and no content-type gets text/plain, one without a body loses its
// content-type. A direct response is a local reply too (details
// direct_response). Implemented, the subset Sluice's listener uses
// (chain.LocalReply): mappers with a filter and a body_format_override
// whose text_format has no command operator ('%'), with any content_type;
// the filters and_filter, header_filter (string_match exact, prefix or
// safe_regex, matched on the whole value) and the CEL extension filter
// (envoy.access_loggers.extension_filters.cel) with exactly
// `response.code_details == '…'` or `response.code_details.startsWith('…')`,
// either optionally followed by `&& response.code == <status>` (the
// reply's status, set before the mappers are tried).
// Refused at load: body_format, a mapper's status_code, body and
// headers_to_add, json_format and every other format, every other filter
// and CEL expression. A gRPC request's trailers-only reply is not
// rewritten. Tests: TestLocalReplyConfig, TestLocalReplyConfigRefused,
// TestLocalReplyRewrite, TestLocalReplyStatusMatch (localreply_test.go).
//
// # Access logs (access_log)
//
// The connection manager's access_log is written when a stream ends, as
// Envoy writes it (accesslog.go has the rules and their sources):
// envoy.access_loggers.file (the path opened once, Write|Create|Append;
// /dev/stdout is a path) and envoy.access_loggers.stdout, each with
// log_format.json_format — keys sorted, a lone operator typed (numbers
// as numbers, a missing value null), mixed text a string with "-" for
// what is missing. Operators: START_TIME (default format), REQ,
// RESPONSE_CODE, RESPONSE_FLAGS, RESPONSE_CODE_DETAILS, UPSTREAM_CLUSTER,
// UPSTREAM_REQUEST_ATTEMPT_COUNT, DURATION, DYNAMIC_METADATA,
// BYTES_RECEIVED, BYTES_SENT. Refused at load, by name: every other
// operator, logger, filter and format. Envoy flushes the file about once
// a second; the emulator writes each line at once. Options.AccessLog is
// the emulator's own summary line, not Envoy's. Tests: TestAccessLogFormat,
// TestAccessLogRefused, TestAccessLogFile (accesslog_test.go),
// TestAccessLogEndToEnd (e2e).
//
// # Left out or approximated in ext_proc, and why
//
//   - FULL_DUPLEX_STREAMED and GRPC body modes are refused at config time
//     (filter and per-route), and a mode_override to them is ignored: they
//     need streamed_response bodies, flow-control windows and a different
//     failure model; nothing in Sluice uses them.
//   - http_service, processing_request_modifier, on_processing_response,
//     per-route grpc_service / grpc_initial_metadata overrides and cluster
//     metadata forwarding are refused at config time: Sluice uses none.
//   - Typed metadata: typed forwarding namespaces never match (the emulator
//     has no typed dynamic metadata); typed_dynamic_metadata is ignored.
//   - request_attributes / response_attributes are not CEL: a fixed set of
//     expressions is evaluated (compileAttribute), among them
//     xds.upstream_host_metadata.filter_metadata['ns']['key'], read from
//     the LbEndpoint metadata of the host of the stream's latest attempt
//     (in an upstream filter chain, its attempt's: EDS, STATIC and DNS
//     load assignments keep endpoint metadata on their hosts). Any other
//     expression is refused at load; one that does not evaluate (an absent
//     header or key, no upstream host yet) is skipped, as Envoy skips it.
//   - Header limits are Envoy's defaults (100 headers, 60 KiB).
//   - A route's ExtProcPerRoute replaces the virtual host's as a whole.
//   - Watermarks are emulated by not reading the filter's input.
//   - The graceful close (runtime ext_proc_graceful_grpc_close, off by
//     default) is not implemented.
//   - Closing: Envoy half-closes and resets at once, but its frames are
//     already in the connection buffer; grpc-go drops frames still queued
//     when a stream is cancelled, so the emulator waits up to 100 ms after
//     the half-close (less if the server ends the stream) before it
//     cancels. The record shows half-close and cancel where Envoy does them.
//   - In observability mode the deferred close happens after the Exchange
//     is recorded, so its events are not in the record.
//   - A direction's timer does not fire once processing is complete.
//
// Where Envoy's source and envoy-protocol.md differ, the emulator follows
// the source: an empty reply's details are unhandled_message; a disabled
// ImmediateResponse's are
// unhandled_immediate_response_due_to_config_disabled_it; disallow_is_error
// answers status_on_error; clear_route_cache in a BUFFERED_PARTIAL body
// reply does not re-route; a server setting both value and raw_value is an
// error.
//
// # Envoy versions
//
// Options.EnvoyVersion (MAJOR.MINOR.PATCH[-LABEL], default
// DefaultEnvoyVersion, the release of the Envoy API the module is built
// with) is the release the emulator plays. Its node reports it as Envoy
// does (source/server/server.cc): user_agent_build_version with the
// version and the metadata of VersionInfo::makeBuildVersion (build.label
// for a labelled build), unless the bootstrap's node sets a build version
// of its own; a bootstrap's user_agent_version string is replaced (the two
// are one oneof; Envoy never sends the string). A labelled build other
// than "contrib" ("1.36.0-dev") is older than the release it names.
// Emulated per release, for the features of envoy/README.md ("Envoy
// versions"): before 1.30.0 ext_proc is no upstream filter, and a cluster
// naming it in its upstream http_filters is refused at load ("Didn't find
// a registered implementation for …"); before 1.31.0 ext_proc's message
// timeout answers 500, not 504; before 1.36.0 ext_proc's status_on_error
// is an unknown field, ignored with a warning, and a gRPC error answers
// 500. Not emulated: the upstream host missing from an upstream filter's
// stream info before 1.31 (xds.upstream_host_metadata does not evaluate
// there), the router's handling of an upstream filter stopping in
// encodeHeaders on a 5xx retry before 1.37 (envoy#41879), router local
// replies skipping ext_proc in 1.34–1.36, and the TLS verification detail
// in the failure reason before 1.37 (always given). Tests:
// TestEnvoyVersionReported, TestEnvoyVersionUpstreamExtProc,
// TestEnvoyVersionExtProcFailures (version_test.go).
//
// # xDS
//
// A bootstrap with dynamic_resources — ads_config with api_type GRPC,
// transport_api_version V3 and one envoy_grpc service naming a static
// HTTP/2 cluster (plaintext, or TLS as its UpstreamTlsContext asks);
// lds_config and cds_config "ads: {}" — and a node with id and cluster
// makes the emulator a state-of-the-world ADS client, as
// Envoy's GrpcMuxImpl (grpc_mux_impl.cc). New starts nothing; Run holds
// the stream; Listen waits for the first complete configuration and binds
// the address its listener gives:
//
//	go e.Run(ctx)
//	ln, err := e.Listen(ctx)
//	go e.Serve(ctx, ln)
//
// XDSStatus and WaitXDS report the versions accepted and in force. Tests:
// TestADS, TestADSWarming, TestADSHoldsCDSAckWhileClustersWarm,
// TestADSReconnect, TestADSBootstrapRefused (ads_test.go), against
// go-control-plane's own sotw server and SnapshotCache. Emulated:
//
//   - One StreamAggregatedResources stream. The node, with user_agent_name
//     "envoy" (unless the bootstrap names one) and the emulated release as
//     user_agent_build_version (see Envoy versions), on every request (on
//     the first only with set_node_on_first_message_only);
//     grpc_service.initial_metadata.
//   - Subscriptions in Envoy's order: CDS (wildcard); EDS for the EDS
//     clusters (by service_name, else name); LDS (wildcard) once the
//     clusters are initialized — the first CDS update handled and its EDS
//     clusters' endpoints arrived, or cds_config.initial_fetch_timeout
//     (default 15 s) passed; RDS for the route_config_name of every
//     listener and of the listener in force. A request that a response
//     causes (EDS after CDS, RDS after LDS) goes out before its ACK.
//   - ACK: the response's version_info and nonce, the subscribed names.
//     NACK: the version last accepted for the type ("" if none), the
//     rejected nonce, error_detail with the message and code INTERNAL —
//     what Envoy sets whatever the cause — and the previous configuration
//     stays in force. Rejected: a resource of another type, one that does
//     not unpack or validate, two with one name, one that breaks a refused
//     rule of envoy/envoyrules, and whatever build
//     refuses: any CDS cluster, used or not, and the served listener with
//     its route configuration. An EDS cluster or an rds whose config
//     source is not ADS is refused too.
//   - State of the world: an LDS or CDS response replaces the whole set;
//     RDS and EDS responses replace the resources they name; resources no
//     longer subscribed are forgotten. CDS cannot replace a static
//     cluster: ignored, as in Envoy.
//   - Warming: a configuration is put in force, atomically (streams keep
//     theirs), only when complete — the served listener, its RDS route
//     configuration, every cluster its routes and its ext_authz / ext_proc
//     services name, the endpoints of each EDS cluster. A cluster whose new
//     version waits for endpoints stays in force in its previous one;
//     while a new listener warms, the listener in force takes route and
//     cluster updates (XDSStatus.Active.Listeners stays behind). After
//     initialization CDS stays paused while a cluster warms, so its ACK
//     goes once the clusters are warm or their eds_config
//     initial_fetch_timeout passed
//     (ClusterManagerImpl::updateClusterCounts).
//   - A broken stream is opened again after a jittered exponential backoff
//     (0.5 s doubling to 30 s, reset by a response), re-sending every
//     subscription in order with the versions last accepted and no nonce.
//
// The listener served is the first with an http_connection_manager in its
// filter chains, then that one by name while LDS keeps it. A listener with
// an api_listener is ignored with a warning: Envoy refuses api_listeners
// over LDS (ListenerManagerImpl::addOrUpdateListener: "can only be added
// via bootstrap configuration"), so a control plane must give Envoy a
// listener with filter_chains. Other listeners a real Envoy would run are
// ignored.
//
// Not emulated, and why (Sluice's control plane serves state-of-the-world
// ADS to one listener): delta xDS, REST, xdstp locators, google_grpc and
// non-ADS config sources, SDS, VHDS, scoped routes, static listeners
// beside LDS. Envoy puts a warming listener in force without routes
// (answering 404), and a cluster without hosts, once initial_fetch_timeout
// passes; the emulator keeps waiting, so a resource that never comes shows
// up as Listen not returning. Envoy applies the good listeners of an LDS
// update it rejects; the emulator rejects it whole. When LDS changes the
// listener's address Envoy binds the new one and drains the old listener;
// the emulator keeps serving the socket Serve was given, logs a warning,
// and ListenAddr reports the new address. A listener LDS removes keeps
// serving until another is complete. Each configuration put in force has
// its own upstream connections; the one it replaces closes them when its
// last stream ends. The NACK storm of SnapshotCache (envoy-protocol.md §5)
// is the server's to stop: the emulator NACKs every resend, as Envoy does.
package envoytest
