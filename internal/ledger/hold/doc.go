// Package hold keeps the spend records the ledger cannot take yet (disk
// full, writes failing, a commit stalled past a bound) in memory, bounded,
// and writes them when the ledger takes records again; while any is held
// the ledger is unavailable and new requests are not admitted (the app's
// admission gate, /readyz). It owns only the held records and their
// retry: it never decides a charge, and it does not touch the ledger's
// files (docs/architecture.md, "When the ledger is slow or cannot take
// records").
package hold
