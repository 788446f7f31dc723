package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/policies"
)

const (
	openaiKey    = "sk-upstream-openai"
	anthropicKey = "sk-ant-upstream"
	azureKey     = "azure-upstream-key"
)

// gatewayConfig has one provider of each kind, all served by one mock.
const gatewayConfig = `
providers:
  - {name: openai, kind: openai, base_url: "https://api.openai.com", api_key: "` + openaiKey + `"}
  - {name: anthropic, kind: anthropic, base_url: "https://api.anthropic.com", api_key: "` + anthropicKey + `"}
  - {name: azure, kind: azure-openai, base_url: "https://contoso.openai.azure.com", api_key: "` + azureKey + `", api_version: "2024-10-21"}
  - {name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}
models:
  - {name: gpt-4o-mini, aliases: [mini], provider: openai, upstream: gpt-4o-mini-2024-07-18}
  - {name: gpt-5-nano, provider: openai}
  - {name: text-embedding-3-small, provider: openai}
  - {name: claude-sonnet-4, provider: anthropic, upstream: claude-sonnet-4-20250514}
  - {name: azure-4o, provider: azure, upstream: gpt4o-deployment}
  - {name: gpt-4o, provider: openai}
  - {name: llama-3.1-8b, provider: local}
  - {name: babbage-002, provider: openai}
pricing:
  gpt-4o-mini: {input: 150000, cached_input: 75000, output: 600000}
  gpt-5-nano: {input: 50000, output: 400000}
  claude-sonnet-4: {input: 3000000, cached_input: 300000, output: 15000000}
  text-embedding-3-small: {input: 20000, output: 0}
teams:
  - name: apps
    models: ["gpt-4o-mini", "gpt-5-nano", "text-embedding-3-small", "claude-*", "azure-4o", "llama-*"]
`

// gatewayBootstrap routes on the routing header to one cluster per
// provider (all the mock), with Sluice's filter chain from package chain.
func gatewayBootstrap(t *testing.T, sluiceAddr, mockAddr string, localAddr ...string) *bootstrapv3.Bootstrap {
	t.Helper()
	var routes []*routev3.Route
	for _, p := range []string{"openai", "anthropic", "azure", "local"} {
		routes = append(routes, &routev3.Route{
			Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}, Headers: []*routev3.HeaderMatcher{{
				Name: chain.RoutingHeader, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: p}}},
			}}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: p}, Timeout: durationpb.New(0)}},
		})
	}
	routes = append(routes, &routev3.Route{
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 404,
			Body: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "no provider selected"}}}},
	})
	b := bootstrap(t, []*clusterv3.Cluster{
		staticCluster(t, "sluice", sluiceAddr, true),
		staticCluster(t, "openai", mockAddr, false), staticCluster(t, "anthropic", mockAddr, false), staticCluster(t, "azure", mockAddr, false),
		staticCluster(t, "local", append(localAddr, mockAddr)[0], false),
	}, chain.HTTPFilters(chain.Options{Cluster: "sluice"})...)
	setRoutes(b, &routev3.RouteConfiguration{Name: "llm", VirtualHosts: []*routev3.VirtualHost{{Name: "llm", Domains: []string{"*"}, Routes: routes}}})
	// The listener as Sluice's xDS builds it for gatewayConfig's default
	// body limit: the buffer past it, Envoy's replies in JSON.
	sluiceListener(b, policies.Default().Gateway.MaxRequestBodyBytes)
	return b
}

type call struct {
	path, body string
	headers    map[string]string
	// chunked sends the body without a content-length.
	chunked bool
}

