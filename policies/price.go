package policies

import (
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/sat"
	"github.com/sluicegw/sluice/internal/tokens"
)

// Tokens is what a request used, by kind of token, as usage.Usage counts
// it (the provider's counts, or Sluice's estimate where it reported
// none). Input is every prompt token, and CachedInput (read from the
// prompt cache), CacheWrite (written to it: Anthropic's
// cache_creation_input_tokens) and AudioInput are parts of it;
// CacheWrite1h is the part of CacheWrite written with the 1-hour TTL.
// Output is every output token, and Reasoning and AudioOutput are parts
// of it.
type Tokens = tokens.Counts

// Rates are the price of one token of each kind, in pico-dollars (the
// price per 1M tokens in micro-dollars), every default applied, indexed
// by tokens.Kind.
type Rates [tokens.NumKinds]int64

// Rates are p's rates for a request whose prompt holds inputTokens
// tokens: the long-context tier's when there is one and inputTokens is
// above its threshold, else the base price's. A field of p left unset is
// priced by its default: CachedInput (also 0) at Input, CacheWrite at
// 1.25 × Input (rounded up to a whole pico-dollar: exact for any price
// that is a multiple of 4 µ$ per 1M, as every published one is),
// CacheWrite1h at 2 × Input, AudioInput at Input, Reasoning and
// AudioOutput at Output. Products saturate (internal/sat).
func (p Price) Rates(inputTokens int64) Rates {
	in, cached, out := p.Input, p.CachedInput, p.Output
	write, write1h := p.CacheWrite, p.CacheWrite1h
	if lc := p.LongContext; lc != nil && inputTokens > lc.AboveInputTokens {
		in, out = or(lc.Input, in), or(lc.Output, out)
		cached = or(lc.CachedInput, cached)
		write, write1h = orPtr(lc.CacheWrite, write), orPtr(lc.CacheWrite1h, write1h)
	}
	if cached == 0 {
		cached = in
	}
	return Rates{
		tokens.Input:        in,
		tokens.CachedInput:  cached,
		tokens.CacheWrite:   or(write, sat.MulDiv(in, 5, 4)),
		tokens.CacheWrite1h: or(write1h, sat.Mul(in, 2)),
		tokens.AudioInput:   or(p.AudioInput, in),
		tokens.Output:       out,
		tokens.Reasoning:    or(p.Reasoning, out),
		tokens.AudioOutput:  or(p.AudioOutput, out),
	}
}

// or is *v, or def when v is unset.
func or(v *int64, def int64) int64 {
	if v == nil {
		return def
	}
	return *v
}

// orPtr is v, or def when v is unset.
func orPtr(v, def *int64) *int64 {
	if v == nil {
		return def
	}
	return v
}

// Cost is what t costs at this price, in integer pico-dollars, exactly:
// each kind of token times its rate (Rates, at t.Input: a long prompt
// prices every token of the request at the long-context tier), plus the
// per-request fee × 10⁶, with nothing rounded.
//
// The kinds partition the counts: of the Input tokens, CachedInput are
// billed at the cached rate, CacheWrite at the cache-write rates
// (CacheWrite1h of them at the 1-hour one, the rest at the 5-minute one),
// AudioInput at the audio rate, and the rest at Input; of the Output
// tokens, Reasoning at the reasoning rate, AudioOutput at the audio rate,
// the rest at Output. Counts below 0 count as 0, and a part is clamped to
// what is left of what holds it, in that order (a provider's audio count
// that overlaps its cached count is priced as audio for the uncached part
// only).
//
// The arithmetic saturates (internal/sat): the sum of products is exact in
// 128 bits, and a cost that does not fit an int64 (more than $9.2M) is
// math.MaxInt64, never a wrapped or negative number. The result is never
// negative, and for a price that Validate accepts (a long-context tier
// never below the base) never decreases when Input, Output or a price
// grows.
func (p Price) Cost(t Tokens) int64 {
	in := max(t[tokens.Input], 0)
	cached := clampTo(t[tokens.CachedInput], in)
	write := clampTo(t[tokens.CacheWrite], in-cached)
	write1h := clampTo(t[tokens.CacheWrite1h], write)
	audioIn := clampTo(t[tokens.AudioInput], in-cached-write)
	out := max(t[tokens.Output], 0)
	reasoning := clampTo(t[tokens.Reasoning], out)
	audioOut := clampTo(t[tokens.AudioOutput], out-reasoning)

	r := p.Rates(in)
	var total sat.Products
	total.Add(in-cached-write-audioIn, r[tokens.Input])
	total.Add(cached, r[tokens.CachedInput])
	total.Add(write-write1h, r[tokens.CacheWrite])
	total.Add(write1h, r[tokens.CacheWrite1h])
	total.Add(audioIn, r[tokens.AudioInput])
	total.Add(out-reasoning-audioOut, r[tokens.Output])
	total.Add(reasoning, r[tokens.Reasoning])
	total.Add(audioOut, r[tokens.AudioOutput])
	total.Add(max(p.PerRequest, 0), money.PicoPerMicro)
	return total.DivUp(1)
}

// WorstCost is the most a request can cost whose prompt Sluice estimates
// at input tokens and whose output is at most output tokens, in
// pico-dollars: every prompt token at the dearest rate a prompt token of
// it can be billed at (input, cached, audio, and both cache-write rates
// when cacheWrites: the request asks for prompt caching), every output
// token at the dearest output rate (output, reasoning, audio), at the
// rates the estimate selects (Rates), plus the per-request fee. The
// provider reports how a prompt divides into those kinds only once it has
// answered; admission reserves this, so no division of the tokens costs
// more: Cost(t) ≤ WorstCost(t.Input, t.Output, true) for every t, and
// ≤ WorstCost(t.Input, t.Output, false) for every t without cache
// writes. It saturates as Cost does.
func (p Price) WorstCost(input, output int64, cacheWrites bool) int64 {
	in, out := max(input, 0), max(output, 0)
	r := p.Rates(in)
	inRate := max(r[tokens.Input], r[tokens.CachedInput], r[tokens.AudioInput])
	if cacheWrites {
		inRate = max(inRate, r[tokens.CacheWrite], r[tokens.CacheWrite1h])
	}
	var total sat.Products
	total.Add(in, inRate)
	total.Add(out, max(r[tokens.Output], r[tokens.Reasoning], r[tokens.AudioOutput]))
	total.Add(max(p.PerRequest, 0), money.PicoPerMicro)
	return total.DivUp(1)
}

// clampTo is n in [0, limit].
func clampTo(n, limit int64) int64 { return min(max(n, 0), limit) }
