package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/envoy/envoytest"
	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/xds"
)

// envoyReply is one of Envoy's own local replies as a client gets it
// through Sluice's listener.
type envoyReply struct {
	details string
	prefix  bool // details is a prefix (http1.…)
	status  int
	code    string // the apierr code of OpenAI's body
}

// configuredBody is the body chain.LocalReply (the listener's
// local_reply_config) gives the reply in dialect d: the Anthropic mapper
// (an and_filter with the :path regex) or the OpenAI one.
func (r envoyReply) configuredBody(t *testing.T, d llmapi.Dialect) string {
	t.Helper()
	exprs := []string{chain.DetailsExpression(r.details, r.prefix, r.status), chain.DetailsExpression(r.details, r.prefix, 0)}
	for _, m := range chain.LocalReply(localReplyBodyLimit).GetMappers() {
		f, anthropic := m.GetFilter(), false
		if and := m.GetFilter().GetAndFilter(); and != nil {
			f, anthropic = and.GetFilters()[0], true
		}
		c := &celv3.ExpressionFilter{}
		if err := f.GetExtensionFilter().GetTypedConfig().UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		if (c.GetExpression() == exprs[0] || c.GetExpression() == exprs[1]) && anthropic == (d == llmapi.Anthropic) {
			return m.GetBodyFormatOverride().GetTextFormat()
		}
	}
	t.Fatalf("chain.LocalReply has no %v mapper for %s %d", d, r.details, r.status)
	return ""
}

// check checks a reply the client got: its status, content type, the
// exact body the listener's mapper sets, and that the body is the API's
// own error shape — OpenAI's {"error":{message,type,param,code}} with the
// reply's code, or Anthropic's {"type":"error","error":{type,message}} —
// with the type the API gives the status.
func (r envoyReply) check(t *testing.T, name string, d llmapi.Dialect, status int, h http.Header, body string) {
	t.Helper()
	if status != r.status || h.Get("Content-Type") != "application/json" || body != r.configuredBody(t, d) {
		t.Errorf("%s: %d %q %s, want %d application/json %s", name, status, h.Get("Content-Type"), body, r.status, r.configuredBody(t, d))
		return
	}
	if d == llmapi.Anthropic {
		var a struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		wantType := "invalid_request_error"
		switch {
		case r.status == 403:
			wantType = "permission_error"
		case r.status >= 500:
			wantType = "api_error"
		}
		if err := json.Unmarshal([]byte(body), &a); err != nil || a.Type != "error" || a.Error.Type != wantType || a.Error.Message == "" {
			t.Errorf("%s: not Anthropic's error shape (type %s): %s (%v)", name, wantType, body, err)
		}
		return
	}
	var o struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	wantType := "invalid_request_error"
	if r.status >= 500 {
		wantType = "server_error"
	}
	if err := json.Unmarshal([]byte(body), &o); err != nil || o.Error.Type != wantType || o.Error.Message == "" || o.Error.Param != nil ||
		o.Error.Code == nil || *o.Error.Code != r.code {
		t.Errorf("%s: not OpenAI's error shape (type %s, code %s): %s (%v)", name, wantType, r.code, body, err)
	}
}

// localReplyBodyLimit is the default gateway.max_request_body_bytes, which
// the policies below keep.
const localReplyBodyLimit = 4 << 20

// rawExchange sends head (a request line and headers, without the blank
// line) and then the body as send writes it, on its own connection, and
// reads the one response. send runs until the response arrives (its
// context ends then).
func rawExchange(t *testing.T, base, head string, send func(ctx context.Context, w io.Writer)) (int, http.Header, string) {
	t.Helper()
	st, h, body, err := exchange(base, head, send)
	if err != nil {
		t.Fatal(err)
	}
	return st, h, body
}

// exchange is rawExchange, for any goroutine.
func exchange(base, head string, send func(ctx context.Context, w io.Writer)) (int, http.Header, string, error) {
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		return 0, nil, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, head+"\r\n"); err != nil {
		return 0, nil, "", err
	}
	ctx, cancel := context.WithCancel(context.Background())
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		if send != nil {
			send(ctx, c)
		}
	}()
	defer func() { cancel(); c.Close(); <-sent }()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, nil, "", fmt.Errorf("read response: %w", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, "", fmt.Errorf("read body: %w", err)
	}
	return resp.StatusCode, resp.Header, string(b), nil
}