func (c call) do(t *testing.T, base, key string) (int, http.Header, string) {
	t.Helper()
	var body io.Reader = strings.NewReader(c.body)
	if c.chunked {
		body = io.MultiReader(body) // a length the client cannot know
	}
	req, _ := http.NewRequest("POST", base+c.path, body)
	req.Header.Set("content-type", "application/json")
	if strings.HasPrefix(c.path, "/v1/messages") {
		req.Header.Set("x-api-key", key)
	} else {
		req.Header.Set("authorization", "Bearer "+key)
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	return do(t, req)
}

// TestGatewayEndToEnd drives every endpoint, streaming and not, to every
// provider kind through Envoy and Sluice's real ext_authz + ext_proc, and
// checks what reached the provider, what the client got, and the spend
// record.
func TestGatewayEndToEnd(t *testing.T) {
	mock, mockAddr := mockProvider(t, mockllm.Options{APIKey: openaiKey, AnthropicAPIKey: anthropicKey, AzureAPIKey: azureKey})
	local, localAddr := mockProvider(t, mockllm.Options{}) // a local server that takes no key
	s := startSluice(t, gatewayConfig)
	_, key := s.createKey(t, "apps")
	b := gatewayBootstrap(t, s.grpcAddr, mockAddr, localAddr)

	eachProxy(t, b, func(t *testing.T, p proxy) {
		cases := []struct {
			name       string
			call       call
			wantStatus int
			// what the provider must have received
			wantPath, wantAuthHeader, wantAuthValue string
			wantBody                                func(t *testing.T, body map[string]any)
			// the client's body must contain
			wantContains string
		}{
			{
				name:       "chat, non-streaming, alias resolved and upstream model rewritten",
				call:       call{path: "/v1/chat/completions", body: `{"model":"mini","messages":[{"role":"user","content":"Hello there"}]}`},
				wantStatus: 200, wantPath: "/v1/chat/completions", wantAuthHeader: "Authorization", wantAuthValue: "Bearer " + openaiKey,
				wantBody: func(t *testing.T, b map[string]any) {
					if b["model"] != "gpt-4o-mini-2024-07-18" {
						t.Errorf("upstream model %v", b["model"])
					}
				},
				wantContains: `"chat.completion"`,
			},
			{
				name:       "chat, streaming: include_usage forced on",
				call:       call{path: "/v1/chat/completions", body: `{"model":"gpt-5-nano","stream":true,"messages":[{"role":"user","content":"Hi"}]}`},
				wantStatus: 200, wantPath: "/v1/chat/completions", wantAuthHeader: "Authorization", wantAuthValue: "Bearer " + openaiKey,
				wantBody: func(t *testing.T, b map[string]any) {
					so, _ := b["stream_options"].(map[string]any)
					if so["include_usage"] != true {
						t.Errorf("stream_options %v: include_usage not forced", b["stream_options"])
					}
				},
				wantContains: "data: [DONE]",
			},
			{
				name:       "completions, streaming",
				call:       call{path: "/v1/completions", body: `{"model":"gpt-5-nano","stream":true,"prompt":"Say hi"}`},
				wantStatus: 200, wantPath: "/v1/completions", wantAuthHeader: "Authorization", wantAuthValue: "Bearer " + openaiKey,
				wantContains: "data: [DONE]",
			},
			{
				name:       "embeddings",
				call:       call{path: "/v1/embeddings", body: `{"model":"text-embedding-3-small","input":"hello"}`},
				wantStatus: 200, wantPath: "/v1/embeddings", wantAuthHeader: "Authorization", wantAuthValue: "Bearer " + openaiKey,
				wantContains: `"embedding"`,
			},
			{
				name:       "responses, streaming",
				call:       call{path: "/v1/responses", body: `{"model":"gpt-5-nano","stream":true,"input":"Say hi"}`},
				wantStatus: 200, wantPath: "/v1/responses", wantAuthHeader: "Authorization", wantAuthValue: "Bearer " + openaiKey,
				wantContains: "response.completed",
			},
			{
				name:       "anthropic messages, streaming: provider key and default anthropic-version",
				call:       call{path: "/v1/messages", body: `{"model":"claude-sonnet-4","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`},
				wantStatus: 200, wantPath: "/v1/messages", wantAuthHeader: "X-Api-Key", wantAuthValue: anthropicKey,
				wantBody: func(t *testing.T, b map[string]any) {
					if b["model"] != "claude-sonnet-4-20250514" {
						t.Errorf("upstream model %v", b["model"])
					}
				},
				wantContains: "message_stop",
			},
			{
				name:       "azure chat: deployment path, api-version and api-key",
				call:       call{path: "/v1/chat/completions", body: `{"model":"azure-4o","messages":[{"role":"user","content":"Hi"}]}`},
				wantStatus: 200, wantPath: "/openai/deployments/gpt4o-deployment/chat/completions", wantAuthHeader: "Api-Key", wantAuthValue: azureKey,
				wantContains: `"chat.completion"`,
			},
			{
				name:       "completions, non-streaming",
				call:       call{path: "/v1/completions", body: `{"model":"gpt-5-nano","prompt":"Say hi","max_tokens":5}`},
				wantStatus: 200, wantPath: "/v1/completions", wantAuthHeader: "Authorization", wantAuthValue: "Bearer " + openaiKey,
				wantContains: `"text_completion"`,
			},
			{
				name:       "responses, non-streaming",
				call:       call{path: "/v1/responses", body: `{"model":"gpt-5-nano","input":"Say hi"}`},
				wantStatus: 200, wantPath: "/v1/responses", wantAuthHeader: "Authorization", wantAuthValue: "Bearer " + openaiKey,
				wantContains: `"response"`,
			},
			{
				name:       "anthropic messages, non-streaming",
				call:       call{path: "/v1/messages", body: `{"model":"claude-sonnet-4","max_tokens":64,"messages":[{"role":"user","content":"Hi"}]}`, headers: map[string]string{"anthropic-version": "2023-06-01"}},
				wantStatus: 200, wantPath: "/v1/messages", wantAuthHeader: "X-Api-Key", wantAuthValue: anthropicKey,
				wantContains: `"type":"message"`,
			},
			{
				name:       "azure chat, streaming",
				call:       call{path: "/v1/chat/completions", body: `{"model":"azure-4o","stream":true,"messages":[{"role":"user","content":"Hi"}]}`},
				wantStatus: 200, wantPath: "/openai/deployments/gpt4o-deployment/chat/completions", wantAuthHeader: "Api-Key", wantAuthValue: azureKey,
				wantContains: "data: [DONE]",
			},
			{
				name:       "azure embeddings",
				call:       call{path: "/v1/embeddings", body: `{"model":"azure-4o","input":"hello"}`},
				wantStatus: 200, wantPath: "/openai/deployments/gpt4o-deployment/embeddings", wantAuthHeader: "Api-Key", wantAuthValue: azureKey,
				wantContains: `"embedding"`,
			},
			{
				name:       "openai-compatible without a key: no credential is sent",
				call:       call{path: "/v1/chat/completions", body: `{"model":"llama-3.1-8b","stream":true,"messages":[{"role":"user","content":"Hi"}]}`},
				wantStatus: 200, wantPath: "/v1/chat/completions", wantAuthHeader: "Authorization", wantAuthValue: "",
				wantContains: "data: [DONE]",
			},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				mock.Reset()
				local.Reset()
				status, _, body := tc.call.do(t, p.url, key)
				if status != tc.wantStatus || !strings.Contains(body, tc.wantContains) {
					t.Fatalf("got %d %.300s", status, body)
				}
				got := append(mock.Received(), local.Received()...)
				if len(got) != 1 {
					t.Fatalf("provider saw %d requests", len(got))
				}
				r := got[0]
				if r.Path != tc.wantPath {
					t.Errorf("provider path %q, want %q", r.Path, tc.wantPath)
				}
				if v := r.Header.Get(tc.wantAuthHeader); v != tc.wantAuthValue {
					t.Errorf("provider %s = %q, want %q", tc.wantAuthHeader, v, tc.wantAuthValue)
				}
				for _, h := range []string{"Authorization", "X-Api-Key", "Api-Key"} {
					if strings.Contains(r.Header.Get(h), key) {
						t.Errorf("the caller's key reached the provider in %s", h)
					}
				}
				if tc.wantBody != nil {
					var m map[string]any
					if err := json.Unmarshal(r.Body, &m); err != nil {
						t.Fatalf("provider body: %v", err)
					}
					tc.wantBody(t, m)
				}
			})
		}

		// The body's code is the provider's for the same refusal (a JSON
		// string, or null where OpenAI sends null), its message the
		// provider's words where it has its own.
		denials := []struct {
			name         string
			call         call
			status       int
			code, substr string
		}{
			{"model not on the allow-list", call{path: "/v1/chat/completions", body: `{"model":"gpt-4o","messages":[]}`}, 403, `"model_not_found"`, "does not have access to model `gpt-4o`"},
			{"unknown model", call{path: "/v1/chat/completions", body: `{"model":"gpt-9","messages":[]}`}, 404, `"model_not_found"`, "The model `gpt-9` does not exist or you do not have access to it."},
			{"malformed JSON", call{path: "/v1/chat/completions", body: `{"model":"mini",`}, 400, "null", "We could not parse the JSON body of your request."},
			{"model is a number", call{path: "/v1/chat/completions", body: `{"model":5,"messages":[]}`}, 400, `"invalid_type"`, "Invalid type for 'model': expected a string, but got an integer instead."},
			{"missing model", call{path: "/v1/chat/completions", body: `{"messages":[]}`}, 400, "null", "you must provide a model parameter"},
			{"unknown path", call{path: "/v1/files", body: `{}`}, 404, "null", "Invalid URL (POST /v1/files)."},
			{"Anthropic model on the OpenAI endpoint", call{path: "/v1/chat/completions", body: `{"model":"claude-sonnet-4","messages":[]}`}, 400, `"unsupported_endpoint"`, "call /v1/messages"},
		}
		for _, d := range denials {
			t.Run("denied: "+d.name, func(t *testing.T) {
				mock.Reset()
				status, _, body := d.call.do(t, p.url, key)
				if status != d.status || !strings.Contains(body, `"code":`+d.code+`}`) || !strings.Contains(body, d.substr) {
					t.Errorf("got %d %s; want %d code %s %q", status, body, d.status, d.code, d.substr)
				}
				if mock.Requests() != 0 {
					t.Error("a denied request reached the provider")
				}
			})
		}
	})

	// Every admitted request has a spend record with tokens and cost.
	out := s.run(t, "spend", "--by", "model", "--format", "csv")
	for _, m := range []string{"gpt-4o-mini", "gpt-5-nano", "claude-sonnet-4", "text-embedding-3-small", "azure-4o", "llama-3.1-8b"} {
		if !strings.Contains(out, "\n"+m+",") {
			t.Errorf("spend report lacks %s:\n%s", m, out)
		}
	}
}

