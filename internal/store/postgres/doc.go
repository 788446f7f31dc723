// Package postgres is the fleet's store.Store backend: keys, teams and
// orgs in PostgreSQL (pgx v5), shared by every replica, with the
// store-wide revision that Changes follows.
//
// Revisions come from a one-row counter that every write transaction
// updates first (UPDATE … SET rev = rev + n RETURNING rev). Its row lock
// orders the writers: the next writer takes its revision only once the
// previous one has committed, so revisions become visible in commit order
// and a reader's snapshot always holds every revision up to the highest
// it sees. A sequence would not: a writer that took revision 5 and
// commits after the writer that took 6 would appear after a follower had
// read 6 and moved its `since` past 5, and the follower would never see
// it.
//
// Each write transaction also sends NOTIFY sluice_store with its last
// revision, delivered at commit (and dropped on rollback). A Listener
// LISTENs on a connection of its own and wakes a follower, which still
// polls Changes regardless: the poll is what a missed notification falls
// back to.
//
// The schema is the "store" component's, in pgmigrate migrations: Open
// only checks it (a replica never migrates by surprise), Migrate applies
// it. Times are integer Unix nanoseconds, 0 for unset, as in store/sqlite,
// because timestamptz keeps only microseconds.
//
// It owns its tables (store_*) and nothing else in the database: no policy
// decisions, no caching of records (keyring does that), and it never sees
// a secret, only its SHA-256 hash and public prefix.
package postgres
