package extproc

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/fixtures"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/policies"
)

// thirdPartyCassette reads the one exchange of one of
// ../shared/fixtures/thirdparty's cassettes (skipping the test where the
// fixtures are absent).
func thirdPartyCassette(t *testing.T, name string) fixtures.Interaction {
	t.Helper()
	return fixtures.One(t, filepath.Join(filepath.Dir(fixtures.OpenAI(t)), "thirdparty", name))
}

// haikuConfig prices claude-haiku-4-5 as Anthropic publishes it
// (anthropic.com/pricing, Claude Haiku 4.5): $1 per MTok of input, $1.25
// of 5-minute cache writes, $2 of 1-hour ones, $0.10 of cache hits, $5 of
// output. It leaves cache_write and cache_write_1h unset in one model and
// sets them in the other: the defaults, 1.25 × and 2 × input, are
// Anthropic's multipliers.
const haikuConfig = `
providers:
  - {name: anthropic, kind: anthropic, base_url: "https://api.anthropic.com", api_key: "sk-ant"}
models:
  - {name: claude-haiku-4-5-20251001, provider: anthropic}
  - {name: haiku-explicit, provider: anthropic, upstream: claude-haiku-4-5-20251001}
pricing:
  claude-haiku-4-5-20251001: {input: 1000000, cached_input: 100000, output: 5000000}
  haiku-explicit: {input: 1000000, cached_input: 100000, cache_write: 1250000, cache_write_1h: 2000000, output: 5000000}
teams:
  - {name: t, models: ["*"]}
keys:
  - {name: k, team: t, sha256: %s}
`

// TestAnthropicCacheWriteBill replays agw-messages-basic, the recorded
// Messages exchange that reports cache writes (input_tokens 15,
// cache_creation_input_tokens 13, cache_read_input_tokens 12,
// output_tokens 21), through the processor and the meter, and checks the
// spend record against what Anthropic bills for it at the published
// Haiku 4.5 prices, worked out by hand:
//
//	15 input tokens        × $1.00/MTok =  15.00 µ$
//	13 cache-write tokens  × $1.25/MTok =  16.25 µ$
//	12 cache-read tokens   × $0.10/MTok =   1.20 µ$
//	21 output tokens       × $5.00/MTok = 105.00 µ$
//	                                total = 137.45 µ$ = 137,450,000 p$
//
// Priced at the base input rate, as Sluice did before it priced cache
// writes, the 13 writes cost 13 µ$ and the request 134.2 µ$, rounded up
// to 135 µ$: 3.25 µ$ short of the bill.
func TestAnthropicCacheWriteBill(t *testing.T) {
	c := thirdPartyCassette(t, "anthropic/agw-messages-basic.yaml")
	if c.Request.URL != "https://api.anthropic.com/v1/messages" || c.Response.Code != 200 {
		t.Fatalf("unexpected cassette: %s answered %d", c.Request.URL, c.Response.Code)
	}
	for _, model := range []string{"claude-haiku-4-5-20251001", "haiku-explicit"} {
		t.Run(model, func(t *testing.T) {
			snap, ring, log := compileTestPolicy(t, haikuConfig)
			counters := limits.New(limits.Options{})
			led := &recordingLedger{}
			d := &Deps{
				Policy: func() *policies.Snapshot { return snap }, Ring: ring,
				Auth:     authz.NewChecker(ring, admission.NewLocal(counters, admission.LocalOptions{}), nil, func() time.Time { return t0 }),
				Admitter: admission.NewLocal(counters, admission.LocalOptions{}), Ledger: led, Principals: testPrincipals,
				Metrics: NewMetrics(prometheus.NewRegistry()), Log: log, Now: func() time.Time { return t0 },
			}
			body := c.Request.Body
			if model != "claude-haiku-4-5-20251001" {
				body = `{"max_tokens": 1024, "messages": [{"content": "Hello!", "role": "user"}], "model": "` + model + `"}`
			}
			ctx := testctx.Deadline(t)
			p := NewProcessor(d)
			p.Handle(ctx, reqHeaders("/v1/messages", false, authzMeta("config:k"), "anthropic-version", "2023-06-01"))
			p.Handle(ctx, reqBody(body))
			p.Handle(ctx, respHeaders("200", c.Response.Headers["Content-Type"][0]))
			p.Handle(ctx, respBody(c.Response.Body, true))
			if len(led.records) != 1 {
				t.Fatalf("%d records, want 1", len(led.records))
			}
			r := led.records[0]
			if r.Tokens[tokens.Input] != 40 || r.Tokens[tokens.CachedInput] != 12 || r.Tokens[tokens.CacheWrite] != 13 || r.Tokens[tokens.Output] != 21 || r.Estimated {
				t.Fatalf("record %+v; want the reported usage: 40 prompt tokens (12 read, 13 written), 21 output", r)
			}
			if r.CostPico != 137_450_000 {
				t.Errorf("charged %d p$, want Anthropic's bill, 137,450,000 p$ (137.45 µ$)", r.CostPico)
			}
		})
	}
}
