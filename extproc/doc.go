// Package extproc owns Sluice's envoy.service.ext_proc.v3 server: for each
// HTTP request Envoy streams to it, a processor resolves the caller (from
// ext_authz's metadata when its signature verifies for the request — the
// key then checked again: principal.go — or from the request headers
// through authz when ext_authz is not in the chain), reads the request body once (payload),
// checks the model against the key's and team's allow-lists, chooses the
// provider (the model's only one; for routing "weighted" one drawn by
// weight; for routing "priority" the model's fallback cluster), routes it
// (the routing header plus clear_route_cache in the BUFFERED body reply,
// the only place that re-routes), rewrites the request for the provider
// (model name, credential, path, anthropic-version) and forces streaming
// usage on, admits the request (admission), meters the streamed response
// (usage), and on the final chunk (or the response trailers, when the
// response ends in them) — or on cancellation — settles: the
// spend record is durable in the ledger before the final reply, which
// carries the usage as dynamic metadata in namespace "sluice". The
// record's identity is generated here when the request is admitted (a
// UUIDv7); the request's x-request-id is only stored beside it.
//
// A fallback model's request is rewritten for its provider not here but on
// each attempt, by the UpstreamProcessor that serves the ext_proc of the
// model's aggregate cluster's upstream filter chain (streams whose gRPC
// metadata carries chain.UpstreamMetadataKey): the attempt's upstream host
// names its provider, and the client's path comes from the dynamic
// metadata the downstream processor left, signed for the request; an
// attempt without a valid signature is refused before anything of a
// provider's is sent. It reports who
// answered in response headers that the downstream processor reads,
// removes, and meters with. Both apply the one provider rewrite
// (targetRewrite) and endpoint check (compatible), which only turn what
// the provider's kind decides (internal/provider, resolved when the
// policy compiled: policies.Provider.Impl) into Envoy's messages; nothing
// here switches on a provider kind. Everything the two exchange — the client's path and
// anthropic-version in dynamic metadata, the routing and attempt-count
// headers, the served-by headers — is defined once, in handoff.go.
//
// The request body is handled in named steps, each returning a value or
// an *apierr.Error (a content-length over gateway.max_request_body_bytes
// is refused before them, at the request headers: declaredTooLarge):
// resolve (size, parse, model), authorize (allow-lists,
// the weighted draw, endpoint compatibility, the unpriced-model policy),
// rewrite (provider rewrite, routing header, include_usage, the fallback
// handoff) and reserve (worst case, admission). Every refusal becomes an
// ImmediateResponse in one function (denial); the packages it calls
// refuse with the same *apierr.Error, and the refusals made here carry the
// provider's own words for them (refusal.go). The response headers of an
// admitted request get Sluice's rate-limit headers, one complete set per
// kind it limits, the provider's of those kinds renamed (ratelimit.go).
// Settling applies the charging rules as a pure function (charge: status,
// completeness, the meter's result and the request's output cap in, the
// charged usage, outcome and estimated flag out) before pricing, the
// ledger, admission and metrics.
// docs/architecture.md describes the state machine.
//
// The usage chunk Sluice forces is Sluice's, not the client's
// (usagechunk.go): a request whose include_usage is forced (forcesUsage)
// is sent with accept-encoding: identity, and each chunk of its
// unencoded, non-JSON response is metered as it came, then answered with
// a body mutation when internal/ssefilter changes it — the usage-only
// event removed, or the start of an event that may be one held back for
// the next chunk. A request that asked for usage itself, and a response
// the provider compressed anyway, pass untouched.
//
// Three kinds of request are not metered. GET /v1/models and
// /v1/models/{id} are answered here, from the request headers, with an
// ImmediateResponse listing the models and aliases the caller may use
// (mayUse, the allow-list check authorize makes) in OpenAI's shape, or
// Anthropic's when the request carries anthropic-version (models.go). POST
// /v1/messages/count_tokens goes through resolve, authorize and rewrite
// like /v1/messages and is then forwarded without reserve: no meter, no
// spend record. Under gateway.unknown_paths: pass, any other path is
// forwarded from its request headers to the provider gateway.pass_to
// names for its API (pass), with that provider's credential and its
// canonical path, nothing else changed; another spelling of a served
// endpoint's path is refused, never passed (paths.go).
//
// Processor and UpstreamProcessor are transport-free (ProcessingRequest in,
// ProcessingResponse out); Server is the stream loop. Codec is the gRPC
// codec of the server both services share (codec.go): protobuf, except
// that ProcessingRequests and CheckRequests are decoded by
// internal/wiredecode's hand-written decoder (proto.Unmarshal for what it
// does not fully understand), and that a ProcessingRequest other than
// the request headers is decoded without its metadata_context and
// attributes, which Envoy forwards on every message and Sluice reads
// only from the request headers; replies
// are marshalled with go-control-plane's vtprotobuf code when built with
// the vtprotobuf tag. It must not own
// policy, keys, counters or storage; it uses them through the interfaces it
// declares.
package extproc
