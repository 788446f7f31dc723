// Package tokens owns the kinds of token Sluice counts and prices: their
// fixed order and, for each, every name it has outside Go (JSON fields,
// ledger columns, pricing keys, metric labels), and Counts, one int64 per
// kind. A new kind is a constant and a row of the table here, plus the
// ledger migration that adds its column. It imports nothing of Sluice's.
package tokens
