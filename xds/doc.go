// Package xds will own Sluice's xDS control plane (go-control-plane, ADS,
// state-of-the-world and delta): provider clusters, routes on Sluice's
// routing header, and the listener whose filter chain is ext_authz →
// ext_proc → router, validated before it is served.
//
// It holds no code yet; docs/architecture.md says what exists. It will build
// from policies.Snapshot and must not make per-request decisions.
package xds
