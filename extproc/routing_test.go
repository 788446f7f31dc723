package extproc

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/chain"
)

// countingAdmitter wraps the real admitter and counts its calls.
type countingAdmitter struct {
	Admitter
	mu              sync.Mutex
	admits, settles int
}

func (c *countingAdmitter) Admit(ctx context.Context, cl admission.Claim) (admission.Grant, error) {
	c.mu.Lock()
	c.admits++
	c.mu.Unlock()
	return c.Admitter.Admit(ctx, cl)
}

func (c *countingAdmitter) Settle(ctx context.Context, g admission.Grant, a admission.Actual) {
	c.mu.Lock()
	c.settles++
	c.mu.Unlock()
	c.Admitter.Settle(ctx, g, a)
}

func countAdmissions(d *Deps) *countingAdmitter {
	c := &countingAdmitter{Admitter: d.Admitter}
	d.Admitter = c
	return c
}

// mutation is a header mutation flattened for exact comparison: set
// headers as "key: value" in order, then the removed keys.
type mutation struct {
	Set    []string
	Remove []string
}

func flatten(hm *extprocsvc.HeaderMutation) mutation {
	var m mutation
	for _, h := range hm.GetSetHeaders() {
		m.Set = append(m.Set, h.GetHeader().GetKey()+": "+string(h.GetHeader().GetRawValue()))
	}
	m.Remove = hm.GetRemoveHeaders()
	return m
}

func contentLength(body string) string { return fmt.Sprintf("content-length: %d", len(body)) }

// denied checks an ImmediateResponse's status and stable code.
func denied(t *testing.T, r *extprocsvc.ProcessingResponse, status int, code string) {
	t.Helper()
	im := r.GetImmediateResponse()
	if im == nil || int(im.GetStatus().GetCode()) != status || !strings.Contains(string(im.GetBody()), `"`+code+`"`) {
		t.Fatalf("got %v, want an immediate %d %s", r, status, code)
	}
}

var otherCredentials = []string{"x-api-key", "api-key"}

