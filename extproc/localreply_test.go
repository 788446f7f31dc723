package extproc

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/testctx"
)

// TestLocalReplyOfAnotherFilter: Envoy encodes another filter's local
// reply, and its own, through ext_proc (sendLocalReplyViaFilterChain), so
// response messages arrive for requests Sluice never admitted — an
// ext_authz denial (no request headers ever), the buffer limit's 413
// (request headers, no body). Each is answered with a plain continue, the
// status and body untouched; nothing is admitted, released or recorded —
// not even by a request body arriving after the reply — and the reply is
// counted by status.
func TestLocalReplyOfAnotherFilter(t *testing.T) {
	ctx := testctx.Deadline(t)
	plain := func(t *testing.T, r *extprocsvc.ProcessingResponse) {
		t.Helper()
		if r.GetImmediateResponse() != nil || r.GetResponseHeaders().GetResponse() != nil || r.GetResponseBody().GetResponse() != nil || r.GetDynamicMetadata() != nil {
			t.Errorf("reply %v, want a plain continue", r)
		}
		if r.GetResponseHeaders() == nil && r.GetResponseBody() == nil && r.GetRequestBody() == nil {
			t.Errorf("reply %v has the wrong type", r)
		}
	}
	denial := `{"error":{"message":"unknown API key","type":"authentication_error","param":null,"code":"unknown_key"}}`
	for _, tc := range []struct {
		name   string
		before []*extprocsvc.ProcessingRequest
		status string
	}{
		{"ext_authz denial: no request headers", nil, "401"},
		{"413 after the request headers", []*extprocsvc.ProcessingRequest{reqHeaders("/v1/chat/completions", false, authzMeta("config:k"))}, "413"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, led := newDeps(t)
			adm := d.Admitter.(*admission.Local)
			p := NewProcessor(d)
			for _, m := range tc.before {
				p.Handle(ctx, m)
			}
			// The reply's headers pass unchanged but for the gateway's
			// request id, when the request headers brought one.
			rh := p.Handle(ctx, respHeaders(tc.status, "application/json"))
			want := mutation{}
			if tc.before != nil {
				want.Set = []string{chain.RequestIDHeader + ": rid-1"}
			}
			if diff := cmp.Diff(want, flatten(rh.GetResponseHeaders().GetResponse().GetHeaderMutation())); diff != "" || rh.GetImmediateResponse() != nil || rh.GetDynamicMetadata() != nil {
				t.Errorf("response headers reply %v (-want +got):\n%s", rh, diff)
			}
			plain(t, p.Handle(ctx, respBody(denial, true)))
			// Envoy sends nothing of the request after its local reply;
			// a body now must not admit what can never be settled.
			plain(t, p.Handle(ctx, reqBody(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)))
			p.Cancel(ctx)
			if len(led.records) != 0 || adm.Held() != 0 {
				t.Errorf("records %+v, reservations held %d; want none", led.records, adm.Held())
			}
			var m dto.Metric
			if err := d.Metrics.localReplies.WithLabelValues(tc.status).Write(&m); err != nil {
				t.Fatal(err)
			}
			if got := m.GetCounter().GetValue(); got != 1 {
				t.Errorf("sluice_extproc_local_replies_total{status=%q} = %v, want 1", tc.status, got)
			}
		})
	}
}

// TestLocalReplyStatusLabel: a local reply is counted by its status when
// it is one HTTP can carry (100 to 599, both ends included), and as
// "other" otherwise, so a hostile status cannot grow the label set.
func TestLocalReplyStatusLabel(t *testing.T) {
	ctx := testctx.Deadline(t)
	for _, tt := range []struct{ status, label string }{
		{"99", "other"}, {"100", "100"}, {"401", "401"}, {"599", "599"}, {"600", "other"}, {"2x0", "other"},
	} {
		d, _ := newDeps(t)
		p := NewProcessor(d)
		p.Handle(ctx, respHeaders(tt.status, "application/json"))
		if got := counterValue(t, d.Metrics.localReplies.WithLabelValues(tt.label)); got != 1 {
			t.Errorf("status %s: %v counted as %q, want 1", tt.status, got, tt.label)
		}
	}
}
