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

// TestUnroutedRequestGetsAJSONError: a request Sluice lets through without
// routing it (gateway.unknown_paths: pass) reaches the listener's
// no-provider route, a direct response; the client gets a 404 it can
// read — JSON, with content-type application/json, in Anthropic's error
// shape on Anthropic's paths and OpenAI's elsewhere — never text/plain.
// A client that sends Sluice's routing header itself is not routed by it:
// the provider sees nothing.
func TestUnroutedRequestGetsAJSONError(t *testing.T) {
	mock, addr := mockProvider(t, mockllm.Options{APIKey: "sk-upstream-compat", AnthropicAPIKey: "sk-ant-upstream"})
	s := startSluice(t, fmt.Sprintf(headersPolicy, addr)+"gateway: {unknown_paths: pass}\n")
	_, key := s.createKey(t, "t")
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-" + strings.ReplaceAll(t.Name(), "/", "-"), XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	eachProxy(t, b, func(t *testing.T, p proxy) {
		for _, tc := range []struct{ path, want string }{
			{"/v1/files", `{"error":{"message":"` + chain.NoRoute.Message + `","type":"invalid_request_error","param":null,"code":"no_route"}}`},
			{"/v1/messages/batches", `{"type":"error","error":{"type":"not_found_error","message":"` + chain.NoRoute.Message + `"}}`},
		} {
			for _, routing := range []string{"", "keyed"} {
				n := mock.Requests()
				c := call{path: tc.path, body: `{}`}
				if routing != "" {
					c.headers = map[string]string{chain.RoutingHeader: routing}
				}
				st, h, body := c.do(t, p.url, key)
				if st != 404 || h.Get("content-type") != "application/json" || strings.TrimSpace(body) != tc.want {
					t.Errorf("%s (routing header %q): %d %q %s, want 404 application/json %s", tc.path, routing, st, h.Get("content-type"), body, tc.want)
				}
				if mock.Requests() != n {
					t.Errorf("%s (routing header %q): the provider saw the request", tc.path, routing)
				}
			}
		}
	})
}
