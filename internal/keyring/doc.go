// Package keyring owns the in-memory replica of every API key, team and org
// Sluice knows — those declared in sluice.yaml and those managed in the
// store — and the resolution of a presented key's hash into a Principal.
//
// The replica is rebuilt copy-on-write whenever the policy snapshot or the
// store's change feed changes, and read lock-free on the hot path, so
// resolving a key never waits on a database and a flood of unknown keys
// costs only a hash and a map lookup. Follow polls the store's change feed,
// which is how a key revoked by another process stops working within a
// second.
//
// It must not touch HTTP, gRPC or the decision itself (authz decides what a
// revoked key or an exhausted limit means for the caller).
package keyring
