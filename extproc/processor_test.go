package extproc

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/tokens"
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

// compileTestPolicy compiles config (a format with one %s: the test
// key's hash) and a key ring holding its keys.
func compileTestPolicy(t testing.TB, config string) (*policies.Snapshot, *keyring.Ring, *slog.Logger) {
	t.Helper()
	cfg, err := policies.Parse(fmt.Appendf(nil, config, apikey.HashHex(testKey)), "sluice.yaml", nil)
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
	return snap, ring, log
}

func newDeps(t testing.TB) (*Deps, *recordingLedger) {
	t.Helper()
	snap, ring, log := compileTestPolicy(t, testConfig)
	counters := limits.New(limits.Options{})
	led := &recordingLedger{}
	now := t0
	return &Deps{
		Policy:     func() *policies.Snapshot { return snap },
		Ring:       ring,
		Auth:       authz.NewChecker(ring, admission.NewLocal(counters, admission.LocalOptions{}), nil, func() time.Time { return t0 }),
		Admitter:   admission.NewLocal(counters, admission.LocalOptions{}),
		Ledger:     led,
		Principals: testPrincipals,
		Metrics:    NewMetrics(prometheus.NewRegistry()),
		Log:        log,
		Now:        func() time.Time { now = now.Add(time.Millisecond); return now },
	}, led
}

func hdrs(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// authzMeta is ext_authz's metadata for keyID, unsigned: the helpers
// that make request-headers messages sign it for the message
// (signAll).
func authzMeta(keyID string) *corev3.Metadata {
	s, _ := structpb.NewStruct(map[string]any{"key_id": keyID, "team": "t"})
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.AuthzNamespace: s}}
}

func reqHeaders(path string, eos bool, md *corev3.Metadata, extra ...string) *extprocsvc.ProcessingRequest {
	return signAll(&extprocsvc.ProcessingRequest{MetadataContext: md, Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{
		Headers: hdrs(append([]string{":method", "POST", ":path", path, ":authority", "gw", "x-request-id", "rid-1"}, extra...)...), EndOfStream: eos,
	}}})
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

const chatJSON = `{"id":"x","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":200,"total_tokens":1200,"prompt_tokens_details":{"cached_tokens":400},"completion_tokens_details":{"reasoning_tokens":50}}}`

