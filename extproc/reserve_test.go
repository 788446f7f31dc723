package extproc

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/sat"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/policies"
)

// reserveConfig prices a model at o1-pro's $600 per 1M output tokens, with
// a $1 daily budget on the team.
const reserveConfig = `
providers:
  - {name: openai, kind: openai, base_url: "https://api.openai.com", api_key: "sk-upstream"}
models:
  - {name: pro, provider: openai}
pricing:
  pro: {input: 150000000, output: 600000000, per_request: 5}
teams:
  - {name: t, models: [pro], limits: {budgets: [{micro_usd: 1000000, period: day}]}}
keys:
  - {name: k, team: t, sha256: %s}
`

// spyAdmitter records the claims it is asked to admit and hands them to a
// real admission.Local.
type spyAdmitter struct {
	claims []admission.Claim
	next   Admitter
}

func (s *spyAdmitter) Admit(ctx context.Context, c admission.Claim) (admission.Grant, error) {
	s.claims = append(s.claims, c)
	return s.next.Admit(ctx, c)
}

func (s *spyAdmitter) Settle(ctx context.Context, g admission.Grant, a admission.Actual) {
	s.next.Settle(ctx, g, a)
}

func reserveDeps(t *testing.T) (*Deps, *spyAdmitter, *recordingLedger) {
	t.Helper()
	snap, ring, log := compileTestPolicy(t, reserveConfig)
	counters := limits.New(limits.Options{})
	spy := &spyAdmitter{next: admission.NewLocal(counters, admission.LocalOptions{})}
	led := &recordingLedger{}
	return &Deps{
		Policy:     func() *policies.Snapshot { return snap },
		Ring:       ring,
		Auth:       authz.NewChecker(ring, admission.NewLocal(counters, admission.LocalOptions{}), nil, func() time.Time { return t0 }),
		Admitter:   spy,
		Ledger:     led,
		Principals: testPrincipals,
		Metrics:    NewMetrics(prometheus.NewRegistry()),
		Log:        log,
		Now:        func() time.Time { return t0 },
	}, spy, led
}

// TestReserveNeverWraps: max_tokens × n × price overflowed int64 and the
// negative worst case reserved $0, so a $1 budget admitted a request that
// could cost $42 million. The worst case is now exact (or saturated): the
// claim holds max_tokens × n output tokens and their whole cost, and the
// budget refuses it as more than it allows at all.
func TestReserveNeverWraps(t *testing.T) {
	ctx := testctx.Deadline(t)
	for _, tc := range []struct {
		name          string
		maxTokens, n  int64
		wantOut       int64
		wantCostAbove int64
	}{
		{"max_tokens 2^32-1 × n 128", 1<<32 - 1, 128, (1<<32 - 1) * 128, 329_853_488_256_000},
		{"max_tokens 1e9 × n 100", 1_000_000_000, 100, 100_000_000_000, 60_000_000_000_000},
		{"n 1", 1_000_000, 1, 1_000_000, 600_000_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, spy, led := reserveDeps(t)
			p := NewProcessor(d)
			p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
			resp := p.Handle(ctx, reqBody(fmt.Sprintf(`{"model":"pro","max_tokens":%d,"n":%d,"messages":[{"role":"user","content":"hi"}]}`, tc.maxTokens, tc.n)))
			if len(spy.claims) != 1 {
				t.Fatalf("%d claims, want 1", len(spy.claims))
			}
			c := spy.claims[0]
			if c.MaxOutputTokens != tc.wantOut {
				t.Errorf("reserved %d output tokens, want %d (max_tokens × n)", c.MaxOutputTokens, tc.wantOut)
			}
			if want := sat.Mul(tc.wantCostAbove, 1_000_000); c.CostPico < want || c.CostPico < 0 {
				t.Errorf("reserved cost %d p$, want at least %d µ$ (the output alone)", c.CostPico, tc.wantCostAbove)
			}
			im := resp.GetImmediateResponse()
			if im == nil || im.GetStatus().GetCode() != 429 || !strings.Contains(string(im.GetBody()), "insufficient_quota") || !strings.Contains(string(im.GetBody()), "at all") {
				t.Fatalf("a request whose worst case exceeds the $1 budget: %v, want 429 insufficient_quota \"at all\"", resp)
			}
			if len(led.records) != 0 {
				t.Errorf("a refused request left records: %+v", led.records)
			}
		})
	}
}

