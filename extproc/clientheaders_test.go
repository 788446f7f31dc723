package extproc

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/policies"
)

// TestResponseToClient: the response headers reply gives the client the
// gateway's request id (the x-request-id seen at request headers) in
// chain.RequestIDHeader, leaves the response's own x-request-id (the
// provider's) alone, and removes the account headers of the provider's
// kind but those its forward_client_headers lists; a refusal carries the
// gateway's id too.
func TestResponseToClient(t *testing.T) {
	ctx := testctx.Deadline(t)
	for _, tc := range []struct {
		name, config, model string
		want                mutation
	}{
		{"openai", testConfig, "gpt-4o-mini", mutation{
			Set: []string{chain.RequestIDHeader + ": rid-1"}, Remove: []string{"openai-organization", "openai-project", "anthropic-organization-id", "anthropic-workspace-id", "ocp-apim-subscription-key", "ocp-apim-subscription-region"}}},
		{"anthropic", testConfig, "sonnet", mutation{
			Set: []string{chain.RequestIDHeader + ": rid-1"}, Remove: []string{"openai-organization", "openai-project", "anthropic-organization-id", "anthropic-workspace-id", "ocp-apim-subscription-key", "ocp-apim-subscription-region"}}},
		{"forward_client_headers opts in", strings.Replace(testConfig, `api_key: "sk-upstream"}`, `api_key: "sk-upstream", forward_client_headers: [OpenAI-Project]}`, 1), "gpt-4o-mini", mutation{
			Set: []string{chain.RequestIDHeader + ": rid-1"}, Remove: []string{"openai-organization", "anthropic-organization-id", "anthropic-workspace-id", "ocp-apim-subscription-key", "ocp-apim-subscription-region"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := newDeps(t)
			snap, ring, _ := compileTestPolicy(t, tc.config)
			d.Policy, d.Ring = func() *policies.Snapshot { return snap }, ring
			p := NewProcessor(d)
			path := "/v1/chat/completions"
			if tc.name == "anthropic" {
				path = "/v1/messages"
			}
			p.Handle(ctx, reqHeaders(path, false, authzMeta("config:k")))
			if r := p.Handle(ctx, reqBody(`{"model":"`+tc.model+`","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`)); r.GetImmediateResponse() != nil {
				t.Fatalf("refused: %v", r)
			}
			m := respHeaders("200", "application/json")
			rh := m.GetResponseHeaders().GetHeaders()
			rh.Headers = append(rh.Headers, hdrs("x-request-id", "req_provider", "openai-organization", "org-gw", "openai-project", "proj_gw").GetHeaders()...)
			r := p.Handle(ctx, m)
			got := flatten(r.GetResponseHeaders().GetResponse().GetHeaderMutation())
			// The rate-limit headers (ratelimit.go) are not this test's.
			got.Set = slices.DeleteFunc(got.Set, func(h string) bool { return strings.HasPrefix(h, "x-ratelimit-") })
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("response headers mutation (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("refusal", func(t *testing.T) {
		d, _ := newDeps(t)
		p := NewProcessor(d)
		p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
		r := p.Handle(ctx, reqBody(`{"model":"no-such-model","messages":[]}`))
		if got := setHeaders(r.GetImmediateResponse().GetHeaders())[chain.RequestIDHeader]; got != "rid-1" {
			t.Errorf("refusal %s = %q, want rid-1: %v", chain.RequestIDHeader, got, r)
		}
	})
}
