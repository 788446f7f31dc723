package e2e

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/xds"
)

// pricedKindsPolicy gives every kind of token its own rate, none equal to
// another or to the default it would have if its field were ignored
// (cache writes at 1.25 × and 2 × input, audio at the text rates,
// reasoning at output, cached at input), plus a per-request fee and a
// long-context tier with rates of its own. Argument: the mock's address.
const pricedKindsPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
providers:
  - {name: mock, kind: openai-compatible, base_url: "http://%[1]s"}
  - {name: ant, kind: anthropic, base_url: "http://%[1]s", api_key: "sk-ant-upstream"}
models:
  - {name: m, provider: mock}
  - {name: claude, provider: ant}
pricing:
  m: &price
    input: 3000000
    cached_input: 300000
    cache_write: 3900000
    cache_write_1h: 6300000
    audio_input: 40000000
    output: 15000000
    reasoning: 17000000
    audio_output: 80000000
    per_request: 7
    long_context: {above_input_tokens: 200000, input: 6000000, cached_input: 700000, cache_write: 7900000, cache_write_1h: 12300000, output: 22000000}
  claude: *price
teams:
  - name: t
`

// kindRates are pricedKindsPolicy's rates in pico-dollars a token, written
// out again here: the test's price list, not the gateway's.
type kindRates struct{ input, cached, write, write1h, audioIn, output, reasoning, audioOut int64 }

var (
	baseRates = kindRates{3_000_000, 300_000, 3_900_000, 6_300_000, 40_000_000, 15_000_000, 17_000_000, 80_000_000}
	// The tier sets input, cached, both cache writes and output; audio
	// and reasoning keep the base price's.
	longRates = kindRates{6_000_000, 700_000, 7_900_000, 12_300_000, 40_000_000, 22_000_000, 17_000_000, 80_000_000}
)

const (
	perRequestPico = 7 * 1_000_000
	longAbove      = 200_000
)

// reported is what the mock reports for one request: the prompt P and its
// parts, the reply's words and the output's other parts.
type reported struct{ prompt, cached, write, write1h, audioIn, words, reasoning, audioOut int64 }

// handCost prices u by kindRates, one kind at a time.
func handCost(u reported) int64 {
	r := baseRates
	if u.prompt > longAbove {
		r = longRates
	}
	plain := u.prompt - u.cached - u.write - u.audioIn
	return plain*r.input + u.cached*r.cached + (u.write-u.write1h)*r.write + u.write1h*r.write1h + u.audioIn*r.audioIn +
		u.words*r.output + u.reasoning*r.reasoning + u.audioOut*r.audioOut + perRequestPico
}

// TestEveryPricedKindAtItsRate: the mock reports every kind of token its
// API has — chat completions (cached and audio prompt tokens, reasoning
// and audio output), the Responses API (cached, reasoning), Anthropic's
// messages (cache reads, cache writes with the 5-minute and the 1-hour
// TTL) — streamed and not, and with a prompt past the long-context
// threshold; each spend record holds the counts reported and a cost equal
// to the hand calculation above, so a kind dropped between the meter and
// the price, or priced at a neighbour's rate, shows.
func TestEveryPricedKindAtItsRate(t *testing.T) {
	_, mockAddr := mockProvider(t, mockllm.Options{})
	s := startSluice(t, fmt.Sprintf(pricedKindsPolicy, mockAddr))
	_, key := s.createKey(t, "t")
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-priced-kinds", XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	const (
		chat      = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		chatSSE   = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
		responses = `{"model":"m","input":"hi"}`
		respSSE   = `{"model":"m","stream":true,"input":"hi"}`
		messages  = `{"model":"claude","max_tokens":500,"messages":[{"role":"user","content":"hi"}]}`
		msgSSE    = `{"model":"claude","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	)
	openai := reported{prompt: 1000, cached: 300, audioIn: 50, words: 20, reasoning: 40, audioOut: 30}
	openaiLong := reported{prompt: 300_000, cached: 1000, audioIn: 70, words: 20, reasoning: 40, audioOut: 30}
	resp := reported{prompt: 1000, cached: 300, words: 20, reasoning: 40}
	respLong := reported{prompt: 300_000, cached: 1000, words: 20, reasoning: 40}
	ant := reported{prompt: 1000, cached: 300, write: 200, write1h: 80, words: 20}
	antLong := reported{prompt: 300_000, cached: 1000, write: 2000, write1h: 500, words: 20}
	cases := []struct {
		name, path, body string
		u                reported
	}{
		{"chat", "/v1/chat/completions", chat, openai},
		{"chat streamed", "/v1/chat/completions", chatSSE, openai},
		{"chat, long context", "/v1/chat/completions", chat, openaiLong},
		{"responses", "/v1/responses", responses, resp},
		{"responses streamed", "/v1/responses", respSSE, resp},
		{"responses, long context", "/v1/responses", respSSE, respLong},
		{"messages", "/v1/messages", messages, ant},
		{"messages streamed", "/v1/messages", msgSSE, ant},
		{"messages, long context", "/v1/messages", messages, antLong},
	}
	eachProxy(t, b, func(t *testing.T, p proxy) {
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				u := tc.u
				h := map[string]string{
					"x-request-id":                 fmt.Sprintf("kinds-%s-%d", p.name(), i),
					"anthropic-version":            "2023-06-01",
					mockllm.HeaderInputTokens:      strconv.FormatInt(u.prompt, 10),
					mockllm.HeaderWords:            strconv.FormatInt(u.words, 10),
					mockllm.HeaderCachedTokens:     strconv.FormatInt(u.cached, 10),
					mockllm.HeaderCacheWriteTokens: strconv.FormatInt(u.write, 10),
					mockllm.HeaderReasoningTokens:  strconv.FormatInt(u.reasoning, 10),
				}
				for name, n := range map[string]int64{mockllm.HeaderCacheWrite1hTokens: u.write1h,
					mockllm.HeaderAudioInputTokens: u.audioIn, mockllm.HeaderAudioOutputTokens: u.audioOut} {
					if n > 0 {
						h[name] = strconv.FormatInt(n, 10)
					}
				}
				st, rh, body := call{path: tc.path, body: tc.body, headers: h}.do(t, p.url, key)
				if st != 200 {
					t.Fatalf("%d %.300s", st, body)
				}
				rec := s.awaitRecord(t, rh.Get("x-sluice-request-id"))
				want := tokens.Counts{
					tokens.Input: u.prompt, tokens.CachedInput: u.cached, tokens.CacheWrite: u.write, tokens.CacheWrite1h: u.write1h,
					tokens.AudioInput: u.audioIn, tokens.Output: u.words + u.reasoning + u.audioOut, tokens.Reasoning: u.reasoning,
					tokens.AudioOutput: u.audioOut,
				}
				if rec.Tokens != want || rec.Estimated || !rec.Priced {
					t.Errorf("record tokens %v (estimated %v, priced %v); want the reported %v", rec.Tokens, rec.Estimated, rec.Priced, want)
				}
				if want := handCost(u); rec.CostPico != want {
					t.Errorf("cost %d p$; want %d p$ by hand", rec.CostPico, want)
				}
			})
		}
	})
}