// TestMetricsNeverAddNegative: a record with negative or saturated counts
// (a cost that can no longer be negative, but guarded in one place) is
// observed without panicking, and only non-negative amounts are counted.
func TestMetricsNeverAddNegative(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	m.observe(ledger.Record{Model: "m", Endpoint: "chat", Outcome: "ok", Tokens: tokens.Counts{tokens.Input: -1, tokens.Output: math.MaxInt64, tokens.CachedInput: math.MinInt64}, CostPico: -5})
	if got := counterValue(t, m.cost.WithLabelValues("m")); got != 0 {
		t.Errorf("cost counter %v after a negative cost, want 0", got)
	}
	if got := counterValue(t, m.tokens.WithLabelValues("m", "output")); got != math.MaxInt64 {
		t.Errorf("output tokens counter %v, want %v", got, float64(math.MaxInt64))
	}
}

// TestCostMetricKeepsFractions: sluice_cost_micros_total adds each
// request's exact cost, fractions of a micro-dollar included: three
// requests of 0.14 µ$ add 0.42, not 3.
func TestCostMetricKeepsFractions(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	for range 3 {
		m.observe(ledger.Record{Model: "m", Endpoint: "embeddings", Outcome: "ok", Tokens: tokens.Counts{tokens.Input: 7}, CostPico: 140_000})
	}
	if got := counterValue(t, m.cost.WithLabelValues("m")); math.Abs(got-0.42) > 1e-12 {
		t.Errorf("cost counter %v µ$, want 0.42", got)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestReserveCacheWrites: the reservation prices every prompt token at the
// dearest rate the provider may bill it at — for a request that names
// cache_control, the 1-hour cache-write rate (2 × input by default), for
// one that does not, input — so the cost the provider later reports can
// never be above what was reserved.
func TestReserveCacheWrites(t *testing.T) {
	ctx := testctx.Deadline(t)
	for _, tc := range []struct {
		name, content string
		inRate        int64 // p$ per prompt token reserved
	}{
		{"no cache_control", `"hi"`, 150_000_000},
		{"cache_control", `[{"type":"text","text":"hi","cache_control":{"type":"ephemeral","ttl":"1h"}}]`, 300_000_000},
		// The same key to the provider's JSON parser.
		{"cache_control escaped", `[{"type":"text","text":"hi","cache\u005fcontrol":{"type":"ephemeral","ttl":"1h"}}]`, 300_000_000},
		{"cache_control all escaped", `[{"type":"text","text":"hi","\u0063\u0061che_control":{"type":"ephemeral"}}]`, 300_000_000},
		{"other escapes only", `"h\u00e9llo \"quoted\""`, 150_000_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, spy, _ := reserveDeps(t)
			p := NewProcessor(d)
			p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
			p.Handle(ctx, reqBody(`{"model":"pro","max_tokens":10,"messages":[{"role":"user","content":`+tc.content+`}]}`))
			if len(spy.claims) != 1 {
				t.Fatalf("%d claims, want 1", len(spy.claims))
			}
			c := spy.claims[0]
			want := c.InputTokens*tc.inRate + 10*600_000_000 + 5*1_000_000
			if c.InputTokens <= 0 || c.CostPico != want {
				t.Errorf("reserved %d p$ for %d prompt tokens, want %d (prompt at %d p$ a token, 10 output tokens, the fee)", c.CostPico, c.InputTokens, want, tc.inRate)
			}
		})
	}
}
