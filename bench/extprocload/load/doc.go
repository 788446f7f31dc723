// Package load is the whole-service benchmark of Sluice's gRPC services:
// a driver that plays Envoy on the wire for the filter chain
// internal/chain defines, and a do-nothing server (the protocol's floor)
// to run the same sequence against.
//
// Per request the driver makes one ext_authz Check, then one ext_proc
// Process stream: request headers (with protocol_config), the buffered
// request body (one message, end_of_stream), response headers, then the
// response body as STREAMED mode sends it — one message for a JSON
// response, one per chunk for an SSE stream, the last with end_of_stream.
// Every ext_proc message carries metadata_context with the ext_authz
// namespace Envoy forwards (chain.ExtProc's forwarding_namespaces). Every
// reply is checked for its type, and each must arrive within the filter's
// message timeout (chain.ExtProcTimeout), as Envoy enforces it.
//
// Measurement reads the server's CPU time (utime+stime) and VmRSS from
// /proc/<pid>; see Result for the JSON line each run prints.
//
// It owns nothing of Sluice's: it imports only chain's constants (and,
// in tests, internal/app to run a Sluice in process).
package load
