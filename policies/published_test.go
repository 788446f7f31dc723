package policies

import (
	"testing"

	"github.com/sluicegw/sluice/internal/tokens"
)

// TestPublishedBills prices requests at the prices providers publish and
// checks the bill against the one worked out by hand from those prices.
// Prices are written as sluice.yaml holds them: micro-dollars per 1M
// tokens, which is pico-dollars per token; bills are in pico-dollars
// (1 µ$ = 10⁶ p$, $1 = 10¹² p$).
func TestPublishedBills(t *testing.T) {
	// Claude Sonnet 4, Anthropic's pricing table
	// (docs.anthropic.com/en/docs/about-claude/pricing): base input
	// $3/MTok, 5-minute cache writes $3.75, 1-hour cache writes $6, cache
	// hits and refreshes $0.30, output $15; for prompts above 200K input
	// tokens, input $6 and output $22.50. The cache-write prices are the
	// defaults (1.25 × and 2 × input), so they are left unset here; the
	// cache-hit price is not (it is 0.1 × input, and unset means input).
	sonnet4 := Price{Input: 3_000_000, CachedInput: 300_000, Output: 15_000_000}
	sonnet4Long := sonnet4
	sonnet4Long.LongContext = &LongContext{AboveInputTokens: 200_000, Input: p64(6_000_000), CachedInput: p64(600_000), Output: p64(22_500_000)}
	// Claude Haiku 3, the same table: input $0.25, 5-minute cache writes
	// $0.30 (1.2 × input, not 1.25 ×: it must be given), 1-hour writes
	// $0.50, hits $0.03, output $1.25.
	haiku3 := Price{Input: 250_000, CachedInput: 30_000, CacheWrite: p64(300_000), CacheWrite1h: p64(500_000), Output: 1_250_000}
	// GPT-4o, OpenAI's pricing page (openai.com/api/pricing): input $2.50
	// per 1M tokens, cached input $1.25, output $10.
	gpt4o := Price{Input: 2_500_000, CachedInput: 1_250_000, Output: 10_000_000}
	// GPT-5 nano, the same page: input $0.05, cached input $0.005, output
	// $0.40. Reasoning tokens are billed as output tokens (OpenAI's
	// reasoning guide), which is the reasoning price left unset.
	gpt5nano := Price{Input: 50_000, CachedInput: 5_000, Output: 400_000}

	for _, tt := range []struct {
		name string
		p    Price
		t    Tokens
		want int64 // p$, worked out below each case
	}{
		// A prompt of 101,000 tokens of which 100,000 are written to
		// the cache with the 5-minute TTL, 500 output tokens:
		//   1,000 × $3/M    = $0.003
		//   100,000 × $3.75/M = $0.375
		//   500 × $15/M     = $0.0075
		//   total           = $0.3855
		{"Anthropic 5-minute cache write", sonnet4,
			Tokens{tokens.Input: 101_000, tokens.CacheWrite: 100_000, tokens.Output: 500}, 385_500_000_000},
		// The same prompt written with the 1-hour TTL:
		//   1,000 × $3/M    = $0.003
		//   100,000 × $6/M  = $0.600
		//   500 × $15/M     = $0.0075
		//   total           = $0.6105
		{"Anthropic 1-hour cache write", sonnet4,
			Tokens{tokens.Input: 101_000, tokens.CacheWrite: 100_000, tokens.CacheWrite1h: 100_000, tokens.Output: 500}, 610_500_000_000},
		// A request that writes with both TTLs, 60,000 tokens for 1
		// hour and 40,000 for 5 minutes:
		//   1,000 × $3/M     = $0.003
		//   40,000 × $3.75/M = $0.150
		//   60,000 × $6/M    = $0.360
		//   500 × $15/M      = $0.0075
		//   total            = $0.5205
		{"Anthropic writes of both TTLs", sonnet4,
			Tokens{tokens.Input: 101_000, tokens.CacheWrite: 100_000, tokens.CacheWrite1h: 60_000, tokens.Output: 500}, 520_500_000_000},
		// The exchange whose bill Sluice once got wrong: 4 input tokens,
		// 2,048 written to the cache (5 minutes), 12 output tokens. At
		// base input for the write it came to 6,336 µ$; Anthropic bills:
		//   4 × $3/M        = $0.000012
		//   2,048 × $3.75/M = $0.00768
		//   12 × $15/M      = $0.00018
		//   total           = $0.007872 = 7,872 µ$
		{"Anthropic cache write, the 7,872 µ$ bill", sonnet4,
			Tokens{tokens.Input: 2_052, tokens.CacheWrite: 2_048, tokens.Output: 12}, 7_872_000_000},
		// The next request reads those 100,000 tokens from the cache:
		//   1,000 × $3/M      = $0.003
		//   100,000 × $0.30/M = $0.030
		//   500 × $15/M       = $0.0075
		//   total             = $0.0405
		{"Anthropic cache read", sonnet4,
			Tokens{tokens.Input: 101_000, tokens.CachedInput: 100_000, tokens.Output: 500}, 40_500_000_000},
		// Haiku 3's 5-minute writes at their own price, $0.30, and
		// reads at $0.03, for 10,000 written, 20,000 read, 2,000 more
		// input and 1,000 output:
		//   2,000 × $0.25/M  = $0.0005
		//   10,000 × $0.30/M = $0.003
		//   20,000 × $0.03/M = $0.0006
		//   1,000 × $1.25/M  = $0.00125
		//   total            = $0.00535
		{"Anthropic Haiku 3 cache write and read", haiku3,
			Tokens{tokens.Input: 32_000, tokens.CachedInput: 20_000, tokens.CacheWrite: 10_000, tokens.Output: 1_000}, 5_350_000_000},
		// A 250,000-token prompt (above 200K: every token at the long-
		// context prices), 50,000 of it read from the cache, 30,000
		// written for 5 minutes, 2,000 output:
		//   170,000 × $6/M   = $1.020
		//   50,000 × $0.60/M = $0.030
		//   30,000 × $7.50/M = $0.225 (1.25 × the tier's $6)
		//   2,000 × $22.50/M = $0.045
		//   total            = $1.320
		{"Anthropic long context", sonnet4Long,
			Tokens{tokens.Input: 250_000, tokens.CachedInput: 50_000, tokens.CacheWrite: 30_000, tokens.Output: 2_000}, 1_320_000_000_000},
		// The same request at exactly 200,000 prompt tokens is priced
		// at the base: 120,000 × $3 + 50,000 × $0.30 + 30,000 × $3.75
		// + 2,000 × $15 = $0.360 + $0.015 + $0.1125 + $0.030 = $0.5175.
		{"Anthropic at the long-context threshold", sonnet4Long,
			Tokens{tokens.Input: 200_000, tokens.CachedInput: 50_000, tokens.CacheWrite: 30_000, tokens.Output: 2_000}, 517_500_000_000},
		// GPT-4o with 2,006 prompt tokens of which 1,920 cached, 300
		// output tokens:
		//   86 × $2.50/M    = $0.000215
		//   1,920 × $1.25/M = $0.0024
		//   300 × $10/M     = $0.003
		//   total           = $0.005615
		{"OpenAI cached input", gpt4o,
			Tokens{tokens.Input: 2_006, tokens.CachedInput: 1_920, tokens.Output: 300}, 5_615_000_000},
		// The recorded GPT-5 nano exchange of ../shared/fixtures
		// (openai/chat-basic.yaml): 8 prompt tokens, 377 completion
		// tokens of which 320 reasoning, billed as output:
		//   8 × $0.05/M    = $0.0000004
		//   377 × $0.40/M  = $0.0001508
		//   total          = $0.0001512 = 151.2 µ$
		{"OpenAI reasoning", gpt5nano,
			Tokens{tokens.Input: 8, tokens.Output: 377, tokens.Reasoning: 320}, 151_200_000},
		// An embedding of 7 tokens with text-embedding-3-small at $0.02
		// per 1M (openai/embeddings-basic.yaml): 7 × $0.02/M = 0.14 µ$,
		// not a whole micro-dollar.
		{"OpenAI embedding", Price{Input: 20_000},
			Tokens{tokens.Input: 7}, 140_000},
	} {
		if got := tt.p.Cost(tt.t); got != tt.want {
			t.Errorf("%s: billed %d p$, want %d p$", tt.name, got, tt.want)
		}
	}
}

