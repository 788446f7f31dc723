package extproc

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/testctx"
)

// withHost is m with the request attribute Envoy sends for an attempt to a
// host of provider (its endpoint metadata, chain.UpstreamHostProviderAttribute).
func withHost(m *extprocsvc.ProcessingRequest, provider string) *extprocsvc.ProcessingRequest {
	m.Attributes = map[string]*structpb.Struct{chain.ExtProcAttributesKey: {Fields: map[string]*structpb.Value{
		chain.UpstreamHostProviderAttribute: structpb.NewStringValue(provider),
	}}}
	return m
}

// TestUpstreamProviderFromHost: the attempt's provider is its upstream
// host's, never the one its number would name — an aggregate cluster skips
// a member without healthy hosts, so attempt 1 may go to the second
// provider, which must get its own credential. Without a host provider,
// with one the model does not fall back to, or for a model other than the
// one the request was routed for, the attempt fails closed with 503 and
// no credential.
func TestUpstreamProviderFromHost(t *testing.T) {
	ctx := testctx.Deadline(t)
	credentials := []string{"authorization", "api-key", "x-api-key"}
	for _, tc := range []struct {
		name    string
		host    string // "" sends no attribute
		model   string // the handoff's; "" none
		body    string
		attempt string
		// success: the credential header and its value; refusal: the code
		wantHeader, wantValue, wantCode string
		servedBy                        string
	}{
		{name: "attempt 1 on the second provider's host", host: "az", attempt: "1", body: `{"model":"fb","messages":[]}`,
			wantHeader: "api-key", wantValue: "azkey", servedBy: "az"},
		{name: "attempt 2 back on the first provider's host", host: "openai", attempt: "2", model: "fb", body: `{"model":"fb-alias","messages":[]}`,
			wantHeader: "authorization", wantValue: "Bearer sk-upstream", servedBy: "openai"},
		{name: "no attempt count: the host decides", host: "compat", body: `{"model":"fb","messages":[]}`,
			wantHeader: "authorization", wantValue: "Bearer sk-compat", servedBy: "compat"},
		{name: "no host provider", attempt: "1", body: `{"model":"fb","messages":[]}`, wantCode: "fallback_misconfigured"},
		{name: "a provider the model does not fall back to", host: "claude", attempt: "1", body: `{"model":"fb","messages":[]}`, wantCode: "fallback_host_unknown"},
		{name: "an unknown provider", host: "nosuch", attempt: "1", body: `{"model":"fb","messages":[]}`, wantCode: "fallback_host_unknown"},
		{name: "routed for another model", host: "openai", attempt: "1", model: "fb-claude", body: `{"model":"fb","messages":[]}`, wantCode: "provider_not_configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, led := newDeps(t)
			u := NewUpstreamProcessor(d)
			extra := []string{chain.RoutingHeader, "sluice.fallback.fb"}
			if tc.attempt != "" {
				extra = append(extra, chain.AttemptCountHeader, tc.attempt)
			}
			h := reqHeaders("/v1/chat/completions", false, fallbackHandoff(tc.model), extra...)
			if tc.host != "" {
				h = withHost(h, tc.host)
			}
			var last *extprocsvc.ProcessingResponse
			for _, m := range []*extprocsvc.ProcessingRequest{h, reqBody(tc.body)} {
				last = u.Handle(ctx, m)
				if last.GetImmediateResponse() != nil {
					break
				}
			}
			if tc.wantCode != "" {
				ir := last.GetImmediateResponse()
				if ir.GetStatus().GetCode() != 503 || !strings.Contains(string(ir.GetBody()), `"code":"`+tc.wantCode+`"`) {
					t.Fatalf("reply %v, want a 503 %s", last, tc.wantCode)
				}
				for _, hv := range ir.GetHeaders().GetSetHeaders() {
					for _, c := range credentials {
						if hv.GetHeader().GetKey() == c {
							t.Errorf("the refusal sets %s", c)
						}
					}
					if hv.GetHeader().GetKey() == chain.ServedByHeader {
						t.Errorf("the refusal names %s as served-by, not one of the model's providers", hv.GetHeader().GetRawValue())
					}
				}
				return
			}
			set := setHeaders(last.GetRequestBody().GetResponse().GetHeaderMutation())
			if set[tc.wantHeader] != tc.wantValue {
				t.Errorf("credential %s = %q, want %q (set %v)", tc.wantHeader, set[tc.wantHeader], tc.wantValue, set)
			}
			for _, c := range credentials {
				if v, ok := set[c]; ok && c != tc.wantHeader {
					t.Errorf("another provider's credential header %s: %q", c, v)
				}
			}
			r := u.Handle(ctx, respHeaders("200", "application/json"))
			if got := setHeaders(r.GetResponseHeaders().GetResponse().GetHeaderMutation())[chain.ServedByHeader]; got != tc.servedBy {
				t.Errorf("served-by %q, want %q", got, tc.servedBy)
			}
			if len(led.records) != 0 {
				t.Errorf("the upstream processor recorded %v", led.records)
			}
		})
	}
}

// fallbackHandoff is the downstream processor's handoff for a chat
// request routed to model ("": a handoff that names none), as Envoy
// forwards it.
func fallbackHandoff(model string) *corev3.Metadata {
	return delivered(handoff{Path: "/v1/chat/completions", Model: model, RequestID: "rid-1"}.Encode(testKeys, t0))
}
