package e2e

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rateLimitedProvider answers every chat completion and message with a
// fixed reply and its own rate-limit headers, as OpenAI and Anthropic
// send them.
func rateLimitedProvider(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("content-type", "application/json")
		for k, v := range providerRateLimitHeaders {
			h.Set(k, v)
		}
		if strings.HasPrefix(r.URL.Path, "/v1/messages") {
			_, _ = w.Write([]byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-20250514","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":1}}`))
			return
		}
		_, _ = w.Write([]byte(`{"id":"c1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

var providerRateLimitHeaders = map[string]string{
	"x-ratelimit-limit-requests":                 "5000",
	"x-ratelimit-remaining-requests":             "4999",
	"x-ratelimit-reset-requests":                 "12ms",
	"x-ratelimit-limit-tokens":                   "160000",
	"x-ratelimit-remaining-tokens":               "159976",
	"x-ratelimit-reset-tokens":                   "9ms",
	"anthropic-ratelimit-requests-limit":         "50",
	"anthropic-ratelimit-requests-remaining":     "49",
	"anthropic-ratelimit-requests-reset":         "2026-11-30T12:00:01Z",
	"anthropic-ratelimit-input-tokens-limit":     "30000",
	"anthropic-ratelimit-input-tokens-remaining": "29990",
	"anthropic-ratelimit-input-tokens-reset":     "2026-11-30T12:00:01Z",
}

// TestRateLimitHeadersOneConsistentSet: through Envoy, a response carries
// exactly one set of rate-limit headers per kind. Where Sluice limits the
// kind, that set is Sluice's — one value each for limit, remaining and
// reset, remaining within the limit, the reset in OpenAI's duration
// notation and zero exactly when the whole limit is free — and the
// provider's headers of the kind, OpenAI's and Anthropic's, arrive only
// renamed x-upstream-*, their values intact. Where Sluice does not limit
// the kind, the provider's headers arrive untouched.
func TestRateLimitHeadersOneConsistentSet(t *testing.T) {
	addr := rateLimitedProvider(t)
	s := startSluice(t, gatewayConfig+`  - name: both
    models: ["gpt-4o-mini", "claude-*"]
    limits: {requests: {per_minute: 100}, tokens: {total: {per_minute: 100000}}}
`)
	_, both := s.createKey(t, "both")
	_, reqOnly := s.createKey(t, "apps", "--rpm", "100")
	b := gatewayBootstrap(t, s.grpcAddr, addr)
	eachProxy(t, b, func(t *testing.T, p proxy) {
		for _, tc := range []struct {
			name, key, path, body string
			kinds                 []string // Sluice's
		}{
			{"openai, both kinds", both, "/v1/chat/completions", `{"model":"gpt-4o-mini","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, []string{"requests", "tokens"}},
			{"anthropic, both kinds", both, "/v1/messages", `{"model":"claude-sonnet-4","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, []string{"requests", "tokens"}},
			{"openai, requests only", reqOnly, "/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`, []string{"requests"}},
			{"anthropic, requests only", reqOnly, "/v1/messages", `{"model":"claude-sonnet-4","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, []string{"requests"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				st, h, body := call{path: tc.path, body: tc.body}.do(t, p.url, tc.key)
				if st != 200 {
					t.Fatalf("%d %s", st, body)
				}
				sluice := map[string]bool{}
				for _, kind := range tc.kinds {
					sluice[kind] = true
					var v [3]string
					for i, f := range []string{"limit", "remaining", "reset"} {
						name := "x-ratelimit-" + f + "-" + kind
						if vs := h.Values(name); len(vs) != 1 {
							t.Fatalf("%s: %q, want exactly one value", name, vs)
						}
						v[i] = h.Get(name)
					}
					limit, err1 := strconv.ParseInt(v[0], 10, 64)
					left, err2 := strconv.ParseInt(v[1], 10, 64)
					reset, err3 := time.ParseDuration(v[2])
					if err1 != nil || err2 != nil || err3 != nil || left < 0 || left > limit || (reset == 0) != (left == limit) || strings.Contains(v[2], "µ") {
						t.Errorf("%s: limit %q remaining %q reset %q do not make one set", kind, v[0], v[1], v[2])
					}
					if v[0] == providerRateLimitHeaders["x-ratelimit-limit-"+kind] {
						t.Errorf("%s: the provider's limit %s, want Sluice's", kind, v[0])
					}
				}
				for name, want := range providerRateLimitHeaders {
					kind := "tokens"
					if strings.Contains(name, "requests") {
						kind = "requests"
					}
					renamed := "x-upstream-" + strings.TrimPrefix(name, "x-")
					switch {
					case sluice[kind]:
						if got := h.Values(renamed); len(got) != 1 || got[0] != want {
							t.Errorf("%s: %q, want the provider's %s renamed to it", renamed, got, name)
						}
						if strings.HasPrefix(name, "anthropic-") && h.Get(name) != "" {
							t.Errorf("%s still there: %q", name, h.Get(name))
						}
					default:
						if got := h.Values(name); len(got) != 1 || got[0] != want {
							t.Errorf("%s: %q, want the provider's %q untouched", name, got, want)
						}
						if got := h.Get(renamed); got != "" {
							t.Errorf("%s: %q, want none for a kind Sluice does not limit", renamed, got)
						}
					}
				}
			})
		}
	})
}