// TestConfigurationExample is the worked example of docs/configuration.md
// ("pricing"): its Sonnet price, and a request of 250,000 prompt tokens
// (50,000 cached, 30,000 written, 10,000 of them for 1 hour) and 2,000
// output tokens, above the 200K threshold: $1.365; the same shares of a
// 200,000-token prompt at the base prices: $0.540.
func TestConfigurationExample(t *testing.T) {
	p := Price{Input: 3_000_000, CachedInput: 300_000, CacheWrite: p64(3_750_000), CacheWrite1h: p64(6_000_000), Output: 15_000_000,
		LongContext: &LongContext{AboveInputTokens: 200_000, Input: p64(6_000_000), CachedInput: p64(600_000),
			CacheWrite: p64(7_500_000), CacheWrite1h: p64(12_000_000), Output: p64(22_500_000)}}
	long := Tokens{tokens.Input: 250_000, tokens.CachedInput: 50_000, tokens.CacheWrite: 30_000, tokens.CacheWrite1h: 10_000, tokens.Output: 2_000}
	if got := p.Cost(long); got != 1_365_000_000_000 {
		t.Errorf("above the threshold: %d p$, want 1,365,000,000,000 ($1.365)", got)
	}
	base := long
	base[tokens.Input] = 200_000
	if got := p.Cost(base); got != 540_000_000_000 {
		t.Errorf("at the threshold: %d p$, want 540,000,000,000 ($0.540)", got)
	}
}