func TestWeightedRouting(t *testing.T) {
	tests := []struct {
		name         string
		path, body   string
		n            uint64 // the draw
		wantStatus   int    // 0: routed
		wantCode     string
		want         mutation
		wantBody     string // "": body unchanged
		wantProvider string
		wantUpstream string
	}{
		{name: "draw 0 of weights 1:3: openai, model-level upstream", path: "/v1/chat/completions", body: `{"model":"mix","messages":[]}`, n: 0,
			want:     mutation{Set: []string{"authorization: Bearer sk-upstream", "x-sluice-provider: openai", contentLength(`{"model":"gpt-4o","messages":[]}`)}, Remove: otherCredentials},
			wantBody: `{"model":"gpt-4o","messages":[]}`, wantProvider: "openai", wantUpstream: "gpt-4o"},
		{name: "draw 1: compat, its own upstream name and base path prefix", path: "/v1/chat/completions", body: `{"model":"mix","messages":[]}`, n: 1,
			want:     mutation{Set: []string{"authorization: Bearer sk-compat", ":path: /api/v1/chat/completions", "x-sluice-provider: compat", contentLength(`{"model":"llama-mix","messages":[]}`)}, Remove: otherCredentials},
			wantBody: `{"model":"llama-mix","messages":[]}`, wantProvider: "compat", wantUpstream: "llama-mix"},
		{name: "draw 3: still compat", path: "/v1/chat/completions", body: `{"model":"mix","messages":[]}`, n: 3,
			want:     mutation{Set: []string{"authorization: Bearer sk-compat", ":path: /api/v1/chat/completions", "x-sluice-provider: compat", contentLength(`{"model":"llama-mix","messages":[]}`)}, Remove: otherCredentials},
			wantBody: `{"model":"llama-mix","messages":[]}`, wantProvider: "compat", wantUpstream: "llama-mix"},
		{name: "draw 4 wraps to openai", path: "/v1/chat/completions", body: `{"model":"mix","messages":[]}`, n: 4,
			want:     mutation{Set: []string{"authorization: Bearer sk-upstream", "x-sluice-provider: openai", contentLength(`{"model":"gpt-4o","messages":[]}`)}, Remove: otherCredentials},
			wantBody: `{"model":"gpt-4o","messages":[]}`, wantProvider: "openai", wantUpstream: "gpt-4o"},
		{name: "azure drawn: deployment path, model dropped", path: "/v1/chat/completions", body: `{"model":"mix-az","messages":[]}`, n: 1,
			want:     mutation{Set: []string{"api-key: azkey", ":path: /openai/deployments/dep-mix/chat/completions?api-version=2024-10-21", "x-sluice-provider: az", contentLength(`{"messages":[]}`)}, Remove: []string{"authorization", "x-api-key"}},
			wantBody: `{"messages":[]}`, wantProvider: "az", wantUpstream: "dep-mix"},
		{name: "an endpoint one provider cannot serve is refused whatever the draw", path: "/v1/responses", body: `{"model":"mix-az","input":"hi"}`, n: 0,
			wantStatus: 400, wantCode: "unsupported_endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, led := newDeps(t)
			d.Rand = func() uint64 { return tc.n }
			ctx := context.Background()
			p := NewProcessor(d)
			p.Handle(ctx, reqHeaders(tc.path, false, authzMeta("config:k")))
			r := p.Handle(ctx, reqBody(tc.body))
			if tc.wantStatus != 0 {
				denied(t, r, tc.wantStatus, tc.wantCode)
				return
			}
			cr := r.GetRequestBody().GetResponse()
			if diff := cmp.Diff(tc.want, flatten(cr.GetHeaderMutation())); diff != "" {
				t.Errorf("header mutation (-want +got):\n%s", diff)
			}
			if got := string(cr.GetBodyMutation().GetBody()); got != tc.wantBody {
				t.Errorf("body %s, want %s", got, tc.wantBody)
			}
			if !cr.GetClearRouteCache() {
				t.Error("clear_route_cache not set")
			}
			p.Handle(ctx, respHeaders("200", "application/json"))
			md := p.Handle(ctx, respBody(chatJSON, true)).GetDynamicMetadata()
			rec := led.records[0]
			if rec.Provider != tc.wantProvider || rec.UpstreamModel != tc.wantUpstream || !strings.Contains(tc.body, `"model":"`+rec.Model+`"`) {
				t.Errorf("record provider %q upstream %q model %q", rec.Provider, rec.UpstreamModel, rec.Model)
			}
			if got := md.GetFields()[chain.UsageNamespace].GetStructValue().GetFields()["provider"].GetStringValue(); got != tc.wantProvider {
				t.Errorf("usage metadata provider %q", got)
			}
		})
	}
}

