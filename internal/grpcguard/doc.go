// Package grpcguard keeps one request from taking the process down: its
// gRPC unary and stream interceptors recover a panic in a per-call or
// per-stream handler, log it at error level with the call's identity (the
// method, the peer, and whatever the handler attached with Identify —
// ext_proc attaches the request's x-request-id and path), count it in
// sluice_panics_total{service}, and fail that call alone with
// codes.Internal, so that Envoy applies the filter's failure mode while
// every other stream and the process keep running.
//
// It owns recovery and nothing else: it must not know the services it
// guards (the service label is the gRPC service name of the method) and
// never logs request bodies or credentials — Identify is for identifiers.
package grpcguard
