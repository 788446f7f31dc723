// Package load is the whole-service benchmark of Sluice's gRPC services:
// a driver that plays Envoy on the wire for the filter chain
// internal/chain defines, and a do-nothing server (the protocol's floor)
// to run the same sequence against.
//
// Per request the driver makes one ext_authz Check, then one ext_proc
// Process stream: request headers (with protocol_config), the buffered
// request body (one message, end_of_stream), response headers, then the
// response body as STREAMED mode sends it — one message for a JSON
// response, one per chunk for an SSE stream, the last with end_of_stream,
// each sent when the upstream delivers it without waiting for the
// previous chunk's reply, as Envoy pipelines them (see streamBody). For a
// fallback model it also plays the attempt's ext_proc stream of the
// upstream filter chain (see attempt). Every ext_proc message carries
// metadata_context with the namespaces Envoy forwards; every reply is
// checked for its type, and Envoy's message timer (chain.ExtProcTimeout)
// is run as Envoy runs it. What does not change between messages is
// encoded once and sent as bytes, and a reply is decoded only as far as
// the driver must read it (wire.go), so that the driver's own core does
// not cap the rate it offers; TestWireMessagesAreEnvoys holds the bytes
// to the messages built field by field.
//
// Connections are plaintext or, with Config.TLS, mTLS as Envoy's
// transport socket speaks it; the floor takes the same server
// certificate (FloorCredentials), and WriteCerts makes a throwaway CA
// and both sides' certificates.
//
// Runs are closed loop, open loop (capped in flight) or a ramp of open
// loop steps (RunRamp). Measurement reads the server's CPU time
// (utime+stime) and VmRSS from /proc/<pid>; see Result and RampStep for
// the JSON lines, Charts for the PNG charts drawn from them, and Median
// for the median run of each scenario and server over several runs.
//
// It owns nothing of Sluice's: it imports only chain's constants (and,
// in tests, internal/app to run a Sluice in process).
package load
