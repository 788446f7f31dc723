package extproc

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/provider"
	"github.com/sluicegw/sluice/policies"
)

const testKey = "sk-sluice-PROC456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const testConfig = `
providers:
  - {name: openai, kind: openai, base_url: "https://api.openai.com", api_key: "sk-upstream"}
  - {name: claude, kind: anthropic, base_url: "https://api.anthropic.com/prefix", api_key: "sk-ant"}
  - {name: az, kind: azure-openai, base_url: "https://x.openai.azure.com", api_key: "azkey", api_version: "2024-10-21"}
  - {name: compat, kind: openai-compatible, base_url: "http://llm.internal:8000/api", api_key: "sk-compat"}
  - {name: claude2, kind: anthropic, base_url: "https://claude2.example", api_key: "sk-ant2", anthropic_version: "2023-01-01"}
models:
  - {name: gpt-4o-mini, aliases: [mini], provider: openai, upstream: gpt-4o-mini-2024-07-18}
  - {name: gpt-4o, provider: openai}
  - {name: plain, provider: openai}
  - {name: sonnet, provider: claude, upstream: claude-sonnet-4}
  - {name: az-4o, provider: az, upstream: dep1}
  - name: mix
    upstream: gpt-4o
    routing: weighted
    providers: [{name: openai, weight: 1}, {name: compat, weight: 3, upstream: llama-mix}]
  - {name: mix-az, routing: weighted, providers: [{name: openai}, {name: az, upstream: dep-mix}]}
  - name: fb
    aliases: [fb-alias]
    upstream: gpt-4o-fb
    providers: [{name: openai}, {name: az, upstream: dep-fb}, {name: compat, upstream: local-fb}]
  - {name: fb-claude, providers: [{name: claude, upstream: claude-sonnet-4}, {name: claude2, upstream: claude-sonnet-4-b}]}
pricing:
  gpt-4o-mini: {input: 150000, cached_input: 75000, output: 600000}
  fb: {input: 1000000, output: 2000000}
teams:
  - {name: t, models: ["gpt-4o-mini", plain, sonnet, az-4o, mix, mix-az, fb, fb-claude], limits: {requests: {per_minute: 2}}}
keys:
  - {name: k, team: t, sha256: %s}