// TestWeightedDefaultRandom: without Deps.Rand, draws come from
// math/rand/v2 and reach every provider (P(a miss in 200 draws at 1:3) is
// below 1e-24).
func TestWeightedDefaultRandom(t *testing.T) {
	d, _ := newDeps(t)
	seen := map[string]int{}
	for range 200 {
		p := NewProcessor(d)
		p.Handle(context.Background(), reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
		r := p.Handle(context.Background(), reqBody(`{"model":"mix","messages":[]}`))
		seen[setHeaders(r.GetRequestBody().GetResponse().GetHeaderMutation())[chain.RoutingHeader]]++
	}
	if len(seen) != 2 || seen["openai"] == 0 || seen["compat"] == 0 {
		t.Errorf("routed %v", seen)
	}
}

// TestFallbackDownstream: for a model whose providers are tried in order,
// the downstream processor authenticates, checks and admits, but rewrites
// only what every provider needs, and routes to the model's fallback
// cluster.
func TestFallbackDownstream(t *testing.T) {
	allCredentials := []string{"authorization", "x-api-key", "api-key"}
	tests := []struct {
		name       string
		path, body string
		extra      []string
		wantStatus int
		wantCode   string
		want       mutation
		wantBody   string
	}{
		{name: "alias, client credentials: removed, model kept as sent, no provider credential or path",
			path: "/v1/chat/completions", body: `{"model":"fb-alias","messages":[]}`, extra: []string{"authorization", "Bearer " + testKey, "x-api-key", "junk"},
			want: mutation{Set: []string{"x-sluice-provider: sluice.fallback.fb"}, Remove: allCredentials}},
		{name: "streaming: include_usage forced (provider-agnostic)",
			path: "/v1/chat/completions", body: `{"model":"fb","stream":true,"messages":[]}`,
			want:     mutation{Set: []string{"x-sluice-provider: sluice.fallback.fb", contentLength(`{"model":"fb","stream":true,"messages":[],"stream_options":{"include_usage":true}}`)}, Remove: allCredentials},
			wantBody: `{"model":"fb","stream":true,"messages":[],"stream_options":{"include_usage":true}}`},
		{name: "anthropic: no x-api-key, no anthropic-version, no path prefix",
			path: "/v1/messages", body: `{"model":"fb-claude","max_tokens":10,"messages":[]}`,
			want: mutation{Set: []string{"x-sluice-provider: sluice.fallback.fb-claude"}, Remove: allCredentials}},
		{name: "compatibility is checked against the first provider: openai serves the Responses API",
			path: "/v1/responses", body: `{"model":"fb","input":"hi"}`,
			want: mutation{Set: []string{"x-sluice-provider: sluice.fallback.fb"}, Remove: allCredentials}},
		{name: "first provider cannot serve the endpoint", path: "/v1/chat/completions", body: `{"model":"fb-claude","messages":[]}`,
			wantStatus: 400, wantCode: "unsupported_endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := newDeps(t)
			adm := countAdmissions(d)
			ctx := context.Background()
			p := NewProcessor(d)
			p.Handle(ctx, reqHeaders(tc.path, false, authzMeta("config:k"), tc.extra...))
			r := p.Handle(ctx, reqBody(tc.body))
			if tc.wantStatus != 0 {
				denied(t, r, tc.wantStatus, tc.wantCode)
				if adm.admits != 0 {
					t.Errorf("a refused request was admitted")
				}
				return
			}
			cr := r.GetRequestBody().GetResponse()
			if diff := cmp.Diff(tc.want, flatten(cr.GetHeaderMutation())); diff != "" {
				t.Errorf("header mutation (-want +got):\n%s", diff)
			}
			if got := string(cr.GetBodyMutation().GetBody()); got != tc.wantBody {
				t.Errorf("body %s, want %s", got, tc.wantBody)
			}
			if !cr.GetClearRouteCache() {
				t.Error("clear_route_cache not set")
			}
			// Left for the attempts: the client's path, and whether it sent
			// anthropic-version (none of these cases does).
			md := r.GetDynamicMetadata().GetFields()[chain.UsageNamespace].GetStructValue().GetFields()
			if md[chain.FallbackPathKey].GetStringValue() != tc.path || md[chain.FallbackAnthropicVersionKey] == nil || md[chain.FallbackAnthropicVersionKey].GetBoolValue() {
				t.Errorf("dynamic metadata for the attempts = %v", md)
			}
			if adm.admits != 1 {
				t.Errorf("%d admissions, want 1", adm.admits)
			}
		})
	}
}

