// Package ledger owns the spend record — what one settled request cost, in
// tokens and integer pico-dollars, and who spent it — and the three small
// interfaces its backends satisfy: Ledger, which makes a record durable;
// Reader, which reports on the records (sluice spend, the admin API); and
// Aggregates, the per-key, per-team and per-org sums per model and
// 15-minute bucket that a backend writes in the same transaction as the
// records, from which budgets are rebuilt after a restart. Backends live
// in sub-packages (ledger/sqlite now, PostgreSQL later) and all pass the
// contract suite in ledger/ledgertest.
//
// The durability promise (design.md, "Consistency promises"): a settled
// spend record is durable before the final ext_proc reply is sent, so
// Append returns only once the record is committed, and a crash loses no
// record whose Append returned nil. Backends amortise the cost with group
// commit. Callers append with context.WithoutCancel, so that a client that
// goes away cannot cancel the write of what it already spent.
//
// It must not price requests (the pricing table does), count tokens
// (extproc does), enforce budgets (limits does) or log: it stores and sums
// what it is given. A record's cost is int64 pico-dollars, exact; sums of
// costs are money.Sum, exact too; tokens are int64; no floats.
package ledger
