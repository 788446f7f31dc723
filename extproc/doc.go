// Package extproc will own Sluice's envoy.service.ext_proc.v3 server: model
// allow-lists, routing, provider credentials, admission, and token and spend
// accounting on streamed bodies (design.md, "The request path", steps 2–3).
//
// It holds no code yet; docs/architecture.md says what exists. It will read
// the principal that authz returns (keyring.Principal.Metadata, namespace
// authz.MetadataNamespace) and must not touch key storage itself.
package extproc