// TestFixturesAccounting replays the recorded OpenAI traffic in
// ../shared/fixtures/openai through the whole path. Accounting must equal
// the recorded usage exactly; where the recording has no usage
// (chat-streaming.yaml, completion-streaming.yaml were requested without
// include_usage) the request reaches the provider with include_usage
// forced on and, the recording having none, the tokenizer counts the
// output and the record is marked estimated. Provider errors are charged
// nothing.
func TestFixturesAccounting(t *testing.T) {
	dir := fixturesDir(t)
	s := startSluice(t, gatewayConfig+fixtureModels)
	_, key := s.createKey(t, "fixtures")
	for _, file := range []string{
		"chat-basic.yaml", "chat-json-mode.yaml", "chat-multiturn.yaml", "chat-tools.yaml", "chat-streaming.yaml", "chat-bad-request.yaml",
		"completion-basic.yaml", "completion-streaming.yaml", "completion-streaming-usage.yaml",
		"embeddings-basic.yaml", "embeddings-tokens.yaml", "embeddings-bad-request.yaml",
	} {
		t.Run(file, func(t *testing.T) {
			c, err := mockllm.LoadCassette(dir + "/" + file)
			if err != nil {
				t.Fatal(err)
			}
			it := c.Interactions[0]
			want, hasUsage := recordedUsage(t, it.Response.Body)
			mock, mockAddr := mockProvider(t, mockllm.Options{Cassettes: []*mockllm.Cassette{c}})
			eachProxy(t, gatewayBootstrap(t, s.grpcAddr, mockAddr), func(t *testing.T, p proxy) {
				rid := "fx-" + file + "-" + p.name()
				path := it.Request.URL[strings.Index(it.Request.URL, "/v1/"):]
				status, _, body := call{path: path, body: it.Request.Body, headers: map[string]string{"x-request-id": rid}}.do(t, p.url, key)
				if status != it.Response.Code {
					t.Fatalf("status %d, want the recorded %d: %.200s", status, it.Response.Code, body)
				}
				if body != it.Response.Body {
					t.Errorf("the client did not get the recorded body byte for byte")
				}
				forced := strings.Contains(it.Request.Body, `"stream": true`) && !strings.Contains(it.Request.Body, "include_usage")
				if forced && !strings.Contains(string(mock.Received()[0].Body), `"include_usage":true`) {
					t.Errorf("include_usage not forced on: %s", mock.Received()[0].Body)
				}
				rec := s.record(t, rid)
				switch {
				case it.Response.Code != 200:
					if rec.Tokens[tokens.Input] != 0 || rec.Tokens[tokens.Output] != 0 || rec.CostPico != 0 || rec.Outcome != "upstream_error" {
						t.Errorf("provider error charged: %+v", rec)
					}
				case hasUsage:
					got := [3]int64{rec.Tokens[tokens.Input], rec.Tokens[tokens.CachedInput], rec.Tokens[tokens.Output]}
					if got != want || rec.Estimated || rec.Tokens[tokens.Reasoning] != wantReasoning(it.Response.Body) {
						t.Errorf("accounting %v reasoning %d estimated %v, want the recorded %v reasoning %d", got, rec.Tokens[tokens.Reasoning], rec.Estimated, want, wantReasoning(it.Response.Body))
					}
				default:
					if !rec.Estimated || rec.Tokens[tokens.Output] == 0 || rec.Tokens[tokens.Input] == 0 {
						t.Errorf("no usage recorded: want a tokenizer estimate, got %+v", rec)
					}
				}
				if rec.Status != it.Response.Code {
					t.Errorf("record status %d", rec.Status)
				}
			})
		})
	}
}

