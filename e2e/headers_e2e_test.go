package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/xds"
)

// headersPolicy routes four models to one mock, through providers that
// inject a credential: an OpenAI-compatible one removing every client
// account header, one forwarding openai-project, and an Anthropic one.
const headersPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
providers:
  - {name: keyed, kind: openai-compatible, base_url: "http://%[1]s", api_key: "sk-upstream-compat"}
  - {name: fwd, kind: openai-compatible, base_url: "http://%[1]s", api_key: "sk-upstream-compat", forward_client_headers: [OpenAI-Project]}
  - {name: ant, kind: anthropic, base_url: "http://%[1]s", api_key: "sk-ant-upstream"}
models:
  - {name: m-keyed, provider: keyed}
  - {name: m-fwd, provider: fwd}
  - {name: m-ha, providers: [{name: keyed}, {name: fwd}]}
  - {name: claude, provider: ant}
teams: [{name: t}]
`

// TestProviderSeesOnlyWhatSluiceSends: through the listener, routes and
// clusters Sluice's xDS server generates, the provider receives neither
// Sluice's routing header (the route removes it once it has routed on it)
// nor the client's account-selection headers next to the credential Sluice
// injected, but those a provider's forward_client_headers keeps. What the
// mock recorded is the proof.
func TestProviderSeesOnlyWhatSluiceSends(t *testing.T) {
	mock, addr := mockProvider(t, mockllm.Options{APIKey: "sk-upstream-compat", AnthropicAPIKey: "sk-ant-upstream"})
	s := startSluice(t, fmt.Sprintf(headersPolicy, addr))
	_, key := s.createKey(t, "t")
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-" + strings.ReplaceAll(t.Name(), "/", "-"), XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	client := map[string]string{
		"openai-organization":       "org-client",
		"openai-project":            "proj-client",
		"anthropic-workspace-id":    "wrkspc-client",
		"anthropic-organization-id": "org-client",
		"x-client-header":           "kept",
	}
	eachProxy(t, b, func(t *testing.T, p proxy) {
		for _, tc := range []struct {
			model, path, body string
			absent            []string
			present           map[string]string
		}{
			{"m-keyed", "/v1/chat/completions", `{"model":"m-keyed","messages":[{"role":"user","content":"hi"}]}`,
				[]string{chain.RoutingHeader, "openai-organization", "openai-project"}, map[string]string{"x-client-header": "kept", "authorization": "Bearer sk-upstream-compat"}},
			{"m-fwd", "/v1/chat/completions", `{"model":"m-fwd","messages":[{"role":"user","content":"hi"}]}`,
				[]string{chain.RoutingHeader, "openai-organization"}, map[string]string{"openai-project": "proj-client"}},
			{"m-ha (fallback)", "/v1/chat/completions", `{"model":"m-ha","messages":[{"role":"user","content":"hi"}]}`,
				[]string{chain.RoutingHeader, chain.AttemptCountHeader, "openai-organization", "openai-project"}, nil},
			{"claude", "/v1/messages", `{"model":"claude","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
				[]string{chain.RoutingHeader, "anthropic-workspace-id", "anthropic-organization-id", "authorization"}, map[string]string{"x-api-key": "sk-ant-upstream"}},
		} {
			t.Run(tc.model, func(t *testing.T) {
				n := mock.Requests()
				st, _, body := call{path: tc.path, body: tc.body, headers: client}.do(t, p.url, key)
				if st != 200 {
					t.Fatalf("%d %s", st, body)
				}
				got := mock.Received()
				if mock.Requests() != n+1 || len(got) == 0 {
					t.Fatalf("the provider saw %d requests, want 1", mock.Requests()-n)
				}
				h := got[len(got)-1].Header
				for _, k := range tc.absent {
					if v := h.Values(k); len(v) > 0 {
						t.Errorf("the provider received %s: %q", k, v)
					}
				}
				for k, want := range tc.present {
					if v := h.Get(k); v != want {
						t.Errorf("the provider received %s %q, want %q", k, v, want)
					}
				}
			})
		}
	})
}

