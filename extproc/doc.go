// Package extproc owns Sluice's envoy.service.ext_proc.v3 server. For
// each HTTP request Envoy streams to it, a processor resolves the caller
// (from ext_authz's signed metadata, the key checked again: principal.go;
// or through authz when ext_authz is not in the chain), reads the body
// once (payload), checks the model against the allow-lists, chooses and
// routes to a provider (the routing header plus clear_route_cache in the
// BUFFERED body reply), rewrites the request for it and forces streaming
// usage on, admits the request (admission), meters the response (usage),
// and on its end — or on cancellation — settles: the spend record, whose
// UUIDv7 identity is generated here at admission, is durable in the
// ledger before the final reply, which carries the usage as dynamic
// metadata in namespace "sluice".
//
// The request body is handled in named steps — resolve, authorize,
// rewrite, reserve — each returning a value or an *apierr.Error, and every
// refusal becomes an ImmediateResponse in one function (denial;
// refusal.go gives the provider's own words). Settling applies the
// charging rules as a pure function (charge) before pricing, the ledger,
// admission and metrics. A fallback model's request is rewritten on each
// attempt by the UpstreamProcessor of the aggregate cluster's upstream
// filter chain; everything the two processors exchange is defined once,
// in handoff.go. The usage chunk Sluice forced is taken out of the
// client's stream (usagechunk.go, internal/ssefilter); GET /v1/models is
// answered here (models.go); count_tokens and passed paths are forwarded
// unmetered (paths.go), input Sluice cannot see is bounded
// (unmetered.go); rate-limit headers are Sluice's (ratelimit.go).
//
// Processor and UpstreamProcessor are transport-free (ProcessingRequest
// in, ProcessingResponse out); Server is the stream loop; Codec (codec.go)
// is the gRPC codec both services share: internal/wiredecode decodes, and
// past the request headers metadata_context and attributes, which Envoy
// forwards on every message, are skipped, because decoding was a large
// share of the service's CPU; replies use vtprotobuf under its build tag.
//
// docs/architecture.md, "ext_proc: the processor", describes all of this
// in full (endpoints, the steps, the target, the handoff, settling, a slow
// ledger, the usage chunk). Nothing here switches on a provider kind.
//
// It must not own policy, keys, counters or storage; it uses them through
// the interfaces it declares.
package extproc