// trickle writes body one byte per interval until it is all sent or ctx
// ends.
func trickle(body string, interval time.Duration) func(context.Context, io.Writer) {
	return func(ctx context.Context, w io.Writer) {
		for i := 0; i < len(body); i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
			if _, err := w.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	}
}

// once writes s and stops.
func once(s string) func(context.Context, io.Writer) {
	return func(_ context.Context, w io.Writer) { io.WriteString(w, s) }
}

// envoyRepliesPolicy: the listener's stream idle timeout 1 s and request
// timeout 2 s (short, so the tests wait little); each provider's route idle
// timeout 500 ms.
const envoyRepliesPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
gateway: {stream_idle_timeout: 1s, request_timeout: 2s}
providers:
  - {name: oa, kind: openai-compatible, base_url: "http://%[1]s", idle_timeout: 500ms}
  - {name: an, kind: anthropic, base_url: "http://%[1]s", api_key: "sk-ant-upstream", idle_timeout: 500ms}
models:
  - {name: m, provider: oa}
  - {name: claude, provider: an}
teams: [{name: t}]
`

// TestEnvoyRepliesAreTheAPIsErrors: every reply Envoy makes itself on
// Sluice's listener — the stream idle and request timeouts, the overload
// manager's shedding, the HTTP/1 codec's refusals (a header block or a
// header count over the limits, a method the codec does not know),
// HTTP/1.0, a WebSocket upgrade — reaches the client as the JSON error of
// the API it called, with Envoy's status: OpenAI's shape on
// /v1/chat/completions, Anthropic's on /v1/messages, except for the
// codec's replies, which Envoy makes before the request has a path
// (OpenAI's shape everywhere). The emulator produces each as Envoy does,
// driven by Sluice's real xDS listener, ext_authz and ext_proc.
func TestEnvoyRepliesAreTheAPIsErrors(t *testing.T) {
	mock, mockAddr := mockProvider(t, mockllm.Options{AnthropicAPIKey: "sk-ant-upstream", Words: 1})
	s := startSluice(t, fmt.Sprintf(envoyRepliesPolicy, mockAddr))
	_, key := s.createKey(t, "t")
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-envoy-replies", XDSAddress: s.xdsAddr, MaxHeapBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	type api struct {
		d          llmapi.Dialect
		path, body string
		auth       string // the credential header line
	}
	apis := []api{
		{llmapi.OpenAI, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "Authorization: Bearer " + key},
		{llmapi.Anthropic, "/v1/messages", `{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "x-api-key: " + key},
	}
	head := func(a api, method, proto string, extra ...string) string {
		h := method + " " + a.path + " " + proto + "\r\nHost: gw\r\nContent-Type: application/json\r\n" + a.auth + "\r\n"
		for _, e := range extra {
			h += e + "\r\n"
		}
		return h
	}
	withLength := func(a api, n int, extra ...string) string {
		return head(a, "POST", "HTTP/1.1", append([]string{fmt.Sprintf("Content-Length: %d", n)}, extra...)...)
	}
	eachProxy(t, b, func(t *testing.T, p proxy) {
		for _, a := range apis {
			t.Run(a.d.String(), func(t *testing.T) {
				// The listener's stream idle timeout while the client has
				// sent half its body: 408 (ActiveStream::onIdleTimeout),
				// through Sluice's ext_proc.
				st, h, body := rawExchange(t, p.url, withLength(a, len(a.body)), once(a.body[:len(a.body)/2]))
				envoyReply{"stream_idle_timeout", false, 408, apierr.CodeRequestTimeout}.check(t, "stream idle, request incomplete", a.d, st, h, body)

				// The provider's route idle timeout once the request is
				// complete and the provider says nothing: 504.
				st, h, body = call{path: a.path, body: a.body, headers: map[string]string{"x-mock-latency": "5s"}}.do(t, p.url, key)
				envoyReply{"stream_idle_timeout", false, 504, apierr.CodeUpstreamTimeout}.check(t, "stream idle, provider silent", a.d, st, h, body)

				// The request timeout for a client that keeps sending, but
				// too slowly: 408 (ActiveStream::onRequestTimeout).
				st, h, body = rawExchange(t, p.url, withLength(a, len(a.body)), trickle(a.body, 200*time.Millisecond))
				envoyReply{"request_overall_timeout", false, 408, apierr.CodeRequestTimeout}.check(t, "request timeout", a.d, st, h, body)

				// HTTP/1.0: 426, before any filter.
				st, h, body = rawExchange(t, p.url, head(a, "GET", "HTTP/1.0"), nil)
				envoyReply{"low_version", false, 426, apierr.CodeHTTPVersion}.check(t, "HTTP/1.0", a.d, st, h, body)

				// A WebSocket upgrade: 403, through the encoder filters.
				st, h, body = rawExchange(t, p.url, head(a, "GET", "HTTP/1.1", "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="), nil)
				envoyReply{"upgrade_failed", false, 403, apierr.CodeUpgradeRefused}.check(t, "WebSocket upgrade", a.d, st, h, body)

				// The codec's refusals come before the stream has request
				// headers: OpenAI's shape on every path.
				big := "X-Big: " + strings.Repeat("a", 61*1024)
				st, h, body = rawExchange(t, p.url, withLength(a, 0, big), nil)
				envoyReply{"http1.headers_too_large", false, 431, apierr.CodeHeadersTooLarge}.check(t, "headers too large", llmapi.OpenAI, st, h, body)
				var many []string
				for i := range 101 {
					many = append(many, fmt.Sprintf("X-H%d: v", i))
				}
				st, h, body = rawExchange(t, p.url, withLength(a, 0, many...), nil)
				envoyReply{"http1.too_many_headers", false, 431, apierr.CodeHeadersTooLarge}.check(t, "too many headers", llmapi.OpenAI, st, h, body)
				st, h, body = rawExchange(t, p.url, head(a, "post", "HTTP/1.1", "Content-Length: 0"), nil)
				envoyReply{"http1.", true, 400, apierr.CodeMalformedRequest}.check(t, "an unknown method", llmapi.OpenAI, st, h, body)

				// The overload manager at its limit (the emulator's heap
				// monitor reads what the test sets): 503 for every new
				// request, before any filter; below it, served again.
				if p.emu == nil {
					return // a real Envoy's heap cannot be set from here
				}
				if err := p.emu.SetResourcePressure(envoytest.FixedHeapMonitor, 0.99); err != nil {
					t.Fatal(err)
				}
				st, h, body = call{path: a.path, body: a.body}.do(t, p.url, key)
				envoyReply{"overload", false, 503, apierr.CodeGatewayOverloaded}.check(t, "overloaded", a.d, st, h, body)
				if err := p.emu.SetResourcePressure(envoytest.FixedHeapMonitor, 0.5); err != nil {
					t.Fatal(err)
				}
				if st, _, body := (call{path: a.path, body: a.body}).do(t, p.url, key); st != 200 {
					t.Errorf("below the overload threshold: %d %s", st, body)
				}
			})
		}
		if p.emu != nil {
			// What the emulator recorded: Envoy's details for each.
			want := map[string]bool{"stream_idle_timeout": true, "request_overall_timeout": true, "low_version": true, "upgrade_failed": true,
				"http1.headers_too_large": true, "http1.too_many_headers": true, "http1.codec_error": true, "overload": true}
			for _, x := range p.emu.Exchanges() {
				delete(want, x.Details)
			}
			if len(want) > 0 {
				t.Errorf("no exchange recorded with details %v", want)
			}
		}
	})
	if mock.Requests() == 0 {
		t.Error("the provider was never called (the 504 and the requests below the overload threshold reach it)")
	}
}

