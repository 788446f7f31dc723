package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/envoy/envoytest"
	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/xds"
)

// waitExchanges waits until e has recorded at least n exchanges: the
// emulator records one once every filter of the stream is done, which may
// be after the client has the whole response (an ext_proc stream is
// closed after the reply went out).
func waitExchanges(t *testing.T, e *envoytest.Emulator, n int) []*envoytest.Exchange {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if xs := e.Exchanges(); len(xs) >= n {
			return xs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d exchanges recorded, want %d", len(e.Exchanges()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// localReplyPolicy: one provider, a 1 KiB body limit (so the listener's
// buffer is 1 KiB + 64 KiB).
const localReplyPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
gateway: {max_request_body_bytes: 1024}
providers:
  - {name: mock, kind: openai-compatible, base_url: "http://%s"}
models:
  - {name: m, provider: mock}
teams: [{name: t}]
`

// TestLocalRepliesThroughExtProc: Envoy encodes another filter's local
// reply, and its own, through ext_proc (sendLocalReplyViaFilterChain), so
// Sluice's ext_proc sees the response of a request it never admitted — an
// ext_authz denial (a bad key: 401), the listener buffer's 413 (rewritten
// to JSON by local_reply_config). Through Sluice's generated listener each
// reaches the client byte for byte as ext_authz and local_reply_config
// made it, with its status and content type, without a content-length
// (ext_proc in STREAMED response mode removes it, as Envoy's
// shouldRemoveContentLength does; the body is sent chunked) — and no
// spend record is written, no provider is called, and Sluice counts the
// replies.
func TestLocalRepliesThroughExtProc(t *testing.T) {
	mock, mockAddr := mockProvider(t, mockllm.Options{})
	s := startSluice(t, fmt.Sprintf(localReplyPolicy, mockAddr))
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-local-replies-ext-proc", XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	_, key := s.createKey(t, "t")
	badKey := "sk-sluice-" + strings.Repeat("Z", 43)
	chat := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	denial := s.denial(t, "/v1/chat/completions", badKey)
	var tooLarge string
	for _, m := range chain.LocalReply(1024).GetMappers() {
		if m.GetFilter().GetExtensionFilter() != nil && strings.Contains(m.GetFilter().GetExtensionFilter().String(), "request_payload_too_large") {
			tooLarge = m.GetBodyFormatOverride().GetTextFormat()
		}
	}
	if denial == "" || tooLarge == "" {
		t.Fatalf("expected bodies: denial %q, 413 %q", denial, tooLarge)
	}
	eachProxy(t, b, func(t *testing.T, p proxy) {
		st, h, body := call{path: "/v1/chat/completions", body: chat}.do(t, p.url, badKey)
		checkLocalReply(t, "ext_authz denial", st, h, body, 401, denial)
		// The buffer limit. Chunked, so Sluice cannot refuse the body at
		// its request headers from a content-length. When the whole body
		// arrives before Sluice's request-headers reply, ext_proc still
		// sends the buffered body on that reply
		// (ProcessorState::handleHeadersResponse, complete_body_available_)
		// and Sluice's own 413 goes out directly (the response headers
		// are already set); that race is real Envoy's too, so it is
		// retried, and Envoy's reply must win within a few tries.
		var won bool
		for try := 0; try < 10 && !won; try++ {
			st, h, body := call{path: "/v1/chat/completions", body: bodyOfSize(1024 + 64<<10 + 1), chunked: true}.do(t, p.url, key)
			if st == 413 && strings.Contains(body, `"code":"body_too_large"`) && strings.Contains(body, "this gateway accepts at most 1024") {
				continue // Sluice read the whole body first
			}
			checkLocalReply(t, "buffer limit", st, h, body, 413, tooLarge)
			won = true
		}
		if !won {
			t.Errorf("buffer limit: Sluice refused the body itself on 10 tries; Envoy's 413 never came")
		}
		if p.emu != nil {
			for _, x := range waitExchanges(t, p.emu, 2) {
				var sawResponse bool
				for _, ev := range x.ExtProc {
					sawResponse = sawResponse || ev.Sent.GetResponseHeaders() != nil
				}
				if !sawResponse {
					t.Errorf("exchange %s (%d): ext_proc never saw the response", x.Details, x.Status)
				}
			}
		}
	})
	if n := mock.Requests(); n != 0 {
		t.Errorf("the provider was called %d times", n)
	}
	if out := strings.TrimSpace(s.run(t, "spend", "--records", "--format", "json", "--limit", "0")); out != "" {
		t.Errorf("spend records for requests never admitted:\n%s", out)
	}
	if m := s.metrics(t); !strings.Contains(m, `sluice_extproc_local_replies_total{status="401"}`) || !strings.Contains(m, `sluice_extproc_local_replies_total{status="413"}`) {
		t.Errorf("/metrics lacks the local replies:\n%s", m)
	}
}

// checkLocalReply checks a local reply that went through Sluice's
// ext_proc: its status, JSON body and the absent content-length.
func checkLocalReply(t *testing.T, name string, st int, h http.Header, body string, status int, want string) {
	t.Helper()
	if st != status || body != want || h.Get("content-type") != "application/json" {
		t.Errorf("%s: %d %q %q, want %d application/json %q", name, st, h.Get("content-type"), body, status, want)
	}
	if cl := h.Get("content-length"); cl != "" {
		t.Errorf("%s: content-length %q; ext_proc's STREAMED response mode removes it", name, cl)
	}
}

// denial is the body Sluice's ext_authz denies secret with on path.
func (p *sluiceProcess) denial(t *testing.T, path, secret string) string {
	t.Helper()
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := authv3.NewAuthorizationClient(conn).Check(context.Background(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
		Path: path, Headers: map[string]string{":path": path, "authorization": "Bearer " + secret},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetDeniedResponse().GetBody()
}

// metrics is the admin server's /metrics page.
func (p *sluiceProcess) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + p.adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSluiceUnreachable: Envoy's chain points at a Sluice that does not
// answer (nothing listens at the address Sluice's xDS gives for its own
// cluster). ext_authz fails closed with 503; that reply runs through
// ext_proc, whose stream fails too, and ext_proc's status_on_error (503,
// not Envoy's default 500) goes out directly. The listener's
// local_reply_config gives it the API's JSON error — retryable,
// gateway_unavailable — in each dialect; the provider is never called.
func TestSluiceUnreachable(t *testing.T) {
	mock, mockAddr := mockProvider(t, mockllm.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	s := startSluice(t, fmt.Sprintf(localReplyPolicy, mockAddr)+fmt.Sprintf("xds: {sluice_addresses: [%q]}\n", dead))
	_, key := s.createKey(t, "t")
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-sluice-unreachable", XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	want := map[llmapi.Dialect]string{}
	for _, d := range []llmapi.Dialect{llmapi.OpenAI, llmapi.Anthropic} {
		want[d] = string(apierr.Body(d, &apierr.Error{Status: 503, Code: apierr.CodeGatewayUnavailable, Message: "the gateway's policy service is unavailable; retry"}))
	}
	eachProxy(t, b, func(t *testing.T, p proxy) {
		for _, tc := range []struct {
			c call
			d llmapi.Dialect
		}{
			{call{path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`}, llmapi.OpenAI},
			{call{path: "/v1/messages", body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`}, llmapi.Anthropic},
		} {
			st, h, body := tc.c.do(t, p.url, key)
			if st != 503 || body != want[tc.d] || h.Get("content-type") != "application/json" {
				t.Errorf("%s: %d %q %q, want 503 application/json %q", tc.c.path, st, h.Get("content-type"), body, want[tc.d])
			}
		}
		if p.emu != nil {
			for _, x := range waitExchanges(t, p.emu, 2) {
				if !strings.HasPrefix(x.Details, "ext_proc_error_gRPC_error_14{") {
					t.Errorf("details %q: want ext_proc's failure reply (gRPC UNAVAILABLE), which follows ext_authz's", x.Details)
				}
			}
		}
	})
	if n := mock.Requests(); n != 0 {
		t.Errorf("the provider was called %d times", n)
	}
}