`

// recordingLedger is a hand-written fake Ledger.
type recordingLedger struct {
	mu      sync.Mutex
	records []ledger.Record
	err     error
}

func (l *recordingLedger) Append(_ context.Context, r ledger.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	l.records = append(l.records, r)
	return nil
}

func newDeps(t testing.TB) (*Deps, *recordingLedger) {
	t.Helper()
	cfg, err := policies.Parse(fmt.Appendf(nil, testConfig, apikey.HashHex(testKey)), "sluice.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policies.Compile(cfg, filepath.Join(t.TempDir(), "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	ring := keyring.New(log)
	ring.SetPolicy(snap)
	counters := limits.New(limits.Options{})
	led := &recordingLedger{}
	now := t0
	return &Deps{
		Policy:   func() *policies.Snapshot { return snap },
		Ring:     ring,
		Auth:     authz.NewChecker(ring, counters, func() time.Time { return t0 }),
		Admitter: admission.NewLocal(counters, admission.LocalOptions{}),
		Ledger:   led,
		Metrics:  NewMetrics(prometheus.NewRegistry()),
		Log:      log,
		Now:      func() time.Time { now = now.Add(time.Millisecond); return now },
	}, led
}

func hdrs(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

func authzMeta(keyID string) *corev3.Metadata {
	s, _ := structpb.NewStruct(map[string]any{"key_id": keyID, "team": "t"})
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.AuthzNamespace: s}}
}

func reqHeaders(path string, eos bool, md *corev3.Metadata, extra ...string) *extprocsvc.ProcessingRequest {
	return &extprocsvc.ProcessingRequest{MetadataContext: md, Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{
		Headers: hdrs(append([]string{":method", "POST", ":path", path, ":authority", "gw", "x-request-id", "rid-1"}, extra...)...), EndOfStream: eos,
	}}}
}

func reqBody(b string) *extprocsvc.ProcessingRequest {
	return &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_RequestBody{RequestBody: &extprocsvc.HttpBody{Body: []byte(b), EndOfStream: true}}}
}

func respHeaders(status string, ct string) *extprocsvc.ProcessingRequest {
	return &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocsvc.HttpHeaders{Headers: hdrs(":status", status, "content-type", ct)}}}
}

func respBody(b string, eos bool) *extprocsvc.ProcessingRequest {
	return &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseBody{ResponseBody: &extprocsvc.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

// setHeaders flattens a header mutation for assertions.
func setHeaders(hm *extprocsvc.HeaderMutation) map[string]string {
	m := map[string]string{}
	for _, h := range hm.GetSetHeaders() {
		m[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	return m
}

func TestRequestPhase(t *testing.T) {
	tests := []struct {
		name       string
		path, body string
		extra      []string
		md         bool // ext_authz metadata present
		wantStatus int  // 0: continue
		wantCode   string
		check      func(t *testing.T, r *extprocsvc.BodyResponse)
	}{
		{name: "alias: routed, upstream model rewritten, provider credential, content-length fixed", path: "/v1/chat/completions",
			body: `{"model":"mini","messages":[{"role":"user","content":"hi"}]}`, md: true,
			check: func(t *testing.T, r *extprocsvc.BodyResponse) {
				cr := r.GetResponse()
				h := setHeaders(cr.GetHeaderMutation())
				if h[chain.RoutingHeader] != "openai" || h["authorization"] != "Bearer sk-upstream" {
					t.Errorf("headers %v", h)
				}
				body := string(cr.GetBodyMutation().GetBody())
				if !strings.Contains(body, `"model":"gpt-4o-mini-2024-07-18"`) || h["content-length"] != fmt.Sprint(len(body)) {
					t.Errorf("body %s content-length %s", body, h["content-length"])
				}
				if !cr.GetClearRouteCache() {
					t.Error("clear_route_cache not set")
				}
				if strings.Join(cr.GetHeaderMutation().GetRemoveHeaders(), ",") != "x-api-key,api-key" {
					t.Errorf("removed %v", cr.GetHeaderMutation().GetRemoveHeaders())
				}
			}},
		{name: "streaming chat: include_usage forced", path: "/v1/chat/completions", md: true,
			body: `{"model":"gpt-4o-mini","stream":true,"messages":[]}`,
			check: func(t *testing.T, r *extprocsvc.BodyResponse) {
				if b := string(r.GetResponse().GetBodyMutation().GetBody()); !strings.Contains(b, `"include_usage":true`) {
					t.Errorf("body %s", b)
				}
			}},
		{name: "unchanged body: no body mutation", path: "/v1/chat/completions", md: true,
			body: `{"model":"plain","messages":[]}`,
			check: func(t *testing.T, r *extprocsvc.BodyResponse) {
				if r.GetResponse().GetBodyMutation() != nil {
					t.Error("body mutated though nothing changed")
				}
			}},
		{name: "anthropic: x-api-key, anthropic-version default, base path prefix", path: "/v1/messages", md: true,
			body: `{"model":"sonnet","max_tokens":10,"messages":[]}`,
			check: func(t *testing.T, r *extprocsvc.BodyResponse) {
				h := setHeaders(r.GetResponse().GetHeaderMutation())
				if h["x-api-key"] != "sk-ant" || h["anthropic-version"] != provider.DefaultAnthropicVersion || h[":path"] != "/prefix/v1/messages" {
					t.Errorf("headers %v", h)
				}
			}},
		{name: "anthropic: the client's anthropic-version is kept", path: "/v1/messages", md: true, extra: []string{"anthropic-version", "2024-01-01"},
			body: `{"model":"sonnet","max_tokens":10,"messages":[]}`,
			check: func(t *testing.T, r *extprocsvc.BodyResponse) {
				if _, ok := setHeaders(r.GetResponse().GetHeaderMutation())["anthropic-version"]; ok {
					t.Error("anthropic-version overwritten")
				}
			}},
		{name: "azure: deployment path, api-version, api-key, model dropped", path: "/v1/chat/completions", md: true,
			body: `{"model":"az-4o","messages":[]}`,
			check: func(t *testing.T, r *extprocsvc.BodyResponse) {
				h := setHeaders(r.GetResponse().GetHeaderMutation())
				if h[":path"] != "/openai/deployments/dep1/chat/completions?api-version=2024-10-21" || h["api-key"] != "azkey" {
					t.Errorf("headers %v", h)
				}
				if b := string(r.GetResponse().GetBodyMutation().GetBody()); strings.Contains(b, "model") {
					t.Errorf("model kept for Azure: %s", b)
				}
			}},
		{name: "model not allowed", path: "/v1/chat/completions", md: true, body: `{"model":"gpt-4o","messages":[]}`, wantStatus: 403, wantCode: "model_not_allowed"},
		{name: "unknown model", path: "/v1/chat/completions", md: true, body: `{"model":"nope","messages":[]}`, wantStatus: 404, wantCode: "model_not_found"},
		{name: "anthropic model on the OpenAI API", path: "/v1/chat/completions", md: true, body: `{"model":"sonnet","messages":[]}`, wantStatus: 400, wantCode: "unsupported_endpoint"},
		{name: "malformed JSON", path: "/v1/chat/completions", md: true, body: `{"model":`, wantStatus: 400, wantCode: "invalid_json"},
		{name: "wrong type", path: "/v1/chat/completions", md: true, body: `{"model":5}`, wantStatus: 400, wantCode: "invalid_model"},
		{name: "empty JSON object", path: "/v1/chat/completions", md: true, body: `{}`, wantStatus: 400, wantCode: "missing_model"},
		{name: "no ext_authz metadata: authenticated from headers", path: "/v1/chat/completions", extra: []string{"authorization", "Bearer " + testKey},
			body: `{"model":"gpt-4o-mini","messages":[]}`},
		{name: "no ext_authz metadata and no key: 401", path: "/v1/chat/completions", body: `{}`, wantStatus: 401, wantCode: "missing_credential"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := newDeps(t)
			p := NewProcessor(d)
			var md *corev3.Metadata
			if tc.md {
				md = authzMeta("config:k")
			}
			ctx := context.Background()
			r := p.Handle(ctx, reqHeaders(tc.path, false, md, tc.extra...))
			if im := r.GetImmediateResponse(); im != nil {
				if int(im.GetStatus().GetCode()) != tc.wantStatus || !strings.Contains(string(im.GetBody()), `"`+tc.wantCode+`"`) {
					t.Fatalf("headers: immediate %d %s, want %d %s", im.GetStatus().GetCode(), im.GetBody(), tc.wantStatus, tc.wantCode)
				}
				return
			}
			r = p.Handle(ctx, reqBody(tc.body))
			im := r.GetImmediateResponse()
			switch {
			case tc.wantStatus == 0 && im != nil:
				t.Fatalf("unexpected immediate response %d %s", im.GetStatus().GetCode(), im.GetBody())
			case tc.wantStatus != 0:
				if im == nil || int(im.GetStatus().GetCode()) != tc.wantStatus || !strings.Contains(string(im.GetBody()), `"code":"`+tc.wantCode+`"`) {
					t.Fatalf("got %v, want %d %s", r, tc.wantStatus, tc.wantCode)
				}
				return
			}
			if tc.check != nil {
				tc.check(t, r.GetRequestBody())
			}
		})
	}
}

func TestUnknownPathAndMethod(t *testing.T) {
	d, _ := newDeps(t)
	r := NewProcessor(d).Handle(context.Background(), reqHeaders("/v1/models", true, authzMeta("config:k")))
	if im := r.GetImmediateResponse(); im == nil || im.GetStatus().GetCode() != 404 || !strings.Contains(string(im.GetBody()), "unknown_path") {
		t.Fatalf("got %v", r)
	}
	get := reqHeaders("/v1/chat/completions", true, authzMeta("config:k"))
	get.GetRequestHeaders().Headers = hdrs(":method", "GET", ":path", "/v1/chat/completions")
	if im := NewProcessor(d).Handle(context.Background(), get).GetImmediateResponse(); im == nil || im.GetStatus().GetCode() != 405 {
		t.Fatalf("GET: %v", im)
	}
	if im := NewProcessor(d).Handle(context.Background(), reqHeaders("/v1/chat/completions", true, authzMeta("config:k"))).GetImmediateResponse(); im == nil || im.GetStatus().GetCode() != 400 {
		t.Fatalf("no body: %v", im)
	}
}

// TestFallbackAuthCountsRequests: without ext_authz, admission counts the
// request against the team's limit (2 per minute).
func TestFallbackAuthCountsRequests(t *testing.T) {
	d, _ := newDeps(t)
	var got []int32
	for range 3 {
		p := NewProcessor(d)
		p.Handle(context.Background(), reqHeaders("/v1/chat/completions", false, nil, "authorization", "Bearer "+testKey))
		r := p.Handle(context.Background(), reqBody(`{"model":"gpt-4o-mini","messages":[]}`))
		got = append(got, int32(r.GetImmediateResponse().GetStatus().GetCode()))
	}
	if fmt.Sprint(got) != "[0 0 429]" {
		t.Errorf("statuses %v, want [0 0 429]", got)
	}
}

const chatJSON = `{"id":"x","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":200,"total_tokens":1200,"prompt_tokens_details":{"cached_tokens":400},"completion_tokens_details":{"reasoning_tokens":50}}}`

func TestSettleNonStreaming(t *testing.T) {
	d, led := newDeps(t)
	p := NewProcessor(d)
	ctx := context.Background()
	p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
	p.Handle(ctx, reqBody(`{"model":"mini","messages":[{"role":"user","content":"hi"}]}`))
	p.Handle(ctx, respHeaders("200", "application/json"))
	if r := p.Handle(ctx, respBody(chatJSON[:40], false)); r.GetDynamicMetadata() != nil {
		t.Fatal("metadata before the end")
	}
	r := p.Handle(ctx, respBody(chatJSON[40:], true))
	if len(led.records) != 1 {
		t.Fatalf("%d records", len(led.records))
	}
	rec := led.records[0]
	// 600 uncached × $0.15 + 400 cached × $0.075 + 200 × $0.60 per 1M = 90 + 30 + 120 µ$.
	if rec.InputTokens != 1000 || rec.CachedInputTokens != 400 || rec.OutputTokens != 200 || rec.ReasoningTokens != 50 || rec.CostMicros != 240 ||
		rec.Outcome != "ok" || rec.Estimated || rec.Model != "gpt-4o-mini" || rec.UpstreamModel != "gpt-4o-mini-2024-07-18" || rec.KeyID != "config:k" || rec.RequestID != "rid-1" {
		t.Errorf("record %+v", rec)
	}
	m := r.GetDynamicMetadata().GetFields()[chain.UsageNamespace].GetStructValue().AsMap()
	if m["input_tokens"] != 1000.0 || m["output_tokens"] != 200.0 || m["cost_micros"] != 240.0 || m["total_tokens"] != 1200.0 || m["estimated"] != false {
		t.Errorf("metadata %v", m)
	}
}

func TestSettleUpstreamErrorAndCancel(t *testing.T) {
	ctx := context.Background()
	d, led := newDeps(t)
	p := NewProcessor(d)
	p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
	p.Handle(ctx, reqBody(`{"model":"gpt-4o-mini","messages":[]}`))
	p.Handle(ctx, respHeaders("429", "application/json"))
	p.Handle(ctx, respBody(`{"error":{"message":"slow down","type":"requests"}}`, true))
	if rec := led.records[0]; rec.Outcome != "upstream_error" || rec.InputTokens != 0 || rec.CostMicros != 0 || rec.Status != 429 {
		t.Errorf("upstream error charged: %+v", rec)
	}

	// A stream cut after two chunks is settled for what was delivered.
	p = NewProcessor(d)
	p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
	p.Handle(ctx, reqBody(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"tell me a story"}]}`))
	p.Handle(ctx, respHeaders("200", "text/event-stream"))
	p.Handle(ctx, respBody("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Once upon\"}}]}\n\n", false))
	p.Handle(ctx, respBody("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a time\"}}]}\n\n", false))
	p.Cancel(ctx)
	rec := led.records[1]
	if rec.Outcome != "cancelled" || !rec.Estimated || rec.OutputTokens == 0 || rec.InputTokens == 0 {
		t.Errorf("cancelled stream: %+v", rec)
	}
	p.Cancel(ctx) // settling twice must not write twice
	if len(led.records) != 2 {
		t.Errorf("%d records after a second Cancel", len(led.records))
	}
}

