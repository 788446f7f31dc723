// Package extproc owns Sluice's envoy.service.ext_proc.v3 server: for each
// HTTP request Envoy streams to it, a processor resolves the caller (from
// ext_authz's metadata, or from the request headers through authz when
// ext_authz is not in the chain), reads the request body once (payload),
// checks the model against the key's and team's allow-lists, routes it to
// a provider (the routing header plus clear_route_cache in the BUFFERED
// body reply, the only place that re-routes), rewrites the body where the
// upstream model name differs or streaming usage must be forced on, swaps
// the caller's credential for the provider's, admits the request
// (admission), meters the streamed response (usage), and on the final
// chunk — or on cancellation — settles: the spend record is durable in the
// ledger before the final reply, which carries the usage as dynamic
// metadata in namespace "sluice". docs/architecture.md describes the state
// machine.
//
// Processor is transport-free (ProcessingRequest in, ProcessingResponse
// out); Server is the stream loop. It must not own policy, keys, counters
// or storage; it uses them through the interfaces it declares.
package extproc
