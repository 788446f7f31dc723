package extproc

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/testctx"
)

// TestTimeToFirstToken: the record's TTFT is the time to the first
// response chunk that carries bytes; an empty chunk before it (Envoy may
// send one) is not the first token.
func TestTimeToFirstToken(t *testing.T) {
	for _, tt := range []struct {
		name       string
		emptyFirst bool
		want       time.Duration // the fake clock steps 1 ms per reading
	}{
		{"first chunk has bytes", false, 3 * time.Millisecond},
		{"an empty chunk first", true, 3 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testctx.Deadline(t)
			d, led := newDeps(t)
			clock := t0
			d.Now = func() time.Time { return clock }
			p := NewProcessor(d) // started at t0
			p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
			p.Handle(ctx, reqBody(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			p.Handle(ctx, respHeaders("200", "text/event-stream"))
			if tt.emptyFirst {
				clock = t0.Add(time.Millisecond)
				p.Handle(ctx, respBody("", false))
			}
			clock = t0.Add(3 * time.Millisecond)
			p.Handle(ctx, respBody("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hello\"}}]}\n\n", false))
			clock = t0.Add(5 * time.Millisecond)
			p.Handle(ctx, respBody("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\ndata: [DONE]\n\n", true))
			if len(led.records) != 1 {
				t.Fatalf("%d records, want 1", len(led.records))
			}
			if got := led.records[0].TTFT; got != tt.want {
				t.Errorf("TTFT %v, want %v", got, tt.want)
			}
		})
	}
}

// TestLedgerErrorsCounted: a spend record the ledger refuses is counted
// in sluice_ledger_errors_total; one it stores is not.
func TestLedgerErrorsCounted(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want float64
	}{{"stored", nil, 0}, {"refused", errors.New("disk full"), 1}} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testctx.Deadline(t)
			d, led := newDeps(t)
			led.err = tt.err
			p := NewProcessor(d)
			p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
			p.Handle(ctx, reqBody(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
			p.Handle(ctx, respHeaders("200", "application/json"))
			p.Handle(ctx, respBody(chatJSON, true))
			if got := counterValue(t, d.Metrics.ledgerErrors); got != tt.want {
				t.Errorf("sluice_ledger_errors_total %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPathOnly: what a refusal and a panic's log line show of a :path is
// the path without its query or fragment (which may carry a credential),
// also when the path is nothing but a query.
func TestPathOnly(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/v1/chat/completions", "/v1/chat/completions"},
		{"/v1/x?key=sk-secret", "/v1/x"},
		{"/v1/x#frag", "/v1/x"},
		{"?key=sk-secret", ""},
		{"", ""},
	} {
		if got := pathOnly(tt.in); got != tt.want {
			t.Errorf("pathOnly(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Equivalent mutants gremlins leaves alive in this package:
//   - charge.go: "OutputTokens > outputCap" as ">=": at equality the
//     clamp sets the output to what it is; reasoning tokens, a part of the
//     output, cannot exceed it.
//   - metrics.go, addCount: "v > 0" as "v >= 0": adding 0 to a counter
//     changes nothing.
//   - processor.go, reserve: "req.N > 1" as ">= 1": multiplying by 1.
//   - processor.go, clip: "len(s) > n" as ">=": s[:len(s)] is s.
