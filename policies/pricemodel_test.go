package policies

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicegw/sluice/internal/tokens"
)

func p64(v int64) *int64 { return &v }

// TestRatesDefaults: every kind of token left unset is priced from the
// input and output prices: cache reads at the input price, 5-minute cache
// writes at 1.25 × input (rounded up to a whole pico-dollar a token),
// 1-hour writes at 2 × input, audio at the text prices, reasoning at the
// output price; a kind set explicitly, to 0 too (free), keeps its price.
func TestRatesDefaults(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    Price
		want Rates
	}{
		{"unset", Price{Input: 3_000_000, Output: 15_000_000}, Rates{
			tokens.Input: 3_000_000, tokens.CachedInput: 3_000_000, tokens.CacheWrite: 3_750_000, tokens.CacheWrite1h: 6_000_000, tokens.AudioInput: 3_000_000,
			tokens.Output: 15_000_000, tokens.Reasoning: 15_000_000, tokens.AudioOutput: 15_000_000}},
		{"set", Price{Input: 2_500_000, CachedInput: 1_250_000, CacheWrite: p64(1), CacheWrite1h: p64(2), AudioInput: p64(40_000_000),
			Output: 10_000_000, Reasoning: p64(12_000_000), AudioOutput: p64(80_000_000)}, Rates{
			tokens.Input: 2_500_000, tokens.CachedInput: 1_250_000, tokens.CacheWrite: 1, tokens.CacheWrite1h: 2, tokens.AudioInput: 40_000_000,
			tokens.Output: 10_000_000, tokens.Reasoning: 12_000_000, tokens.AudioOutput: 80_000_000}},
		{"set to 0: free", Price{Input: 5, CacheWrite: p64(0), CacheWrite1h: p64(0), AudioInput: p64(0), Output: 7, Reasoning: p64(0), AudioOutput: p64(0)}, Rates{
			tokens.Input: 5, tokens.CachedInput: 5, tokens.Output: 7}},
		{"1.25 × an input not divisible by 4: rounded up", Price{Input: 1}, Rates{tokens.Input: 1, tokens.CachedInput: 1, tokens.CacheWrite: 2, tokens.CacheWrite1h: 2, tokens.AudioInput: 1}},
		{"1.25 × 800,000 exactly", Price{Input: 800_000}, Rates{tokens.Input: 800_000, tokens.CachedInput: 800_000, tokens.CacheWrite: 1_000_000, tokens.CacheWrite1h: 1_600_000, tokens.AudioInput: 800_000}},
		{"the largest input saturates its defaults", Price{Input: math.MaxInt64}, Rates{
			tokens.Input: math.MaxInt64, tokens.CachedInput: math.MaxInt64, tokens.CacheWrite: math.MaxInt64, tokens.CacheWrite1h: math.MaxInt64, tokens.AudioInput: math.MaxInt64}},
	} {
		if diff := cmp.Diff(tt.want, tt.p.Rates(1)); diff != "" {
			t.Errorf("%s: Rates (-want +got):\n%s", tt.name, diff)
		}
	}
}

