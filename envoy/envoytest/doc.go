// Package envoytest is an Envoy EMULATOR: test and demo infrastructure that
// plays Envoy's part on the wire so that Sluice's ext_authz and ext_proc
// services, and its xDS configuration, can be exercised end to end on
// machines where no Envoy binary can be installed. It is never a
// production proxy, and says so at start-up (Banner).
//
// It is configured with real Envoy protos — a bootstrapv3.Bootstrap with
// one listener whose http_connection_manager runs ext_authz and ext_proc
// filters and then the router, and the clusters they name — so the same
// configuration runs on a real Envoy (StartRealEnvoy does that when an
// envoy binary is on PATH). What it cannot emulate it refuses at load with
// an error naming the field, never silently.
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
//     local replies reach ext_proc, as since v1.37). Byte-level chunk
//     splits (mid-event, mid-rune) are produced by the mock provider
//     (bench/mockllm, x-mock-split) and pass through the router unchanged:
//     the router turns each upstream read into one frame, as Envoy's codec
//     does. Compressed bodies pass through undecoded (no decompressor
//     filter is emulated).
//   - The router: TestRouterMatching, TestRouterFailures,
//     TestConfigRefusesWhatItCannotEmulate.
//
// # The router
//
// Supported: virtual hosts by domain (exact, "*", "*.suffix", "prefix*");
// route matches on prefix or path plus header matchers (exact, prefix,
// present, invert); actions cluster, cluster_header and weighted_clusters
// with a timeout (default 15 s, 0 disables), or direct_response; STATIC,
// STRICT_DNS, LOGICAL_DNS and EDS clusters over plain HTTP/1.1 or HTTP/2
// (h2c), round robin over endpoints. Local replies: 404 no route, 503 no
// cluster / no endpoint / connect failure, 504 route timeout.
//
// Not supported, and why: regex and query-parameter matches, retries and
// retry policies, hedging, redirects, rewrites, per-try timeouts, health
// checks, outlier detection and circuit breakers (Sluice's routes do not
// need them yet; retries arrive with the xDS work); TLS to upstreams and on
// the listener (TLS to real providers is Envoy's job); request trailers are
// not forwarded upstream.
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
//     names is evaluated (extProcAttribute); others are skipped, as Envoy
//     skips an expression that fails to evaluate.
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
//   - Local replies of filters do not run through the encoder chain, so
//     ext_proc never sees response_headers for another filter's local reply
//     or for its own 413/500 overflow reply (UNCONFIRMED in §4). Router local
//     replies do run through it.
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
package envoytest
