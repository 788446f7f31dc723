package policies

import "github.com/sluicegw/sluice/internal/sat"

// CostMicros is what the given token counts cost at this price, in
// integer micro-dollars, rounded up so that Sluice never under-charges:
// input is every prompt token (cached ones included), cachedInput the part
// of it read from cache, output every output token (reasoning included).
// cachedInput is billed at CachedInput when that price is set, else at
// Input. Counts are clamped to be non-negative and consistent.
//
// The arithmetic saturates (internal/sat): the sum of products is exact in
// 128 bits and rounded once, and a cost that does not fit an int64 is
// math.MaxInt64 — more than any budget — never a wrapped or negative
// number. The result is never negative and never decreases when any count
// or price grows.
func (p Price) CostMicros(input, cachedInput, output int64) int64 {
	input, cachedInput, output = max(input, 0), max(cachedInput, 0), max(output, 0)
	cachedInput = min(cachedInput, input)
	cachedPrice := p.CachedInput
	if cachedPrice == 0 {
		cachedPrice = p.Input
	}
	// Prices are per 1M tokens; one division at the end keeps the
	// rounding to a single micro-dollar.
	var total sat.Products
	total.Add(input-cachedInput, p.Input)
	total.Add(cachedInput, cachedPrice)
	total.Add(output, p.Output)
	return sat.Add(total.DivUp(1_000_000), p.PerRequest)
}
