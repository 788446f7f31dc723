// Package spool is what both ledger backends put between an answered
// request and their database: Append's queue and group commit (Run), the
// spool file that makes a batch durable with one write and one fdatasync
// before the final ext_proc reply, and the ingester that moves spooled
// records into the database (a Sink) in larger transactions, retrying
// with backoff while the database is down or slow.
//
// A Sink is the database: Prepare validates and encodes a record, a
// Writer stores a batch in one transaction (a RequestID already stored
// skipped, so replay is idempotent) and says which record is to blame
// when one is. The SQLite ledger (internal/ledger/sqlite) and the
// PostgreSQL ledger (internal/ledger/postgres) are each a Sink and their
// reads around one Ledger of this package.
//
// Open replays what the spool holds into the sink, resynchronizing past
// damaged frames and keeping a damaged spool aside, then rewinds it; a
// spool rewinds only once the sink holds all of it. Degraded says when
// new requests should be refused: the disk is full and the spool writes
// into its reserve, or the sink is behind by more than Options.MaxBytes.
// Visible makes a read wait until the sink holds what was acknowledged
// before it; a Reader (sluice spend beside a server) inserts what the
// spool holds itself. Only one Ledger writes a spool, by a lock.
//
// spool.go documents the file's layout and replay; ingest.go the
// ingester. It prices nothing and sums nothing: the sink does.
package spool