// fixtureModels adds the recorded models to gatewayConfig, for team
// "fixtures".
const fixtureModels = `
  - name: fixtures
    models: ["gpt-5-nano", "babbage-002", "text-embedding-3-small"]
`

// TestGatewayMeteringEdges: gzip-compressed and oddly split streams are
// metered exactly like plain ones; a stream the client abandons is settled
// for what was delivered; the final reply's usage metadata reaches Envoy.
func TestGatewayMeteringEdges(t *testing.T) {
	_, mockAddr := mockProvider(t, mockllm.Options{APIKey: openaiKey})
	s := startSluice(t, gatewayConfig)
	_, key := s.createKey(t, "apps")
	eachProxy(t, gatewayBootstrap(t, s.grpcAddr, mockAddr), func(t *testing.T, p proxy) {
		body := `{"model":"gpt-5-nano","stream":true,"messages":[{"role":"user","content":"Count to ten"}]}`
		plain, gz := "plain-"+p.name(), "gzip-"+p.name()
		if st, _, b := (call{path: "/v1/chat/completions", body: body, headers: map[string]string{"x-request-id": plain}}).do(t, p.url, key); st != 200 {
			t.Fatalf("%d %s", st, b)
		}
		// gzip on the wire, split at every 7 bytes: mid-event, mid-rune.
		if st, _, b := (call{path: "/v1/chat/completions", body: body, headers: map[string]string{"x-request-id": gz, "x-mock-gzip": "1", "x-mock-split": "7"}}).do(t, p.url, key); st != 200 {
			t.Fatalf("%d %s", st, b)
		}
		a, g := s.record(t, plain), s.record(t, gz)
		if a.Tokens[tokens.Input] == 0 || a.Tokens[tokens.Output] == 0 || a.Estimated || g.Tokens[tokens.Input] != a.Tokens[tokens.Input] || g.Tokens[tokens.Output] != a.Tokens[tokens.Output] || g.Estimated {
			t.Errorf("gzip+split metered %d/%d (estimated %v), plain %d/%d (estimated %v)", g.Tokens[tokens.Input], g.Tokens[tokens.Output], g.Estimated, a.Tokens[tokens.Input], a.Tokens[tokens.Output], a.Estimated)
		}
		if p.emu != nil {
			var found bool
			for _, x := range p.emu.Exchanges() {
				if m := x.Metadata[chain.UsageNamespace]; m != nil && m.GetFields()["output_tokens"].GetNumberValue() == float64(a.Tokens[tokens.Output]) {
					found = true
				}
			}
			if !found {
				t.Error("the usage metadata of the final reply did not reach Envoy's dynamic metadata")
			}
		}

		// The client reads the first chunk of a slow stream and leaves.
		cut := "cut-" + p.name()
		req, _ := http.NewRequest("POST", p.url+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-5-nano","stream":true,"messages":[{"role":"user","content":"A long story"}]}`))
		req.Header.Set("authorization", "Bearer "+key)
		req.Header.Set("x-request-id", cut)
		req.Header.Set("x-mock-chunks", "20")
		req.Header.Set("x-mock-interval", "50ms")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if _, err := resp.Body.Read(buf); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		rec := s.awaitRecord(t, cut)
		if rec.Outcome != "cancelled" || rec.Tokens[tokens.Input] == 0 || rec.Tokens[tokens.Output] >= a.Tokens[tokens.Output]+20 {
			t.Errorf("abandoned stream settled as %+v", rec)
		}
	})
}

// TestResponseTrailersSettle: a provider response that ends in trailers
// (no body chunk with end_of_stream reaches ext_proc) is settled on the
// trailers, before they reach the client: the record is in the ledger the
// moment the client has read the whole response, with outcome ok and the
// usage the provider reported — the same as without trailers — and the
// trailers reply carries the usage metadata.
func TestResponseTrailersSettle(t *testing.T) {
	_, mockAddr := mockProvider(t, mockllm.Options{APIKey: openaiKey})
	s := startSluice(t, gatewayConfig)
	_, key := s.createKey(t, "apps")
	eachProxy(t, gatewayBootstrap(t, s.grpcAddr, mockAddr), func(t *testing.T, p proxy) {
		for _, tc := range []struct{ name, body string }{
			{"stream", `{"model":"gpt-5-nano","stream":true,"messages":[{"role":"user","content":"Count to ten"}]}`},
			{"json", `{"model":"gpt-5-nano","messages":[{"role":"user","content":"Count to ten"}]}`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				plain, trailed := "plain-"+tc.name+"-"+p.name(), "trailers-"+tc.name+"-"+p.name()
				if st, _, b := (call{path: "/v1/chat/completions", body: tc.body, headers: map[string]string{"x-request-id": plain}}).do(t, p.url, key); st != 200 {
					t.Fatalf("%d %s", st, b)
				}
				req, _ := http.NewRequest("POST", p.url+"/v1/chat/completions", strings.NewReader(tc.body))
				req.Header.Set("authorization", "Bearer "+key)
				req.Header.Set("x-request-id", trailed)
				req.Header.Set("x-mock-trailer", "x-upstream-done=1")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || resp.Trailer.Get("X-Upstream-Done") != "1" {
					t.Fatalf("status %d, trailers %v, read %v", resp.StatusCode, resp.Trailer, err)
				}
				// Read once, not awaited: durable before the final reply.
				var got *ledger.Record
				for _, r := range s.records(t) {
					if r.ClientRequestID == trailed {
						got = &r
					}
				}
				if got == nil {
					t.Fatal("no spend record once the client had the whole response")
				}
				want := s.record(t, plain)
				if got.Outcome != "ok" || got.Estimated || got.Tokens[tokens.Input] != want.Tokens[tokens.Input] || got.Tokens[tokens.Output] != want.Tokens[tokens.Output] || got.Tokens[tokens.Output] == 0 || got.CostPico != want.CostPico {
					t.Errorf("settled %+v; want ok with the reported usage of %+v", *got, want)
				}
				if p.emu == nil {
					return
				}
				var md *structpb.Struct
				for _, x := range p.emu.Exchanges() {
					for _, e := range x.ExtProc {
						if e.Received.GetResponseTrailers() != nil {
							md = e.Received.GetDynamicMetadata()
						}
					}
				}
				if f := md.GetFields()[chain.UsageNamespace].GetStructValue().GetFields(); f["outcome"].GetStringValue() != "ok" || f["output_tokens"].GetNumberValue() != float64(want.Tokens[tokens.Output]) {
					t.Errorf("trailers reply metadata %v; want outcome ok and %d output tokens", md, want.Tokens[tokens.Output])
				}
			})
		}
	})
}