// TestCostOfEachKind prices one kind of token at a time, and a request of
// every kind at once, at rates that tell them apart.
func TestCostOfEachKind(t *testing.T) {
	p := Price{Input: 1_000, CachedInput: 100, CacheWrite: p64(1_250), CacheWrite1h: p64(2_000), AudioInput: p64(16_000),
		Output: 10_000, Reasoning: p64(20_000), AudioOutput: p64(80_000), PerRequest: 3}
	const fee = 3_000_000 // 3 µ$ in p$
	for _, tt := range []struct {
		name string
		t    Tokens
		want int64 // p$
	}{
		{"nothing: the fee", Tokens{}, fee},
		{"input", Tokens{tokens.Input: 10}, 10*1_000 + fee},
		{"cached", Tokens{tokens.Input: 10, tokens.CachedInput: 10}, 10*100 + fee},
		{"5-minute writes", Tokens{tokens.Input: 10, tokens.CacheWrite: 10}, 10*1_250 + fee},
		{"1-hour writes", Tokens{tokens.Input: 10, tokens.CacheWrite: 10, tokens.CacheWrite1h: 10}, 10*2_000 + fee},
		{"audio in", Tokens{tokens.Input: 10, tokens.AudioInput: 10}, 10*16_000 + fee},
		{"output", Tokens{tokens.Output: 10}, 10*10_000 + fee},
		{"reasoning", Tokens{tokens.Output: 10, tokens.Reasoning: 10}, 10*20_000 + fee},
		{"audio out", Tokens{tokens.Output: 10, tokens.AudioOutput: 10}, 10*80_000 + fee},
		{"every kind", Tokens{tokens.Input: 100, tokens.CachedInput: 10, tokens.CacheWrite: 20, tokens.CacheWrite1h: 5, tokens.AudioInput: 30, tokens.Output: 50, tokens.Reasoning: 15, tokens.AudioOutput: 5},
			40*1_000 + 10*100 + 15*1_250 + 5*2_000 + 30*16_000 + 30*10_000 + 15*20_000 + 5*80_000 + fee},
		// Parts larger than what holds them are clamped, in order: the
		// cached 80 of 100, then writes to the 20 left, then no audio.
		{"parts beyond the whole", Tokens{tokens.Input: 100, tokens.CachedInput: 80, tokens.CacheWrite: 50, tokens.CacheWrite1h: 70, tokens.AudioInput: 40},
			80*100 + 20*2_000 + fee},
		{"reasoning beyond the output", Tokens{tokens.Output: 10, tokens.Reasoning: 30, tokens.AudioOutput: 5}, 10*20_000 + fee},
		{"negative counts", Tokens{tokens.Input: -1, tokens.CachedInput: -1, tokens.CacheWrite: -1, tokens.CacheWrite1h: -1, tokens.AudioInput: -1, tokens.Output: -1, tokens.Reasoning: -1, tokens.AudioOutput: -1}, fee},
	} {
		if got := p.Cost(tt.t); got != tt.want {
			t.Errorf("%s: Cost(%+v) = %d p$, want %d", tt.name, tt.t, got, tt.want)
		}
	}
}

// TestLongContext: a prompt of more than above_input_tokens tokens prices
// every token of the request — the output too — at the tier's prices; at
// the threshold, the base prices. The tier's unset fields keep the base
// price's; kinds neither sets follow from the tier's input and output.
func TestLongContext(t *testing.T) {
	// Claude Sonnet 4.5, anthropic.com/pricing: $3 / $15 per MTok, and
	// for prompts above 200K tokens $6 / $22.50; cache writes 1.25 × and
	// 2 × input, reads 0.1 × input, in both tiers.
	sonnet := Price{Input: 3_000_000, CachedInput: 300_000, Output: 15_000_000,
		LongContext: &LongContext{AboveInputTokens: 200_000, Input: p64(6_000_000), CachedInput: p64(600_000), Output: p64(22_500_000)}}
	for _, tt := range []struct {
		name string
		p    Price
		t    Tokens
		want int64 // p$
	}{
		// 200,000 × $3/M = $0.60; 1,000 × $15/M = $0.015.
		{"at the threshold: base", sonnet, Tokens{tokens.Input: 200_000, tokens.Output: 1_000}, 600_000_000_000 + 15_000_000_000},
		// 200,001 × $6/M = $1.200006; 1,000 × $22.50/M = $0.0225.
		{"one token above: all of it at the tier", sonnet, Tokens{tokens.Input: 200_001, tokens.Output: 1_000}, 1_200_006_000_000 + 22_500_000_000},
		// Of 300,000: 100,000 read at $0.60/M, 50,000 written (5m) at
		// 1.25 × $6 = $7.50/M, 10,000 of them 1h at 2 × $6 = $12/M, the
		// other 150,000 at $6/M.
		{"cache kinds at the tier, their defaults from its input", sonnet,
			Tokens{tokens.Input: 300_000, tokens.CachedInput: 100_000, tokens.CacheWrite: 50_000, tokens.CacheWrite1h: 10_000},
			100_000*600_000 + 40_000*7_500_000 + 10_000*12_000_000 + 150_000*6_000_000},
		// A tier with only an input price: output, cache reads (unset in
		// the base: the input price) and writes follow.
		{"a tier of input alone", Price{Input: 1_000, Output: 2_000, LongContext: &LongContext{AboveInputTokens: 10, Input: p64(3_000)}},
			Tokens{tokens.Input: 20, tokens.CachedInput: 4, tokens.CacheWrite: 4, tokens.Output: 5}, 12*3_000 + 4*3_000 + 4*3_750 + 5*2_000},
		// The base's explicit prices hold in the tier where it sets none.
		{"the base's explicit prices", Price{Input: 1_000, CacheWrite: p64(9_000), Reasoning: p64(7_000), Output: 2_000,
			LongContext: &LongContext{AboveInputTokens: 10, Input: p64(3_000), Output: p64(4_000)}},
			Tokens{tokens.Input: 20, tokens.CacheWrite: 5, tokens.Output: 10, tokens.Reasoning: 6}, 15*3_000 + 5*9_000 + 4*4_000 + 6*7_000},
	} {
		if got := tt.p.Cost(tt.t); got != tt.want {
			t.Errorf("%s: Cost(%+v) = %d p$, want %d", tt.name, tt.t, got, tt.want)
		}
	}
}