// TestUpstreamProcessor: one fallback attempt on each provider kind gets
// exactly the single-provider rewrite, and its response names who served.
func TestUpstreamProcessor(t *testing.T) {
	tests := []struct {
		name       string
		provider   string // the attempt's provider, and the expected served-by
		attempt    int    // default: the provider's place in the model's list
		routing    string // default: the body model's fallback cluster
		md         *corev3.Metadata
		path, body string
		extra      []string
		wantStatus int // 0: rewritten
		wantCode   string
		want       mutation
		wantBody   string   // "": body unchanged
		wantServed []string // the response headers' mutation
	}{
		{name: "openai: bearer credential, upstream model", provider: "openai",
			path: "/v1/chat/completions", body: `{"model":"fb-alias","messages":[]}`,
			want:       mutation{Set: []string{"authorization: Bearer sk-upstream", contentLength(`{"model":"gpt-4o-fb","messages":[]}`)}, Remove: otherCredentials},
			wantBody:   `{"model":"gpt-4o-fb","messages":[]}`,
			wantServed: []string{"x-sluice-served-by: openai", "x-sluice-served-model: gpt-4o-fb"}},
		{name: "azure-openai: deployment path with api-version, api-key, model dropped", provider: "az",
			path: "/v1/chat/completions", body: `{"model":"fb","messages":[]}`,
			want:       mutation{Set: []string{"api-key: azkey", ":path: /openai/deployments/dep-fb/chat/completions?api-version=2024-10-21", contentLength(`{"messages":[]}`)}, Remove: []string{"authorization", "x-api-key"}},
			wantBody:   `{"messages":[]}`,
			wantServed: []string{"x-sluice-served-by: az", "x-sluice-served-model: dep-fb"}},
		{name: "openai-compatible: base path prefix before the client's path, query kept", provider: "compat",
			path: "/v1/chat/completions?trace=1", body: `{"model":"fb","stream":true,"messages":[],"stream_options":{"include_usage":true}}`,
			want:       mutation{Set: []string{"authorization: Bearer sk-compat", ":path: /api/v1/chat/completions?trace=1", contentLength(`{"model":"local-fb","stream":true,"messages":[],"stream_options":{"include_usage":true}}`)}, Remove: otherCredentials},
			wantBody:   `{"model":"local-fb","stream":true,"messages":[],"stream_options":{"include_usage":true}}`,
			wantServed: []string{"x-sluice-served-by: compat", "x-sluice-served-model: local-fb"}},
		{name: "anthropic: x-api-key, the provider's anthropic-version", provider: "claude2",
			path: "/v1/messages", body: `{"model":"fb-claude","max_tokens":10,"messages":[]}`,
			want:       mutation{Set: []string{"x-api-key: sk-ant2", "anthropic-version: 2023-01-01", contentLength(`{"model":"claude-sonnet-4-b","max_tokens":10,"messages":[]}`)}, Remove: []string{"authorization", "api-key"}},
			wantBody:   `{"model":"claude-sonnet-4-b","max_tokens":10,"messages":[]}`,
			wantServed: []string{"x-sluice-served-by: claude2", "x-sluice-served-model: claude-sonnet-4-b"}},
		{name: "anthropic: the client's anthropic-version kept, base path prefix", provider: "claude", extra: []string{"anthropic-version", "2024-01-01"},
			path: "/v1/messages", body: `{"model":"fb-claude","max_tokens":10,"messages":[]}`,
			want:       mutation{Set: []string{"x-api-key: sk-ant", ":path: /prefix/v1/messages", contentLength(`{"model":"claude-sonnet-4","max_tokens":10,"messages":[]}`)}, Remove: []string{"authorization", "api-key"}},
			wantBody:   `{"model":"claude-sonnet-4","max_tokens":10,"messages":[]}`,
			wantServed: []string{"x-sluice-served-by: claude", "x-sluice-served-model: claude-sonnet-4"}},
		{name: "a later provider that cannot serve the endpoint refuses the attempt", provider: "az",
			path: "/v1/responses", body: `{"model":"fb","input":"hi"}`, wantStatus: 400, wantCode: "unsupported_endpoint"},
		{name: "a second attempt restores the client's path and anthropic-version from the metadata", provider: "claude2",
			md: fallbackMeta("/v1/messages", false), path: "/prefix/v1/messages", extra: []string{"anthropic-version", "2023-06-01"},
			body:       `{"model":"fb-claude","max_tokens":10,"messages":[]}`,
			want:       mutation{Set: []string{"x-api-key: sk-ant2", "anthropic-version: 2023-01-01", ":path: /v1/messages", contentLength(`{"model":"claude-sonnet-4-b","max_tokens":10,"messages":[]}`)}, Remove: []string{"authorization", "api-key"}},
			wantBody:   `{"model":"claude-sonnet-4-b","max_tokens":10,"messages":[]}`,
			wantServed: []string{"x-sluice-served-by: claude2", "x-sluice-served-model: claude-sonnet-4-b"}},
		{name: "attempts beyond the last provider start again from the first", provider: "openai", attempt: 4,
			path: "/v1/chat/completions", body: `{"model":"fb","messages":[]}`,
			want:       mutation{Set: []string{"authorization: Bearer sk-upstream", contentLength(`{"model":"gpt-4o-fb","messages":[]}`)}, Remove: otherCredentials},
			wantBody:   `{"model":"gpt-4o-fb","messages":[]}`,
			wantServed: []string{"x-sluice-served-by: openai", "x-sluice-served-model: gpt-4o-fb"}},
		{name: "the model no longer falls back (config changed)", attempt: 1,
			path: "/v1/chat/completions", body: `{"model":"plain","messages":[]}`, wantStatus: 503, wantCode: "provider_not_configured"},
		{name: "model no longer configured", attempt: 1,
			path: "/v1/chat/completions", body: `{"model":"gone","messages":[]}`, wantStatus: 404, wantCode: "model_not_found"},
	}
	place := map[string]int{"openai": 1, "az": 2, "compat": 3, "claude": 1, "claude2": 2}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, led := newDeps(t)
			adm := countAdmissions(d)
			ctx := context.Background()
			u := NewUpstreamProcessor(d)
			attempt, routing := tc.attempt, tc.routing
			if attempt == 0 {
				attempt = place[tc.provider]
			}
			if routing == "" {
				routing = "sluice.fallback.fb"
				if strings.Contains(tc.body, "fb-claude") {
					routing = "sluice.fallback.fb-claude"
				}
			}
			// As the downstream processor left it: routing header set,
			// the caller's credentials gone; Envoy numbered the attempt.
			r := u.Handle(ctx, reqHeaders(tc.path, false, tc.md, append([]string{chain.RoutingHeader, routing, chain.AttemptCountHeader, strconv.Itoa(attempt)}, tc.extra...)...))
			if diff := cmp.Diff(mutation{Remove: []string{chain.RoutingHeader, chain.AttemptCountHeader}}, flatten(r.GetRequestHeaders().GetResponse().GetHeaderMutation())); diff != "" {
				t.Errorf("request headers (-want +got):\n%s", diff)
			}
			r = u.Handle(ctx, reqBody(tc.body))
			if tc.wantStatus != 0 {
				denied(t, r, tc.wantStatus, tc.wantCode)
				if by := setHeaders(r.GetImmediateResponse().GetHeaders())[chain.ServedByHeader]; by != tc.provider {
					t.Errorf("refusal served-by %q, want %q", by, tc.provider)
				}
			} else {
				cr := r.GetRequestBody().GetResponse()
				if diff := cmp.Diff(tc.want, flatten(cr.GetHeaderMutation())); diff != "" {
					t.Errorf("header mutation (-want +got):\n%s", diff)
				}
				if got := string(cr.GetBodyMutation().GetBody()); got != tc.wantBody {
					t.Errorf("body %s, want %s", got, tc.wantBody)
				}
				r = u.Handle(ctx, respHeaders("200", "application/json"))
				if diff := cmp.Diff(mutation{Set: tc.wantServed}, flatten(r.GetResponseHeaders().GetResponse().GetHeaderMutation())); diff != "" {
					t.Errorf("response headers (-want +got):\n%s", diff)
				}
			}
			u.Cancel(ctx)
			if adm.admits != 0 || adm.settles != 0 || len(led.records) != 0 {
				t.Errorf("the upstream processor admitted %d, settled %d, recorded %d", adm.admits, adm.settles, len(led.records))
			}
		})
	}
}

