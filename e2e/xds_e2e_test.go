package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/envoy/envoytest"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/xds"
)

// xdsPolicy routes three models: one per provider, and one that falls back
// from the first to the second. The first provider is down (every request
// answers 503).
const xdsPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
providers:
  - {name: down, kind: openai-compatible, base_url: "http://%s"}
  - {name: up, kind: openai-compatible, base_url: "http://%s"}
models:
  - {name: m-down, provider: down}
  - {name: m-up, provider: up}
  - name: m-ha
    providers: [%s]
teams: [{name: t}]
`

// TestXDSEndToEnd: an Envoy (the emulator; a real one too where envoy is
// on PATH) whose bootstrap names only Sluice's xDS server receives the
// listener, routes and clusters over ADS and serves real traffic through
// them: each model reaches its provider, and a fallback model's request
// that the first provider refuses with 503 is answered by the second, in
// the same client request. A config edit reaches the proxy within a
// second or two and changes where requests go.
func TestXDSEndToEnd(t *testing.T) {
	downMock, downAddr := mockProvider(t, mockllm.Options{Status: 503})
	upMock, upAddr := mockProvider(t, mockllm.Options{})
	s := startSluice(t, fmt.Sprintf(xdsPolicy, downAddr, upAddr, "{name: down}, {name: up}"))
	_, key := s.createKey(t, "t")

	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-" + strings.ReplaceAll(t.Name(), "/", "-"), XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	eachProxy(t, b, func(t *testing.T, p proxy) {
		// ids maps the x-request-id a client sent to the one Sluice's
		// listener replaced it with, which the response carries.
		ids := map[string]string{}
		chat := func(model, rid string) (int, string) {
			st, h, body := call{path: "/v1/chat/completions", body: `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`,
				headers: map[string]string{"x-request-id": rid}}.do(t, p.url, key)
			if got := h.Get("x-sluice-request-id"); got == "" || got == rid {
				t.Errorf("%s: response x-request-id %q; want Envoy's own, not the client's %q", model, got, rid)
			}
			ids[rid] = h.Get("x-sluice-request-id")
			return st, body
		}
		down0, up0 := downMock.Requests(), upMock.Requests()

		if st, body := chat("m-up", "up-1"); st != 200 {
			t.Fatalf("m-up: %d %s", st, body)
		}
		if rec := s.awaitRecord(t, ids["up-1"]); rec.Provider != "up" {
			t.Errorf("m-up recorded provider %q", rec.Provider)
		}
		if got := upMock.Requests() - up0; got != 1 {
			t.Errorf("m-up: the up provider saw %d requests, want 1", got)
		}

		// The down provider answers 503; retries.max defaults to 1, so
		// Envoy tries it twice, and the client gets the provider's 503.
		if st, body := chat("m-down", "down-1"); st != 503 {
			t.Errorf("m-down: %d %s, want the provider's 503", st, body)
		}
		if got := downMock.Requests() - down0; got != 2 {
			t.Errorf("m-down: the down provider saw %d requests, want 2 (one retry)", got)
		}

		// Fallback: down refuses, up answers, within one client request.
		down1, up1 := downMock.Requests(), upMock.Requests()
		st, body := chat("m-ha", "ha-1")
		if st != 200 {
			t.Fatalf("m-ha: %d %s, want 200 from the second provider", st, body)
		}
		if downMock.Requests()-down1 != 1 || upMock.Requests()-up1 != 1 {
			t.Errorf("m-ha: down saw %d, up saw %d requests; want 1 each", downMock.Requests()-down1, upMock.Requests()-up1)
		}
		rec := s.awaitRecord(t, ids["ha-1"])
		if rec.Provider != "up" || rec.Model != "m-ha" || rec.Status != 200 || rec.Tokens[tokens.Output] == 0 {
			t.Errorf("m-ha spend record = %+v; want provider up, model m-ha, status 200, tokens", rec)
		}
		if p.emu != nil {
			x := exchangeOf(t, p.emu, ids["ha-1"])
			var clusters []string
			for _, a := range x.Attempts {
				clusters = append(clusters, fmt.Sprintf("%s:%d", a.Cluster, a.Status))
			}
			if got := strings.Join(clusters, " "); x.Cluster != "sluice.fallback.m-ha" || got != "down.fallback:503 up.fallback:200" {
				t.Errorf("m-ha: cluster %q, attempts %q; want the fallback cluster, down then up", x.Cluster, got)
			}
			// Each attempt was rewritten for its provider by the upstream
			// ext_proc, and nothing Sluice-internal reached a provider.
			for _, a := range x.Attempts {
				if a.Request == nil {
					continue
				}
				for _, h := range []string{"x-sluice-provider", "authorization"} {
					if v, ok := a.Request.Headers.Get(h); ok {
						t.Errorf("attempt to %s carried %s: %q", a.Cluster, h, v)
					}
				}
			}
		}

		// Reverse the priority: up first. The proxy has it within ~1 s of
		// the file change (250 ms poll, 1 s settle, one push).
		cfg := fmt.Sprintf(xdsPolicy, downAddr, upAddr, "{name: up}, {name: down}")
		if err := os.WriteFile(s.config, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for i := 0; ; i++ {
			down2 := downMock.Requests()
			if st, body := chat("m-ha", fmt.Sprintf("ha-rev-%d", i)); st != 200 {
				t.Fatalf("m-ha after the edit: %d %s", st, body)
			}
			if downMock.Requests() == down2 {
				break // up answered first: the new order is in force
			}
			if time.Now().After(deadline) {
				t.Fatal("the reversed fallback order never reached the proxy")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// exchangeOf finds the emulator's record of the request with the given
// x-request-id.
func exchangeOf(t *testing.T, e *envoytest.Emulator, rid string) *envoytest.Exchange {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, x := range e.Exchanges() {
			for _, a := range x.Attempts {
				if a.Request == nil {
					continue
				}
				if v, _ := a.Request.Headers.Get("x-request-id"); v == rid {
					return x
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no exchange recorded for request %s", rid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