// clusterGonePolicy: unknown paths pass to oa2 (OpenAI) and an2
// (Anthropic); the edit below removes both, adding m3 on oa3.
const clusterGonePolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
gateway: {unknown_paths: pass, pass_to: {openai: oa2, anthropic: an2}}
providers:
  - {name: oa, kind: openai-compatible, base_url: "http://%[1]s"}
  - {name: oa2, kind: openai-compatible, base_url: "http://%[1]s"}
  - {name: an2, kind: anthropic, base_url: "http://%[1]s", api_key: "sk-ant-upstream"}
models:
  - {name: m, provider: oa}
teams: [{name: t}]
`

const clusterGoneEdited = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
providers:
  - {name: oa, kind: openai-compatible, base_url: "http://%[1]s"}
  - {name: oa3, kind: openai-compatible, base_url: "http://%[1]s"}
models:
  - {name: m, provider: oa}
  - {name: m3, provider: oa3}
teams: [{name: t}]
`

// TestProviderRemovedInFlight: a request routed to a provider (here an
// unknown path passed to it) whose configuration edit removes that
// provider before the router sends it on gets Envoy's cluster_not_found
// 503 (router.cc, Filter::decodeHeaders: the stream keeps its route table,
// but the cluster is looked up when the router gets the request), as the
// API's JSON error: Sluice's provider_not_configured, retryable.
func TestProviderRemovedInFlight(t *testing.T) {
	_, mockAddr := mockProvider(t, mockllm.Options{AnthropicAPIKey: "sk-ant-upstream", Words: 1})
	s := startSluice(t, fmt.Sprintf(clusterGonePolicy, mockAddr))
	_, key := s.createKey(t, "t")
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-provider-removed", XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	eachProxy(t, b, func(t *testing.T, p proxy) {
		const body = `{"purpose":"x"}`
		cases := []struct {
			d          llmapi.Dialect
			path, auth string
		}{
			{llmapi.OpenAI, "/v1/files", "Authorization: Bearer " + key},
			{llmapi.Anthropic, "/v1/messages/files", "x-api-key: " + key},
		}
		type result struct {
			status int
			h      http.Header
			body   string
			err    error
		}
		rest := make(chan struct{})
		results := make([]chan result, len(cases))
		forwarded := counter(t, s, `sluice_extproc_requests_total{endpoint="unknown",outcome="forwarded"}`)
		for i, c := range cases {
			results[i] = make(chan result, 1)
			head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n%s\r\nContent-Length: %d\r\n", c.path, c.auth, len(body))
			go func() {
				// The headers and part of the body: ext_proc routes the
				// request to the pass_to provider at its headers and holds
				// them (BUFFERED) until the rest arrives.
				st, h, b, err := exchange(p.url, head, func(ctx context.Context, w io.Writer) {
					io.WriteString(w, body[:4])
					select {
					case <-rest:
						io.WriteString(w, body[4:])
					case <-ctx.Done():
					}
				})
				results[i] <- result{st, h, b, err}
			}()
		}
		// Both are routed (Sluice counts a passed request at its headers).
		deadline := time.Now().Add(10 * time.Second)
		for counter(t, s, `sluice_extproc_requests_total{endpoint="unknown",outcome="forwarded"}`) < forwarded+len(cases) {
			if time.Now().After(deadline) {
				close(rest)
				t.Fatal("the requests were never routed")
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Remove both providers; wait until the proxy has the new
		// configuration (m3, on a provider only it has, is served).
		if err := os.WriteFile(s.config, []byte(fmt.Sprintf(clusterGoneEdited, mockAddr)), 0o600); err != nil {
			t.Fatal(err)
		}
		deadline = time.Now().Add(15 * time.Second)
		for {
			st, _, _ := call{path: "/v1/chat/completions", body: `{"model":"m3","messages":[{"role":"user","content":"hi"}]}`}.do(t, p.url, key)
			if st == 200 {
				break
			}
			if time.Now().After(deadline) {
				close(rest)
				t.Fatalf("the edited configuration never reached the proxy (m3: %d)", st)
			}
			time.Sleep(50 * time.Millisecond)
		}
		close(rest)
		for i, c := range cases {
			r := <-results[i]
			if r.err != nil {
				t.Errorf("%s: %v", c.path, r.err)
				continue
			}
			envoyReply{"cluster_not_found", false, 503, apierr.CodeProviderNotConfigured}.check(t, c.path, c.d, r.status, r.h, r.body)
		}
		if p.emu != nil {
			n := 0
			for _, x := range p.emu.Exchanges() {
				if x.Details == "cluster_not_found" && x.ResponseFlags == "NC" {
					n++
				}
			}
			if n != len(cases) {
				t.Errorf("%d exchanges with cluster_not_found and flag NC, want %d", n, len(cases))
			}
		}
	})
}

// counter is the value of one series of Sluice's /metrics, 0 when absent.
func counter(t *testing.T, s *sluiceProcess, series string) int {
	t.Helper()
	for _, l := range strings.Split(s.metrics(t), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			var n float64
			fmt.Sscan(v, &n)
			return int(n)
		}
	}
	return 0
}