func TestUnparsedIsNeverAZeroCharge(t *testing.T) {
	ctx := context.Background()
	d, led := newDeps(t)
	p := NewProcessor(d)
	p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
	p.Handle(ctx, reqBody(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello hello hello hello"}]}`))
	p.Handle(ctx, respHeaders("200", "text/html"))
	p.Handle(ctx, respBody("<html><body>Bad gateway</body></html>", true))
	rec := led.records[0]
	if rec.Outcome != "unparsed" || !rec.Estimated || rec.InputTokens == 0 || rec.CostMicros == 0 {
		t.Errorf("unparsed response: %+v", rec)
	}
}

// BenchmarkProcessorChat is Sluice's ext_proc work for one non-streaming
// chat request: headers, body, response headers, one response chunk.
func BenchmarkProcessorChat(b *testing.B) {
	d, led := newDeps(b)
	ctx := context.Background()
	msgs := []*extprocsvc.ProcessingRequest{
		reqHeaders("/v1/chat/completions", false, authzMeta("config:k")),
		reqBody(`{"model":"mini","messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Hello there, how are you today?"}]}`),
		respHeaders("200", "application/json"),
		respBody(chatJSON, true),
	}
	b.ReportAllocs()
	for b.Loop() {
		p := NewProcessor(d)
		for _, m := range msgs {
			p.Handle(ctx, m)
		}
		led.records = led.records[:0]
	}
}

// BenchmarkProcessorStream20 is one 20-chunk streamed chat response.
func BenchmarkProcessorStream20(b *testing.B) {
	d, led := newDeps(b)
	ctx := context.Background()
	msgs := []*extprocsvc.ProcessingRequest{
		reqHeaders("/v1/chat/completions", false, authzMeta("config:k")),
		reqBody(`{"model":"mini","stream":true,"messages":[{"role":"user","content":"Hello there, how are you today?"}]}`),
		respHeaders("200", "text/event-stream"),
	}
	for i := range 20 {
		msgs = append(msgs, respBody(fmt.Sprintf("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" word%d\"},\"finish_reason\":null}],\"usage\":null}\n\n", i), false))
	}
	msgs = append(msgs, respBody("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":20,\"total_tokens\":32}}\n\ndata: [DONE]\n\n", true))
	b.ReportAllocs()
	for b.Loop() {
		p := NewProcessor(d)
		for _, m := range msgs {
			p.Handle(ctx, m)
		}
		led.records = led.records[:0]
	}
}

func TestBodyLimit(t *testing.T) {
	d, _ := newDeps(t)
	snap := d.Policy()
	cfg := *snap.Config()
	cfg.Gateway.MaxRequestBodyBytes = 64
	small, err := policies.Compile(&cfg, filepath.Join(t.TempDir(), "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d.Policy = func() *policies.Snapshot { return small }
	p := NewProcessor(d)
	p.Handle(context.Background(), reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
	r := p.Handle(context.Background(), reqBody(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"`+strings.Repeat("x", 100)+`"}]}`))
	if im := r.GetImmediateResponse(); im == nil || im.GetStatus().GetCode() != 413 || !strings.Contains(string(im.GetBody()), "at most 64") {
		t.Fatalf("got %v", r)
	}
}

func TestUnknownPathPassThrough(t *testing.T) {
	d, led := newDeps(t)
	snap := d.Policy()
	cfg := *snap.Config()
	cfg.Gateway.UnknownPaths = "pass"
	pass, err := policies.Compile(&cfg, filepath.Join(t.TempDir(), "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d.Policy = func() *policies.Snapshot { return pass }
	ctx := context.Background()
	p := NewProcessor(d)
	for _, m := range []*extprocsvc.ProcessingRequest{
		reqHeaders("/v1/models", false, authzMeta("config:k")),
		reqBody(`not even json`),
		respHeaders("200", "application/json"),
		respBody(`{"data":[]}`, true),
	} {
		r := p.Handle(ctx, m)
		if r.GetImmediateResponse() != nil || r.GetDynamicMetadata() != nil || r.GetRequestBody().GetResponse().GetHeaderMutation() != nil {
			t.Fatalf("pass-through answered %v", r)
		}
	}
	if len(led.records) != 0 {
		t.Errorf("an unmetered pass-through wrote %d spend records", len(led.records))
	}
}
