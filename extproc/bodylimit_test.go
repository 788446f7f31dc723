package extproc

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/policies"
)

// bodyLimitConfig accepts request bodies of at most 100 bytes.
const bodyLimitConfig = `
gateway: {max_request_body_bytes: 100}
providers:
  - {name: openai, kind: openai, base_url: "https://api.openai.com", api_key: "sk-upstream"}
models:
  - {name: plain, provider: openai}
teams:
  - {name: t, models: [plain]}
keys:
  - {name: k, team: t, sha256: %s}
`

// TestBodyLimitIsInclusive: a body of exactly gateway.max_request_body_bytes
// is accepted, one byte more is refused with 413 body_too_large.
func TestBodyLimitIsInclusive(t *testing.T) {
	snap, ring, log := compileTestPolicy(t, bodyLimitConfig)
	counters := limits.New(limits.Options{})
	d := &Deps{
		Policy: func() *policies.Snapshot { return snap }, Ring: ring,
		Auth:     authz.NewChecker(ring, counters, func() time.Time { return t0 }),
		Admitter: admission.NewLocal(counters, admission.LocalOptions{}), Ledger: &recordingLedger{},
		Metrics: NewMetrics(prometheus.NewRegistry()), Log: log, Now: func() time.Time { return t0 },
	}
	body := func(n int) string {
		b := `{"model":"plain","messages":[{"role":"user","content":"`
		b += strings.Repeat("x", n-len(b)-len(`"}]}`))
		return b + `"}]}`
	}
	for _, tt := range []struct {
		size   int
		status int32 // 0: accepted
	}{{99, 0}, {100, 0}, {101, 413}} {
		p := NewProcessor(d)
		ctx := testctx.Deadline(t)
		p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
		b := body(tt.size)
		if len(b) != tt.size {
			t.Fatalf("test body is %d bytes, want %d", len(b), tt.size)
		}
		resp := p.Handle(ctx, reqBody(b))
		if got := int32(resp.GetImmediateResponse().GetStatus().GetCode()); got != tt.status {
			t.Errorf("a %d-byte body on a 100-byte limit: status %d, want %d (0: accepted)", tt.size, got, tt.status)
		}
	}
}