// TestCancelSettlesOnce: a cancelled stream is settled once, however
// often it is cancelled (the golden files, driven over gRPC, can cancel a
// stream only once; testdata/cancelled.txtar pins what it is charged).
func TestCancelSettlesOnce(t *testing.T) {
	ctx := testctx.Deadline(t)
	d, led := newDeps(t)
	p := NewProcessor(d)
	p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
	p.Handle(ctx, reqBody(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"tell me a story"}]}`))
	p.Handle(ctx, respHeaders("200", "text/event-stream"))
	p.Handle(ctx, respBody("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Once upon\"}}]}\n\n", false))
	p.Cancel(ctx)
	p.Cancel(ctx)
	if len(led.records) != 1 || led.records[0].Outcome != "cancelled" {
		t.Errorf("records after two Cancels: %+v", led.records)
	}
}

// TestMessagesOutOfOrder: a body before the request headers is answered
// with continue (it reached authorize without a caller and panicked), and
// request headers or a body after admission change nothing (they could
// admit the request again and leave the first reservation held): the
// request is settled once and admission holds nothing after it.
func TestMessagesOutOfOrder(t *testing.T) {
	ctx := testctx.Deadline(t)
	d, led := newDeps(t)
	adm := d.Admitter.(*admission.Local)
	body := reqBody(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	p := NewProcessor(d)
	if r := p.Handle(ctx, body); r.GetRequestBody() == nil || r.GetRequestBody().GetResponse() != nil {
		t.Fatalf("a body before the headers: %v, want a plain continue", r)
	}
	p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
	if r := p.Handle(ctx, body); r.GetRequestBody() == nil {
		t.Fatalf("the body: %v", r)
	}
	for _, m := range []*extprocsvc.ProcessingRequest{reqHeaders("/v1/chat/completions", false, authzMeta("config:k")), body} {
		if r := p.Handle(ctx, m); r.GetImmediateResponse() != nil || r.GetRequestHeaders().GetResponse() != nil || r.GetRequestBody().GetResponse() != nil {
			t.Errorf("%T after admission: %v, want a plain continue", m.GetRequest(), r)
		}
	}
	if adm.Held() != 1 {
		t.Errorf("%d reservations held after one admitted request", adm.Held())
	}
	p.Handle(ctx, respHeaders("200", "application/json"))
	p.Handle(ctx, respBody(chatJSON, true))
	p.Cancel(ctx)
	if len(led.records) != 1 || adm.Held() != 0 {
		t.Errorf("%d records, %d reservations held; want 1 and 0", len(led.records), adm.Held())
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

// TestCancelledOutputCapped: a stream cut after more text than max_tokens
// × n allows, the provider having reported no usage, is charged the cap,
// not the tokenizer's count of the text.
func TestCancelledOutputCapped(t *testing.T) {
	ctx := testctx.Deadline(t)
	d, led := newDeps(t)
	p := NewProcessor(d)
	p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
	p.Handle(ctx, reqBody(`{"model":"gpt-4o-mini","stream":true,"max_tokens":3,"n":2,"messages":[{"role":"user","content":"tell me a story"}]}`))
	p.Handle(ctx, respHeaders("200", "text/event-stream"))
	for i := range 2 {
		p.Handle(ctx, respBody(fmt.Sprintf("data: {\"choices\":[{\"index\":%d,\"delta\":{\"content\":\"Once upon a time there was a gateway that counted\"}}]}\n\n", i), false))
	}
	p.Cancel(ctx)
	if len(led.records) != 1 {
		t.Fatalf("records %+v", led.records)
	}
	if r := led.records[0]; r.Outcome != "cancelled" || !r.Estimated || r.Tokens[tokens.Output] != 6 {
		t.Errorf("record %+v; want cancelled, estimated, 6 output tokens (3 × 2 choices)", r)
	}
}

func respTrailers() *extprocsvc.ProcessingRequest {
	return &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocsvc.HttpTrailers{Trailers: hdrs("x-t", "v")}}}
}

// TestTrailersEndTheResponse: a response that ends in trailers (no body
// chunk with end_of_stream) is settled on the trailers, complete, once;
// the trailers reply carries the usage metadata, and a later Cancel
// changes nothing. Trailers of an unmetered request are just answered.
func TestTrailersEndTheResponse(t *testing.T) {
	ctx := testctx.Deadline(t)
	d, led := newDeps(t)
	p := NewProcessor(d)
	p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
	p.Handle(ctx, reqBody(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
	p.Handle(ctx, respHeaders("200", "application/json"))
	p.Handle(ctx, respBody(chatJSON, false))
	if len(led.records) != 0 {
		t.Fatalf("settled before the response ended: %+v", led.records)
	}
	resp := p.Handle(ctx, respTrailers())
	if resp.GetResponseTrailers() == nil {
		t.Fatalf("reply %v, want a trailers reply", resp)
	}
	if md := resp.GetDynamicMetadata().GetFields()["sluice"].GetStructValue().GetFields(); md["outcome"].GetStringValue() != "ok" || md["output_tokens"].GetNumberValue() != 200 {
		t.Errorf("trailers reply metadata %v, want outcome ok and the reported 200 output tokens", md)
	}
	p.Handle(ctx, respTrailers())
	p.Cancel(ctx)
	if len(led.records) != 1 || led.records[0].Outcome != "ok" || led.records[0].Tokens[tokens.Input] != 1000 || led.records[0].Tokens[tokens.Output] != 200 || led.records[0].Estimated {
		t.Errorf("records %+v, want one, ok, with the reported usage", led.records)
	}

	d, led = newDeps(t)
	p = NewProcessor(d)
	p.Handle(ctx, reqHeaders("/v1/files", false, authzMeta("config:k")))
	if resp := p.Handle(ctx, respTrailers()); resp.GetResponseTrailers() == nil || resp.GetDynamicMetadata() != nil {
		t.Errorf("trailers of a refused request answered %v", resp)
	}
	if len(led.records) != 0 {
		t.Errorf("records %+v for a request never admitted", led.records)
	}
}

// TestUsageMetadataFields: the usage metadata holds exactly the fields
// and values the access log reads, as structpb would build them.
func TestUsageMetadataFields(t *testing.T) {
	for _, r := range []ledger.Record{
		{Tokens: tokens.Counts{tokens.Input: 400, tokens.CachedInput: 100, tokens.Output: 20, tokens.Reasoning: 5}, CostPico: 1_500_001,
			Model: "gpt-4o-mini", Provider: "openai", KeyID: "k1", Team: "t", Outcome: "ok", Estimated: true},
		{},
	} {
		want, err := structpb.NewStruct(map[string]any{chain.UsageNamespace: map[string]any{
			"input_tokens": float64(r.Tokens[tokens.Input]), "cached_input_tokens": float64(r.Tokens[tokens.CachedInput]),
			"output_tokens": float64(r.Tokens[tokens.Output]), "reasoning_tokens": float64(r.Tokens[tokens.Reasoning]),
			"total_tokens": float64(r.Tokens[tokens.Input] + r.Tokens[tokens.Output]), "cost_micros": float64(money.FromPico(r.CostPico).MicrosUp()),
			"model": r.Model, "provider": r.Provider, "key_id": r.KeyID, "team": r.Team,
			"estimated": r.Estimated, "outcome": r.Outcome,
		}})
		if err != nil {
			t.Fatal(err)
		}
		if got := usageMetadata(r); !proto.Equal(got, want) {
			t.Errorf("usageMetadata(%+v) =\n%v\nwant\n%v", r, got, want)
		}
	}
}
