// Package sat owns the arithmetic of tokens and money: saturating int64
// sums and products, so that a worst case is never smaller than any of its
// parts, whatever a client, a provider or a configuration supplies.
//
// Every quantity it handles is a count (tokens) or an amount of money
// (pico-dollars, prices per million tokens): none is meaningfully
// negative. So every function treats an input below 0 as 0, and every
// result lies in [0, math.MaxInt64]; a result that does not fit is
// math.MaxInt64 (Max), never a wrapped or negative number. A saturated
// amount is larger than any budget or limit, so admission refuses it as it
// refuses any request that can never fit.
//
// Products are computed exactly in 128 bits (math/bits) before the one
// division that rounds (if any: a cost in pico-dollars, Σ tokens × price
// per million, divides by 1), so a sum of products is rounded and
// saturated once, and is monotone in every input.
//
// It must not know what it counts: callers (policies, admission, limits,
// usage, extproc) decide what is a token and what is money.
package sat
