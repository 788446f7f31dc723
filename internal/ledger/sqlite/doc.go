// Package sqlite is the embedded ledger backend: the spend records in one
// SQLite file (modernc.org/sqlite, no cgo) of their own, apart from the key
// store's, written by group commit, with their aggregates (spend_agg,
// spend_life) in the same transactions.
//
// A record is durable when Append returns: the file runs in WAL mode with
// synchronous=FULL, and with Options.Spool (what serve runs) the
// committer makes each batch durable first in the spool beside the file,
// with one write and one fdatasync, and an ingester moves the records into
// SQLite in larger transactions: the queue, the committer, the spool and
// the ingester are internal/ledger/spool's, and this package is their
// Sink (committer.go) and the file's reads. Open replays what the spool holds, so a
// crash loses nothing acknowledged. Run, the committer, must be running
// for Append to return; Open starts no goroutine. Only one Ledger of a
// file writes it (the spool is locked); a Reader reads beside it.
//
// The committer's transaction is written to cost little per record,
// because under load it is where the ledger's CPU goes: it runs on the
// driver's connection with multi-row inserts, a large page cache and rare
// checkpoints, since with records over many keys each transaction touches
// a page per key; and every b-tree an insert changes takes it at its right
// edge (indexes led by the day), so a record costs the same however long
// the ledger's history. Group commit waits for no timer by default,
// because the commit's own duration is the batching window and a timer
// only adds latency.
//
// README.md beside this file is the design: the spool (layout in
// internal/ledger/spool/spool.go), replay and damage, the reserve for a full disk, migrations,
// the committer's statements and settings, and why each default is what it
// is. bench/README.md ("The embedded ledger's committer") has the figures
// and the commands that measured them.
//
// It owns the file's schema and nothing else: it must not price, budget or
// log (but for the damage Open finds in the spool, through
// Options.Logger); it stores and sums the records it is given.
package sqlite
