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
		Auth:     authz.NewChecker(ring, admission.NewLocal(counters, admission.LocalOptions{}), nil, func() time.Time { return t0 }),
		Admitter: admission.NewLocal(counters, admission.LocalOptions{}), Ledger: &recordingLedger{}, Principals: testPrincipals,
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

// TestDeclaredBodyLimit: a content-length over gateway.max_request_body_bytes
// is refused with 413 body_too_large at the request headers, before any
// body is sent; one at the limit, or one the headers cannot vouch for
// (missing, empty, signed, duplicated, not digits), waits for the body,
// whose own size then decides.
func TestDeclaredBodyLimit(t *testing.T) {
	snap, ring, log := compileTestPolicy(t, bodyLimitConfig)
	counters := limits.New(limits.Options{})
	d := &Deps{
		Policy: func() *policies.Snapshot { return snap }, Ring: ring,
		Auth:     authz.NewChecker(ring, admission.NewLocal(counters, admission.LocalOptions{}), nil, func() time.Time { return t0 }),
		Admitter: admission.NewLocal(counters, admission.LocalOptions{}), Ledger: &recordingLedger{}, Principals: testPrincipals,
		Metrics: NewMetrics(prometheus.NewRegistry()), Log: log, Now: func() time.Time { return t0 },
	}
	const refused = "the request body is "
	for _, tt := range []struct {
		name    string
		headers []string
		message string // "" when the headers are continued
	}{
		{"none", nil, ""},
		{"zero", []string{"content-length", "0"}, ""},
		{"at the limit", []string{"content-length", "100"}, ""},
		{"leading zeros at the limit", []string{"content-length", "0000000000000000000000100"}, ""},
		{"one over", []string{"content-length", "101"}, refused + "101 bytes; this gateway accepts at most 100"},
		{"2^63-1", []string{"content-length", "9223372036854775807"}, refused + "9223372036854775807 bytes"},
		{"2^63", []string{"content-length", "9223372036854775808"}, refused + "more than 9223372036854775807 bytes"},
		{"2^64 and more", []string{"content-length", strings.Repeat("9", 400)}, refused + "more than 9223372036854775807 bytes"},
		{"negative", []string{"content-length", "-1"}, ""},
		{"plus sign", []string{"content-length", "+101"}, ""},
		{"empty", []string{"content-length", ""}, ""},
		{"spaces", []string{"content-length", " 101"}, ""},
		{"hex", []string{"content-length", "0x65"}, ""},
		{"duplicated", []string{"content-length", "101", "content-length", "101"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := NewProcessor(d)
			resp := p.Handle(testctx.Deadline(t), reqHeaders("/v1/chat/completions", false, authzMeta("config:k"), tt.headers...))
			ir := resp.GetImmediateResponse()
			switch {
			case tt.message == "" && ir != nil:
				t.Fatalf("refused at the headers: %d %s", ir.GetStatus().GetCode(), ir.GetBody())
			case tt.message == "" && resp.GetRequestHeaders() == nil:
				t.Fatalf("reply %v, want the request headers continued", resp)
			case tt.message != "" && (ir.GetStatus().GetCode() != 413 || !strings.Contains(string(ir.GetBody()), `"code":"body_too_large"`) || !strings.Contains(string(ir.GetBody()), tt.message)):
				t.Fatalf("reply %v, want 413 body_too_large saying %q", resp, tt.message)
			}
			if tt.message != "" {
				return
			}
			// The body's own size still decides.
			b := `{"model":"plain","messages":[{"role":"user","content":"` + strings.Repeat("x", 100) + `"}]}`
			if got := p.Handle(testctx.Deadline(t), reqBody(b)).GetImmediateResponse().GetStatus().GetCode(); got != 413 {
				t.Errorf("a %d-byte body after those headers: status %d, want 413", len(b), got)
			}
		})
	}
}
