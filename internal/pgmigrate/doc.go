// Package pgmigrate applies a component's numbered, expand-only schema
// migrations to PostgreSQL and checks, at start-up, that the schema is the
// one the code needs. Each component (the store, the ledger) passes its own
// list; the version each has reached is a row of sluice_schema.
//
// Migrate applies what is pending in one transaction holding the
// component's pg_advisory_xact_lock, so concurrent migrators queue and the
// second finds nothing left to do; a transaction lock, unlike a session
// lock, survives a transaction-pooling proxy. The lock is taken with
// pg_try_advisory_xact_lock, each attempt in a transaction of its own, and
// waited for in Go: a migrator blocked inside PostgreSQL would hold a
// snapshot, and a CREATE INDEX CONCURRENTLY run by the lock's holder waits
// for every older snapshot to end, so the two would wait for each other
// forever, unseen by PostgreSQL's deadlock detector.
//
// A Concurrently statement is built on a second connection while the
// locking transaction waits idle (it holds no snapshot, so the build does
// not wait for it). If that transaction has taken a write lock on any
// table in this run (created sluice_schema or a table, altered or wrote
// one), the index is built inside it instead: a session waiting for that
// lock would hold a snapshot the build waits for. So an index on a table
// with rows goes in a migration of its own, whose SQL is empty. A build
// that fails has its INVALID index dropped.
//
// It must not know any component's schema, and it never drops, renames or
// rewrites anything but an index its own failed build left INVALID.
package pgmigrate
