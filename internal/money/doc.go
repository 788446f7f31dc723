// Package money owns amounts of money. A request's cost is an int64 of
// pico-dollars (p$; 1 µ$ = 10⁶ p$, $1 = 10¹² p$): prices are integer
// micro-dollars per million tokens, which is pico-dollars per token, so
// tokens × price is exact in pico-dollars and nothing is ever rounded. One
// int64 holds up to $9,223,372.036854775807, far more than any request
// costs; a cost that does not fit saturates there (internal/sat).
//
// Sums of costs outgrow that: Sum holds whole micro-dollars and the
// pico-dollars beyond them separately, exactly, up to math.MaxInt64
// micro-dollars ($9.2 trillion), and saturates there. Money is rounded
// only to be shown, to whole micro-dollars (MicrosUp, MicrosDown).
//
// It must not know what a request, a budget or a ledger is: callers
// (policies, ledger, admission, admin, app) decide what they count.
package money
