// Package principal signs and verifies what one part of Sluice hands
// another through Envoy: the principal ext_authz gives ext_proc (the
// key, its team and org), and the fallback handoff the downstream ext_proc
// gives each attempt's upstream ext_proc. Both travel as Envoy dynamic
// metadata, which any process that can open a gRPC stream to Sluice can
// forge; a provider credential is only ever sent in reply to a stream
// whose metadata carries a valid signature.
//
// A signature is HMAC-SHA256, under a fleet secret, over a purpose (so a
// principal's signature is never a handoff's), the request's x-request-id
// as Envoy generated it, the issue time and the signed fields. Keys holds
// the secrets: it signs with the first and accepts any, so a secret
// rotates without downtime.
//
// It owns the signature's format and its checks, nothing else: which
// fields are signed, where the signature travels and what a refusal
// answers belong to authz and extproc.
package principal
