package policies

import (
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/sat"
)

// Tokens is what a request used, by kind of token. Each count is the
// provider's (or Sluice's estimate where it reported none), as
// usage.Usage holds it: Input is every prompt token, CachedInput the part
// of it read from the prompt cache; Output is every output token.
type Tokens struct {
	Input, CachedInput int64
	Output             int64
}

// Cost is what t costs at this price, in integer pico-dollars, exactly:
// prices are micro-dollars per 1M tokens, which is pico-dollars per token,
// so the cost is Σ tokens × price, plus the per-request fee × 10⁶, with
// nothing rounded. CachedInput tokens are billed at CachedInput when that
// price is set (not 0), else at Input; the rest of Input at Input. Counts
// below 0 count as 0, and a part larger than what holds it is clamped to
// it (CachedInput to Input).
//
// The arithmetic saturates (internal/sat): the sum of products is exact in
// 128 bits, and a cost that does not fit an int64 (more than $9.2M) is
// math.MaxInt64, never a wrapped or negative number. The result is never
// negative and never decreases when any count or price grows.
func (p Price) Cost(t Tokens) int64 {
	input := max(t.Input, 0)
	cached := min(max(t.CachedInput, 0), input)
	cachedPrice := p.CachedInput
	if cachedPrice == 0 {
		cachedPrice = p.Input
	}
	var total sat.Products
	total.Add(input-cached, p.Input)
	total.Add(cached, cachedPrice)
	total.Add(max(t.Output, 0), p.Output)
	total.Add(max(p.PerRequest, 0), money.PicoPerMicro)
	return total.DivUp(1)
}
