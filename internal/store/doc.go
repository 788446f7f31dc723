// Package store owns the records of principals managed at runtime — API
// keys, teams and orgs — and the Store interface every backend satisfies.
// Backends live in sub-packages (store/sqlite; PostgreSQL later) and all pass
// the contract suite in store/storetest.
//
// A store never sees a secret: keys are stored by SHA-256 hash and public
// prefix. Policy decisions (is this key allowed, is it rate limited) belong
// to keyring, limits and authz, not here.
package store