// TestUnknownPathsPass: under gateway.unknown_paths: pass a path Sluice
// does not serve goes to the provider gateway.pass_to names for its API
// (OpenAI's here; Anthropic's by default, its only provider), with that
// provider's credential and the caller's removed, whatever routing header
// the client sends; the client gets the provider's answer unchanged. It is
// counted against the caller's request rate and never recorded as spend.
func TestUnknownPathsPass(t *testing.T) {
	mock, addr := mockProvider(t, mockllm.Options{APIKey: "sk-upstream-compat", AnthropicAPIKey: "sk-ant-upstream"})
	policy := strings.Replace(fmt.Sprintf(headersPolicy, addr), "teams: [{name: t}]", "teams: [{name: t}, {name: slow, limits: {requests: {per_minute: 3}}}]", 1)
	s := startSluice(t, policy+"gateway: {unknown_paths: pass, pass_to: {openai: keyed}}\n")
	_, key := s.createKey(t, "t")
	_, slowKey := s.createKey(t, "slow")
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-" + strings.ReplaceAll(t.Name(), "/", "-"), XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	eachProxy(t, b, func(t *testing.T, p proxy) {
		for _, tc := range []struct {
			path, body         string
			credential, secret string
			account            string // the provider kind's account header, removed
			want               string // the mock's own 404 for the path, unchanged
		}{
			{"/v1/files?purpose=batch", `{}`, "authorization", "Bearer sk-upstream-compat", "openai-organization",
				`{"error":{"message":"mock: no endpoint at /v1/files","type":"invalid_request_error","param":null,"code":"model_not_found"}}`},
			{"/v1/messages/unlisted", `{"requests":[]}`, "x-api-key", "sk-ant-upstream", "anthropic-workspace-id",
				`{"type":"error","error":{"type":"not_found_error","message":"mock: no endpoint at /v1/messages/unlisted"}}`},
		} {
			for _, routing := range []string{"", "fwd", "ant", "keyed"} {
				n := mock.Requests()
				c := call{path: tc.path, body: tc.body, headers: map[string]string{tc.account: "client-account"}}
				if routing != "" {
					c.headers[chain.RoutingHeader] = routing
				}
				st, _, body := c.do(t, p.url, key)
				if st != 404 || strings.TrimSpace(body) != tc.want {
					t.Errorf("%s (routing header %q): %d %s, want the provider's 404 %s", tc.path, routing, st, body, tc.want)
				}
				got := mock.Received()
				if mock.Requests() != n+1 || len(got) == 0 {
					t.Fatalf("%s (routing header %q): the provider saw %d requests, want 1", tc.path, routing, mock.Requests()-n)
				}
				r := got[len(got)-1]
				if r.Path+"?"+r.RawQuery != tc.path && r.Path != tc.path {
					t.Errorf("%s: the provider got %s?%s", tc.path, r.Path, r.RawQuery)
				}
				if v := r.Header.Get(tc.credential); v != tc.secret {
					t.Errorf("%s: the provider got %s %q, want %q", tc.path, tc.credential, v, tc.secret)
				}
				for _, k := range []string{chain.RoutingHeader, tc.account} {
					if v := r.Header.Values(k); len(v) > 0 {
						t.Errorf("%s: the provider got %s %q", tc.path, k, v)
					}
				}
				if strings.Contains(strings.Join(r.Header.Values("authorization"), ",")+r.Header.Get("x-api-key"), key) {
					t.Errorf("%s: the caller's key reached the provider", tc.path)
				}
				if string(r.Body) != tc.body {
					t.Errorf("%s: the provider got body %q, want %q", tc.path, r.Body, tc.body)
				}
			}
		}
		// Counted: of a team's 3 requests a minute, the harness's key check
		// (waitForKey) took one; the third passed request is refused
		// before any provider sees it.
		for i := range 3 {
			n := mock.Requests()
			st, _, body := call{path: "/v1/files", body: `{}`}.do(t, p.url, slowKey)
			if want := map[bool]int{true: 404, false: 429}[i < 2]; st != want {
				t.Errorf("passed request %d of a team allowed 3 a minute (one taken): %d %s, want %d", i+1, st, body, want)
			}
			if i == 2 && mock.Requests() != n {
				t.Errorf("the refused request reached the provider")
			}
		}
	})
	if recs := s.records(t); len(recs) != 0 {
		t.Errorf("passed requests were recorded as spend: %+v", recs)
	}
}
