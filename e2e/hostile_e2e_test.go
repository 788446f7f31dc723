package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/xds"
)

// hostilePolicy prices output at $10 per 1M tokens, where 2^40 tokens
// times the price no longer fits an int64. Arguments: the mock's address,
// the gateway's body limit.
const hostilePolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
gateway: {max_request_body_bytes: %d}
providers:
  - {name: mock, kind: openai-compatible, base_url: "http://%s"}
models:
  - {name: m, provider: mock}
pricing:
  m: {input: 0, output: 10000000}
teams:
  - name: t
`

// TestHugeUsageKeepsServing: a provider reporting 2^40 output tokens made
// the cost wrap negative, the metrics panic, and the process exit. Such a
// count is not believed (no reply can hold a trillion tokens): the request
// is charged Sluice's own count of what was delivered, marked unparsed and
// estimated, and the process serves the next request.
func TestHugeUsageKeepsServing(t *testing.T) {
	_, mockAddr := mockProvider(t, mockllm.Options{})
	s := startSluice(t, fmt.Sprintf(hostilePolicy, 4<<20, mockAddr))
	_, key := s.createKey(t, "t")
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-hostile", XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	eachProxy(t, b, func(t *testing.T, p proxy) {
		rid := "huge-usage-" + p.name()
		const reasoning = 1 << 40
		st, h, body := call{path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			headers: map[string]string{"x-request-id": rid, "x-mock-words": "3", "x-mock-reasoning-tokens": fmt.Sprint(reasoning)}}.do(t, p.url, key)
		if st != 200 {
			t.Fatalf("huge usage: %d %s", st, body)
		}
		// Sluice's listener replaces a client's x-request-id with Envoy's,
		// which the response carries and the record correlates with.
		rec := s.awaitRecord(t, h.Get("x-request-id"))
		// The 3 words delivered, counted by the tokenizer, at 10 µ$ each.
		if rec.Outcome != "unparsed" || !rec.Estimated || rec.OutputTokens < 3 || rec.OutputTokens > 100 || rec.CostMicros != rec.OutputTokens*10 {
			t.Errorf("record: outcome %s, estimated %v, output %d tokens, cost %d µ$; want unparsed, estimated, the delivered words' count at 10 µ$ each",
				rec.Outcome, rec.Estimated, rec.OutputTokens, rec.CostMicros)
		}
		// Still serving.
		st, h, body = call{path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			headers: map[string]string{"x-request-id": rid + "-next"}}.do(t, p.url, key)
		if st != 200 {
			t.Fatalf("the request after: %d %s", st, body)
		}
		if rec := s.awaitRecord(t, h.Get("x-request-id")); rec.CostMicros <= 0 {
			t.Errorf("the request after was charged %d", rec.CostMicros)
		}
	})
}

// TestBodyLimitAtEverySize: a body up to gateway.max_request_body_bytes
// reaches the provider, and one over it gets the JSON 413 body_too_large
// in the API's dialect, at the default limit and raised to 8 MiB — around
// grpc-go's default 4 MiB receive limit too, which answered them with an
// empty 500, and past Envoy's listener buffer (the limit + 64 KiB), where
// Envoy answers itself: its text/plain "Payload Too Large" is rewritten
// by the listener's local_reply_config.
func TestBodyLimitAtEverySize(t *testing.T) {
	const mib = 1 << 20
	for _, limit := range []int{4 * mib, 8 * mib} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			_, mockAddr := mockProvider(t, mockllm.Options{Words: 1})
			s := startSluice(t, fmt.Sprintf(hostilePolicy, limit, mockAddr))
			_, key := s.createKey(t, "t")
			b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: fmt.Sprintf("e2e-body-%d", limit), XDSAddress: s.xdsAddr})
			if err != nil {
				t.Fatal(err)
			}
			buffer := limit + 64<<10
			sizes := []int{4*mib - 200, 4*mib - 1, 4 * mib, 4*mib + 1, 4*mib + 100, limit - 1, limit, limit + 1,
				buffer - 1, buffer, buffer + 1, buffer + 64<<10, 2 * limit}
			eachProxy(t, b, func(t *testing.T, p proxy) {
				for _, n := range sizes {
					st, h, body := call{path: "/v1/chat/completions", body: bodyOfSize(n)}.do(t, p.url, key)
					switch {
					case n <= limit && st != 200:
						t.Errorf("%d bytes (limit %d): %d %.200s, want 200", n, limit, st, body)
					case n > limit && (st != 413 || !strings.Contains(body, `"code":"body_too_large"`) || !strings.HasPrefix(h.Get("content-type"), "application/json")):
						t.Errorf("%d bytes (limit %d): %d %q %.200s, want the JSON 413 body_too_large", n, limit, st, h.Get("content-type"), body)
					}
				}
				// Past the buffer on Anthropic's API: its error shape.
				st, h, body := call{path: "/v1/messages", body: bodyOfSize(2 * limit)}.do(t, p.url, key)
				if st != 413 || !strings.HasPrefix(body, `{"type":"error","error":{"type":"request_too_large"`) || h.Get("content-type") != "application/json" {
					t.Errorf("/v1/messages, %d bytes: %d %q %.200s, want Anthropic's JSON 413", 2*limit, st, h.Get("content-type"), body)
				}
			})
		})
	}
}

// TestEnvoyLocalRepliesAreJSON: the replies Envoy makes itself when a
// provider cannot answer — its route timeout (504), a connection refused
// (503) — reach the client as the API's JSON error, not Envoy's
// text/plain, in OpenAI's shape and, on /v1/messages, Anthropic's.
func TestEnvoyLocalRepliesAreJSON(t *testing.T) {
	_, mockAddr := mockProvider(t, mockllm.Options{Words: 1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	s := startSluice(t, fmt.Sprintf(`
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
providers:
  - {name: slow, kind: openai-compatible, base_url: "http://%s", timeout: 200ms}
  - {name: dead, kind: openai-compatible, base_url: "http://%s", retries: {max: 0}}
  - {name: slowanthropic, kind: anthropic, base_url: "http://%s", api_key: sk-ant-test, timeout: 200ms}
models:
  - {name: slow, provider: slow}
  - {name: dead, provider: dead}
  - {name: claude-slow, provider: slowanthropic}
teams:
  - name: t
`, mockAddr, dead, mockAddr))
	_, key := s.createKey(t, "t")
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-local-replies", XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	latency := map[string]string{"x-mock-latency": "5s"}
	eachProxy(t, b, func(t *testing.T, p proxy) {
		for _, tc := range []struct {
			name   string
			c      call
			status int
			prefix string
		}{
			{"timeout", call{path: "/v1/chat/completions", body: `{"model":"slow","messages":[{"role":"user","content":"hi"}]}`, headers: latency},
				504, `{"error":{"message":"the provider did not answer in time","type":"server_error","param":null,"code":"upstream_timeout"}}`},
			{"timeout, Anthropic", call{path: "/v1/messages", body: `{"model":"claude-slow","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, headers: latency},
				504, `{"type":"error","error":{"type":"api_error","message":"the provider did not answer in time"}}`},
			{"connection refused", call{path: "/v1/chat/completions", body: `{"model":"dead","messages":[{"role":"user","content":"hi"}]}`},
				503, `{"error":{"message":"the provider is unavailable`},
		} {
			st, h, body := tc.c.do(t, p.url, key)
			if st != tc.status || !strings.HasPrefix(body, tc.prefix) || h.Get("content-type") != "application/json" {
				t.Errorf("%s: %d %q %.300s, want %d application/json %s…", tc.name, st, h.Get("content-type"), body, tc.status, tc.prefix)
			}
		}
	})
}

// bodyOfSize is a chat request of exactly n bytes.
func bodyOfSize(n int) string {
	const head, tail = `{"model":"m","messages":[{"role":"user","content":"`, `"}]}`
	return head + strings.Repeat("a", n-len(head)-len(tail)) + tail
}