func TestUpstreamProcessorRefusesBeforeTheBody(t *testing.T) {
	d, _ := newDeps(t)
	ctx := context.Background()
	first := []string{chain.RoutingHeader, "sluice.fallback.fb", chain.AttemptCountHeader, "1"}
	denied(t, NewUpstreamProcessor(d).Handle(ctx, reqHeaders("/v1/models", false, nil, first...)), 404, "unknown_path")
	denied(t, NewUpstreamProcessor(d).Handle(ctx, reqHeaders("/v1/chat/completions", true, nil, first...)), 400, "empty_body")
	denied(t, NewUpstreamProcessor(d).Handle(ctx, reqHeaders("/v1/chat/completions", false, nil, first[:2]...)), 503, "fallback_misconfigured")
}

// fallbackMeta is the dynamic metadata the downstream processor leaves for
// the attempts of a fallback request.
func fallbackMeta(path string, clientAnthropicVersion bool) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.UsageNamespace: {Fields: map[string]*structpb.Value{
		chain.FallbackPathKey:             structpb.NewStringValue(path),
		chain.FallbackAnthropicVersionKey: structpb.NewBoolValue(clientAnthropicVersion),
	}}}}
}

// TestServedByRoundTrip: the downstream processor meters and records the
// provider the served-by headers name, and removes them.
func TestServedByRoundTrip(t *testing.T) {
	removeServed := mutation{Remove: []string{chain.ServedByHeader, chain.ServedModelHeader}}
	tests := []struct {
		name         string
		model        string
		attempt      string // provider of the upstream attempt whose headers the response carries; "" none
		path         string // default /v1/chat/completions
		status       string
		served       []string // served-by headers set by hand (a provider's own)
		want         mutation
		wantProvider string
		wantUpstream string
		wantCost     int64
	}{
		{name: "second provider answered", model: "fb", attempt: "az", status: "200", want: removeServed,
			wantProvider: "az", wantUpstream: "dep-fb", wantCost: 1000 + 400}, // 1000 in × $1 + 200 out × $2 per 1M
		{name: "third provider answered", model: "fb", attempt: "compat", status: "200", want: removeServed,
			wantProvider: "compat", wantUpstream: "local-fb", wantCost: 1400},
		{name: "no attempt reached Sluice: the first provider", model: "fb", status: "503",
			wantProvider: "openai", wantUpstream: "gpt-4o-fb"},
		{name: "an attempt refused by the upstream processor", model: "fb", attempt: "az", path: "/v1/responses", status: "400", want: removeServed,
			wantProvider: "az", wantUpstream: ""}, // nothing was sent to it
		{name: "single-provider model: a provider's own served-by is removed, not believed", model: "plain", status: "200",
			served: []string{chain.ServedByHeader, "az", chain.ServedModelHeader, "x"}, want: removeServed,
			wantProvider: "openai", wantUpstream: "plain"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, led := newDeps(t)
			ctx := context.Background()
			p := NewProcessor(d)
			path := tc.path
			if path == "" {
				path = "/v1/chat/completions"
			}
			p.Handle(ctx, reqHeaders(path, false, authzMeta("config:k")))
			body := `{"model":"` + tc.model + `","messages":[]}`
			if path == "/v1/responses" {
				body = `{"model":"` + tc.model + `","input":"hi"}`
			}
			if r := p.Handle(ctx, reqBody(body)); r.GetImmediateResponse() != nil {
				t.Fatalf("refused: %v", r)
			}

			resp := respHeaders(tc.status, "application/json")
			hs := resp.GetResponseHeaders().GetHeaders()
			add := func(h *corev3.HeaderValueOption) { hs.Headers = append(hs.Headers, h.GetHeader()) }
			if tc.attempt != "" {
				u := NewUpstreamProcessor(d)
				n := map[string]string{"openai": "1", "az": "2", "compat": "3"}[tc.attempt]
				u.Handle(ctx, reqHeaders(path, false, nil, chain.RoutingHeader, "sluice.fallback."+tc.model, chain.AttemptCountHeader, n))
				var served []*corev3.HeaderValueOption
				if r := u.Handle(ctx, reqBody(body)); r.GetImmediateResponse() != nil {
					served = r.GetImmediateResponse().GetHeaders().GetSetHeaders()
				} else {
					served = u.Handle(ctx, respHeaders("200", "application/json")).GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders()
				}
				for _, h := range served {
					if strings.HasPrefix(h.GetHeader().GetKey(), "x-sluice-") {
						add(h)
					}
				}
			}
			for i := 0; i+1 < len(tc.served); i += 2 {
				add(rawHeader(tc.served[i], tc.served[i+1]))
			}

			r := p.Handle(ctx, resp)
			got := flatten(r.GetResponseHeaders().GetResponse().GetHeaderMutation())
			got.Set = slices.DeleteFunc(got.Set, func(h string) bool { return strings.HasPrefix(h, "x-ratelimit-") }) // e2e TestAbortChargesReceivedChunks checks them
			if len(got.Set) == 0 {
				got.Set = nil
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("response headers (-want +got):\n%s", diff)
			}
			out := chatJSON
			if tc.status != "200" {
				out = `{"error":{"message":"unavailable","type":"server_error"}}`
			}
			r = p.Handle(ctx, respBody(out, true))
			rec := led.records[0]
			if rec.Provider != tc.wantProvider || rec.UpstreamModel != tc.wantUpstream || rec.CostMicros != tc.wantCost {
				t.Errorf("record provider %q upstream %q cost %d, want %q %q %d", rec.Provider, rec.UpstreamModel, rec.CostMicros, tc.wantProvider, tc.wantUpstream, tc.wantCost)
			}
			if got := r.GetDynamicMetadata().GetFields()[chain.UsageNamespace].GetStructValue().GetFields()["provider"].GetStringValue(); got != tc.wantProvider {
				t.Errorf("usage metadata provider %q", got)
			}
		})
	}
}