// TestPriceSaturates: at the largest price (2^63 - 1 µ$ per 1M tokens)
// of any kind, one token costs exactly that and two saturate; so does the
// largest fee. Nothing wraps to a negative or a small number.
func TestPriceSaturates(t *testing.T) {
	const m = math.MaxInt64
	for _, tt := range []struct {
		kind string
		p    Price
		one  Tokens
	}{
		{"input", Price{Input: m}, Tokens{tokens.Input: 1}},
		{"cached_input", Price{CachedInput: m}, Tokens{tokens.Input: 1, tokens.CachedInput: 1}},
		{"cache_write", Price{CacheWrite: p64(m)}, Tokens{tokens.Input: 1, tokens.CacheWrite: 1}},
		{"cache_write_1h", Price{CacheWrite1h: p64(m)}, Tokens{tokens.Input: 1, tokens.CacheWrite: 1, tokens.CacheWrite1h: 1}},
		{"audio_input", Price{AudioInput: p64(m)}, Tokens{tokens.Input: 1, tokens.AudioInput: 1}},
		{"output", Price{Output: m}, Tokens{tokens.Output: 1}},
		{"reasoning", Price{Reasoning: p64(m)}, Tokens{tokens.Output: 1, tokens.Reasoning: 1}},
		{"audio_output", Price{AudioOutput: p64(m)}, Tokens{tokens.Output: 1, tokens.AudioOutput: 1}},
		{"long_context.input", Price{LongContext: &LongContext{AboveInputTokens: 0, Input: p64(m)}}, Tokens{tokens.Input: 1}},
		{"long_context.output", Price{LongContext: &LongContext{AboveInputTokens: 0, Output: p64(m)}}, Tokens{tokens.Input: 1, tokens.Output: 1}},
	} {
		if got := tt.p.Cost(tt.one); got != m {
			t.Errorf("%s at 2^63-1: one token costs %d, want %d", tt.kind, got, int64(m))
		}
		two := tt.one
		two[tokens.Input], two[tokens.CachedInput], two[tokens.CacheWrite], two[tokens.CacheWrite1h], two[tokens.AudioInput] = 2*two[tokens.Input], 2*two[tokens.CachedInput], 2*two[tokens.CacheWrite], 2*two[tokens.CacheWrite1h], 2*two[tokens.AudioInput]
		two[tokens.Output], two[tokens.Reasoning], two[tokens.AudioOutput] = 2*two[tokens.Output], 2*two[tokens.Reasoning], 2*two[tokens.AudioOutput]
		if got := tt.p.Cost(two); got != m {
			t.Errorf("%s at 2^63-1: two tokens cost %d, want saturated %d", tt.kind, got, int64(m))
		}
		// A price of 0 costs nothing; a negative one (which Validate
		// refuses) counts as 0.
		for _, v := range []int64{0, -1, math.MinInt64} {
			q := setKind(tt.kind, v)
			if got := q.Cost(two); got != 0 {
				t.Errorf("%s at %d: cost %d, want 0", tt.kind, v, got)
			}
		}
	}
	if got := (Price{PerRequest: m}).Cost(Tokens{}); got != m {
		t.Errorf("per_request at 2^63-1 µ$: %d, want saturated", got)
	}
	if got := (Price{PerRequest: -1}).Cost(Tokens{}); got != 0 {
		t.Errorf("per_request at -1: %d, want 0", got)
	}
}

