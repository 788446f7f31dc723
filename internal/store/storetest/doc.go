// Package storetest is the contract suite every store.Store backend must
// pass (store/sqlite now, PostgreSQL later), in the manner of
// net/http/httptest: a backend's tests call Run with a function that opens
// a fresh, empty store.
//
// It asserts only what the store.Store interface promises, never a
// backend's internals (file layout, SQL, consecutive revisions), and it
// touches nothing but the stores it is given.
package storetest
