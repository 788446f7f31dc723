// Package tlsserve owns the server side of TLS and mTLS on Sluice's gRPC
// (ext_authz, ext_proc) and xDS ports: it loads a certificate chain, its
// key and an optional client CA bundle from PEM files, reloads them when
// they change on disk (a bad change is logged, counted, and the last good
// set keeps serving), and hands out a tls.Config and gRPC transport
// credentials that read the current set at every handshake, so rotated
// certificates and CAs apply to new connections without a restart.
//
// With a client CA bundle it verifies client certificates itself, so that
// every refusal has a reason (no_certificate, untrusted,
// identity_not_allowed), a warn log line naming the peer, and a count in
// sluice_tls_refused_total{server,reason}.
//
// It must not touch the services it protects, the config file's shape
// (the app maps policies.ServerTLS onto Options) or Envoy's side of the
// TLS (xds emits that), and it never logs key material.
package tlsserve
