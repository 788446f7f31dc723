package extproc

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/policies"
)

// TestProviderTotalExcessRule: the meter reads a response by the
// total_tokens rule of the provider that answered — by default a
// total_tokens above prompt + completion (Gemini's hidden thinking) is
// charged as output, and a provider configured with total_excess: ignore
// is charged the counts as reported.
func TestProviderTotalExcessRule(t *testing.T) {
	const config = `
providers:
  - {name: gemini, kind: openai-compatible, base_url: "http://gemini.internal:8000"}
  - {name: literal, kind: openai-compatible, base_url: "http://literal.internal:8000", usage: {total_excess: ignore}}
models:
  - {name: gem, provider: gemini, upstream: gemini-2.5-flash}
  - {name: lit, provider: literal, upstream: gemini-2.5-flash}
teams:
  - {name: t}
keys:
  - {name: k, team: t, sha256: %s}
`
	snap, ring, log := compileTestPolicy(t, config)
	counters := limits.New(limits.Options{})
	for model, wantOut := range map[string]int64{"gem": 12 + 383, "lit": 12} {
		t.Run(model, func(t *testing.T) {
			ctx := testctx.Deadline(t)
			led := &recordingLedger{}
			d := &Deps{
				Policy:     func() *policies.Snapshot { return snap },
				Ring:       ring,
				Auth:       authz.NewChecker(ring, admission.NewLocal(counters, admission.LocalOptions{}), nil, func() time.Time { return t0 }),
				Admitter:   admission.NewLocal(counters, admission.LocalOptions{}),
				Ledger:     led,
				Principals: testPrincipals,
				Metrics:    NewMetrics(prometheus.NewRegistry()),
				Log:        log,
				Now:        func() time.Time { return t0 },
			}
			p := NewProcessor(d)
			p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
			p.Handle(ctx, reqBody(`{"model":"`+model+`","messages":[{"role":"user","content":"Hello, how are you?"}]}`))
			p.Handle(ctx, respHeaders("200", "application/json"))
			p.Handle(ctx, respBody(`{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello!"}}],`+
				`"usage":{"prompt_tokens":7,"completion_tokens":12,"total_tokens":402}}`, true))
			if len(led.records) != 1 {
				t.Fatalf("%d records; want 1", len(led.records))
			}
			if r := led.records[0]; r.Tokens[tokens.Input] != 7 || r.Tokens[tokens.Output] != wantOut {
				t.Errorf("record input %d, output %d; want 7, %d", r.Tokens[tokens.Input], r.Tokens[tokens.Output], wantOut)
			}
		})
	}
}
