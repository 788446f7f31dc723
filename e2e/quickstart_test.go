package e2e

import (
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/envoy/envoytest"
)

// TestQuickstartFiles runs the quickstart's own files — Sluice's
// examples/quickstart.yaml and the Envoy bootstrap
// examples/envoy-quickstart.yaml — with the fixed ports rewritten to the
// test's random ones, and sends the request the README shows: the demo
// team's model is served, a model it may not use is refused, and the spend
// shows up in `sluice spend`.
func TestQuickstartFiles(t *testing.T) {
	cfg, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	provider, providerAddr := mockProvider(t, mockllm.Options{})
	s := startSluice(t, string(cfg))
	_, key := s.createKey(t, "demo")
	authzAddr := s.grpcAddr

	b, err := envoytest.LoadBootstrap("../examples/envoy-quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b.StaticResources.Listeners[0].Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 0}
	for _, c := range b.StaticResources.Clusters {
		addr := map[string]string{"sluice": authzAddr, "mock": providerAddr}[c.GetName()]
		if addr == "" {
			t.Fatalf("unexpected cluster %q in the quickstart bootstrap", c.GetName())
		}
		_, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		c.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: uint32(p)}
	}
	b.Admin = nil // the test runs its own; a real Envoy gets one on 127.0.0.1:0

	eachProxy(t, b, func(t *testing.T, p proxy) {
		provider.Reset()
		send := func(key string, model ...string) (int, string) {
			m := "gpt-4o-mini"
			if len(model) > 0 {
				m = model[0]
			}
			req, _ := http.NewRequest("POST", p.url+"/v1/chat/completions", strings.NewReader(`{"model":"`+m+`","messages":[{"role":"user","content":"Hello!"}]}`))
			req.Header.Set("authorization", "Bearer "+key)
			req.Header.Set("content-type", "application/json")
			status, _, body := do(t, req)
			return status, body
		}
		if status, body := send(key); status != 200 || !strings.Contains(body, `"chat.completion"`) {
			t.Fatalf("demo key: %d %s", status, body)
		}
		if got := provider.Received()[0].Header.Get("Authorization"); got != "" {
			t.Errorf("the caller's key reached the provider: %q", got)
		}
		if status, body := send("sk-sluice-" + strings.Repeat("Q", 43)); status != 401 {
			t.Errorf("wrong key: %d %s", status, body)
		}
		if status, body := send(key, "gpt-4o"); status != 403 || !strings.Contains(body, "does not have access to model `gpt-4o`") {
			t.Errorf("disallowed model: %d %s", status, body)
		}
		// Every endpoint the mock serves is configured: embeddings and
		// Anthropic's Messages API too.
		for _, c := range []call{
			{path: "/v1/embeddings", body: `{"model":"text-embedding-3-small","input":"Hello!"}`},
			{path: "/v1/messages", body: `{"model":"claude-haiku-4-5","max_tokens":64,"messages":[{"role":"user","content":"Hello!"}]}`, headers: map[string]string{"anthropic-version": "2023-06-01"}},
		} {
			if status, _, body := c.do(t, p.url, key); status != 200 {
				t.Errorf("%s: %d %s", c.path, status, body)
			}
		}
	})
	out := s.run(t, "spend", "--by", "model")
	for _, m := range []string{"gpt-4o-mini", "text-embedding-3-small", "claude-haiku-4-5"} {
		if !strings.Contains(out, m) {
			t.Errorf("sluice spend lacks %s:\n%s", m, out)
		}
	}
}