// TestServerUpstreamStream: over real gRPC, a stream whose initial metadata
// carries x-sluice-upstream is served by the upstream processor; one
// without it by the downstream processor.
func TestServerUpstreamStream(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	d, led := newDeps(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocsvc.RegisterExternalProcessorServer(gs, NewServer(d))
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	client := extprocsvc.NewExternalProcessorClient(conn)
	ctx := t.Context()

	exchange := func(stream extprocsvc.ExternalProcessor_ProcessClient, m *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingResponse {
		t.Helper()
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	up, err := client.Process(metadata.AppendToOutgoingContext(ctx, chain.UpstreamMetadataKey, chain.UpstreamMetadataValue))
	if err != nil {
		t.Fatal(err)
	}
	// The third attempt: fb's third provider, compat.
	r := exchange(up, reqHeaders("/v1/chat/completions", false, nil, chain.RoutingHeader, "sluice.fallback.fb", chain.AttemptCountHeader, "3"))
	if diff := cmp.Diff(mutation{Remove: []string{chain.RoutingHeader, chain.AttemptCountHeader}}, flatten(r.GetRequestHeaders().GetResponse().GetHeaderMutation())); diff != "" {
		t.Errorf("request headers (-want +got):\n%s", diff)
	}
	r = exchange(up, reqBody(`{"model":"fb","messages":[]}`))
	want := mutation{Set: []string{"authorization: Bearer sk-compat", ":path: /api/v1/chat/completions", contentLength(`{"model":"local-fb","messages":[]}`)}, Remove: otherCredentials}
	if diff := cmp.Diff(want, flatten(r.GetRequestBody().GetResponse().GetHeaderMutation())); diff != "" {
		t.Errorf("request body (-want +got):\n%s", diff)
	}
	r = exchange(up, respHeaders("200", "application/json"))
	if got := setHeaders(r.GetResponseHeaders().GetResponse().GetHeaderMutation())[chain.ServedByHeader]; got != "compat" {
		t.Errorf("served-by %q", got)
	}
	if err := up.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := up.Recv(); err == nil {
		t.Error("the stream did not end after the client half-closed")
	}

	// Without the metadata: the downstream processor, which authenticates.
	down, err := client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	denied(t, exchange(down, reqHeaders("/v1/chat/completions", false, nil)), 401, "missing_credential")
	down.CloseSend()
	down.Recv()
	if len(led.records) != 0 {
		t.Errorf("%d spend records", len(led.records))
	}
}
