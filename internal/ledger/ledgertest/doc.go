// Package ledgertest is the contract suite every ledger backend must pass
// (ledger/sqlite now, PostgreSQL later), in the manner of
// net/http/httptest: a backend's tests call Run with a function that opens
// a fresh, empty ledger. It also holds the fakes other packages test with:
// AppendFunc, a Ledger made of a function, and Memory, an in-memory Ledger
// and Reader that passes the suite itself.
//
// It asserts only what the ledger interfaces promise, never a backend's
// internals (SQL, files, batching), and it touches nothing but the ledgers
// it is given.
package ledgertest
