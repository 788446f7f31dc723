// Package store owns the records of principals managed at runtime — API
// keys, teams and orgs — and the Store interface every backend satisfies.
// Backends live in sub-packages (store/sqlite; PostgreSQL later) and all pass
// the contract suite in store/storetest.
//
// A backend may also be a KeyStreamer: its full read, key by key, for a
// reader (keyring's first load) that indexes every key its own way and
// need not hold them all as Keys too.
//
// A store never sees a secret: keys are stored by SHA-256 hash and public
// prefix. Policy decisions (is this key allowed, is it rate limited) belong
// to keyring, limits and authz, not here.
package store