// setKind is a price whose kind (a field name of sluice.yaml) is v and
// every other price 0.
func setKind(kind string, v int64) Price {
	zero := p64(0)
	p := Price{CacheWrite: zero, CacheWrite1h: zero, AudioInput: zero, Reasoning: zero, AudioOutput: zero}
	switch kind {
	case "input":
		p.Input = v
	case "cached_input":
		p.CachedInput = v
	case "cache_write":
		p.CacheWrite = p64(v)
	case "cache_write_1h":
		p.CacheWrite1h = p64(v)
	case "audio_input":
		p.AudioInput = p64(v)
	case "output":
		p.Output = v
	case "reasoning":
		p.Reasoning = p64(v)
	case "audio_output":
		p.AudioOutput = p64(v)
	case "long_context.input":
		p.LongContext = &LongContext{Input: p64(v), CachedInput: zero, CacheWrite: zero, CacheWrite1h: zero}
	case "long_context.output":
		p.LongContext = &LongContext{Output: p64(v)}
	}
	return p
}

// TestPricingYAML: the field names of sluice.yaml's pricing, decoded and
// validated: every price accepts 0 and 2^63 - 1 and refuses -1, each at
// its path; a value beyond an int64 is refused as such; a long-context
// tier needs its threshold and no price below the base's.
func TestPricingYAML(t *testing.T) {
	base := `
providers: [{name: anthropic, kind: anthropic, base_url: "https://api.anthropic.com", api_key: k}]
models: [{name: claude, provider: anthropic}]
pricing:
  claude: `
	full := `{input: 3000000, cached_input: 300000, cache_write: 3750000, cache_write_1h: 6000000, audio_input: 0,
    output: 15000000, reasoning: 15000000, audio_output: 0, per_request: 10,
    long_context: {above_input_tokens: 200000, input: 6000000, cached_input: 600000, cache_write: 7500000, cache_write_1h: 12000000, output: 22500000}}`
	cfg, err := Parse([]byte(base+full+"\n"), "f.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Price{Input: 3_000_000, CachedInput: 300_000, CacheWrite: p64(3_750_000), CacheWrite1h: p64(6_000_000), AudioInput: p64(0),
		Output: 15_000_000, Reasoning: p64(15_000_000), AudioOutput: p64(0), PerRequest: 10,
		LongContext: &LongContext{AboveInputTokens: 200_000, Input: p64(6_000_000), CachedInput: p64(600_000),
			CacheWrite: p64(7_500_000), CacheWrite1h: p64(12_000_000), Output: p64(22_500_000)}}
	if diff := cmp.Diff(want, cfg.Pricing["claude"]); diff != "" {
		t.Errorf("decoded price (-want +got):\n%s", diff)
	}

	fields := []string{"input", "cached_input", "cache_write", "cache_write_1h", "audio_input", "output", "reasoning", "audio_output", "per_request"}
	tierFields := []string{"input", "cached_input", "cache_write", "cache_write_1h", "output"}
	for _, f := range fields {
		for _, v := range []string{"0", "9223372036854775807"} {
			if _, err := Parse([]byte(base+"{"+f+": "+v+"}\n"), "f.yaml", nil); err != nil {
				t.Errorf("%s: %s: %v", f, v, err)
			}
		}
		_, err := Parse([]byte(base+"{"+f+": -1}\n"), "f.yaml", nil)
		if want := "pricing.claude." + f + ": must not be negative, got -1"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: -1: %v; want %q", f, err, want)
		}
		_, err = Parse([]byte(base+"{"+f+": 9223372036854775808}\n"), "f.yaml", nil)
		if want := "pricing.claude." + f + ": must be an integer"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: 2^63: %v; want %q", f, err, want)
		}
	}
	for _, f := range tierFields {
		_, err := Parse([]byte(base+"{long_context: {above_input_tokens: 10, "+f+": -1}}\n"), "f.yaml", nil)
		if want := "pricing.claude.long_context." + f + ": must not be negative, got -1"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("long_context.%s: -1: %v; want %q", f, err, want)
		}
		if _, err := Parse([]byte(base+"{long_context: {above_input_tokens: 10, "+f+": 9223372036854775807}}\n"), "f.yaml", nil); err != nil {
			t.Errorf("long_context.%s: 2^63-1: %v", f, err)
		}
	}
	for _, tt := range []struct{ price, want string }{
		{"{input: 1, long_context: {input: 2}}", "pricing.claude.long_context.above_input_tokens: required: the prompt size above which the tier applies, more than 0 (e.g. 200000), got 0"},
		{"{input: 1, long_context: {above_input_tokens: -5, input: 2}}", "pricing.claude.long_context.above_input_tokens: required"},
		{"{input: 10, long_context: {above_input_tokens: 5, input: 9}}", "pricing.claude.long_context.input: the long-context price of input is 9, below the base price, 10"},
		{"{output: 10, long_context: {above_input_tokens: 5, output: 9}}", "pricing.claude.long_context.output: the long-context price of output is 9, below the base price, 10"},
		{"{input: 10, cached_input: 2, long_context: {above_input_tokens: 5, input: 20, cached_input: 1}}", "pricing.claude.long_context.cached_input: the long-context price of cached_input is 1, below the base price, 2"},
		{"{input: 10, cache_write: 20, long_context: {above_input_tokens: 5, input: 10, cache_write: 19}}", "pricing.claude.long_context.cache_write: the long-context price of cache_write is 19, below the base price, 20"},
		{"{input: 10, cache_write_1h: 30, long_context: {above_input_tokens: 5, cache_write_1h: 3}}", "pricing.claude.long_context.cache_write_1h: the long-context price of cache_write_1h is 3, below the base price, 30"},
		{"{long_context: {above_input_tokens: 1.5}}", "pricing.claude.long_context.above_input_tokens: must be an integer (a number of prompt tokens), got 1.5"},
		{"{input: 2.5}", "pricing.claude.input: must be an integer (micro-dollars per 1M tokens: $2.50 is 2500000), got 2.5"},
		{"{long_context: {above_input_tokens: 10}, cache_writes: 1}", `pricing.claude.cache_writes: unknown field (did you mean "cache_write"?)`},
	} {
		_, err := Parse([]byte(base+tt.price+"\n"), "f.yaml", nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want %q", tt.price, err, tt.want)
		}
	}
}

// TestPricingWarningsUnpricedDeny: with gateway.unpriced_models: deny, a
// model without a price is refused, and the warning says so; audio in a
// provider's name for the model counts as the model's.
func TestPricingWarningsUnpricedDeny(t *testing.T) {
	cfg, err := Parse([]byte(`
gateway: {unpriced_models: deny}
providers: [{name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}]
models:
  - {name: m, provider: local}
  - {name: speech, provider: local, upstream: my-realtime-model}
pricing:
  speech: {input: 1, output: 1, audio_output: 2}
`), "f.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := Compile(cfg, "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range snap.PricingWarnings() {
		got = append(got, w.String())
	}
	want := []string{
		`pricing.m: model "m" has no price: its requests are refused (gateway.unpriced_models: deny)`,
		"pricing.speech.audio_input: not set: the model's name says it takes audio, and audio input tokens are charged at the text input price",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PricingWarnings (-want +got):\n%s", diff)
	}
}
