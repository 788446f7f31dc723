package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/testtls"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/xds"
)

// tlsPolicy has two https providers in front of one TLS mock: good trusts
// the mock's CA through xds.upstream_ca_file, wrong names another CA as
// its own ca_file. The provider's host is a DNS name (the SNI and the
// certificate's SAN); endpoints point it at the mock on 127.0.0.1.
const tlsPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
providers:
  - {name: good, kind: openai-compatible, base_url: "https://%[1]s", endpoints: ["%[2]s"], api_key: "sk-upstream-tls"}
  - {name: wrong, kind: openai-compatible, base_url: "https://%[1]s", endpoints: ["%[2]s"], api_key: "sk-upstream-tls", ca_file: "%[4]s"}
models:
  - {name: m-good, provider: good}
  - {name: m-wrong, provider: wrong}
teams: [{name: t}]
xds: {upstream_ca_file: "%[3]s"}
`

// TestTLSProvider: the TLS context Sluice generates for an https provider
// works through Envoy as a real Envoy runs it — trusted_ca, SNI and SAN
// the provider's host name — so the request reaches the provider with the
// credential Sluice injected and is recorded; with a CA file that does
// not sign the provider's certificate, the handshake fails and the client
// gets the listener's JSON 503.
func TestTLSProvider(t *testing.T) {
	const host = "llm.provider.test"
	ca := testtls.NewCA(t, "provider CA")
	mock, addr, hellos := mockTLSProvider(t, mockllm.Options{APIKey: "sk-upstream-tls"}, ca.Issue(t, host))
	s := startSluice(t, fmt.Sprintf(tlsPolicy, host, addr, ca.WriteFile(t), testtls.NewCA(t, "another CA").WriteFile(t)))
	_, key := s.createKey(t, "t")
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-" + strings.ReplaceAll(t.Name(), "/", "-"), XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	eachProxy(t, b, func(t *testing.T, p proxy) {
		t.Run("the right CA", func(t *testing.T) {
			n := mock.Requests()
			st, h, body := call{path: "/v1/chat/completions", body: `{"model":"m-good","messages":[{"role":"user","content":"hi"}]}`}.do(t, p.url, key)
			if st != 200 {
				t.Fatalf("%d %s", st, body)
			}
			got := mock.Received()
			if mock.Requests() != n+1 || len(got) == 0 {
				t.Fatalf("the provider saw %d requests, want 1", mock.Requests()-n)
			}
			if r := got[len(got)-1]; r.Header.Get("authorization") != "Bearer sk-upstream-tls" || r.Host != host || r.Path != "/v1/chat/completions" {
				t.Errorf("the provider got %s %s, authorization %q; want host %s and Sluice's credential", r.Host, r.Path, r.Header.Get("authorization"), host)
			}
			hello, ok := hellos.Last()
			if !ok || hello.ServerName != host || !slices.Equal(hello.ALPN, []string{"http/1.1"}) {
				t.Errorf("ClientHello %+v, want SNI %s and ALPN [http/1.1]", hello, host)
			}
			rec := s.awaitRecord(t, h.Get("x-sluice-request-id"))
			if rec.Provider != "good" || rec.Model != "m-good" || rec.Status != 200 || rec.Tokens[tokens.Output] == 0 {
				t.Errorf("spend record %+v, want provider good, model m-good, status 200 and output tokens", rec)
			}
		})
		t.Run("a CA that did not sign the provider's certificate", func(t *testing.T) {
			n := mock.Requests()
			st, h, body := call{path: "/v1/chat/completions", body: `{"model":"m-wrong","messages":[{"role":"user","content":"hi"}]}`}.do(t, p.url, key)
			want := `{"error":{"message":"the provider is unavailable: the connection failed or was reset before a response","type":"server_error","param":null,"code":"upstream_unavailable"}}`
			if st != 503 || h.Get("content-type") != "application/json" || strings.TrimSpace(body) != want {
				t.Errorf("%d %q %s\nwant 503 application/json %s", st, h.Get("content-type"), body, want)
			}
			if mock.Requests() != n {
				t.Errorf("the provider saw %d requests through a failed handshake", mock.Requests()-n)
			}
			if p.emu == nil {
				return
			}
			x := exchangeOf(t, p.emu, h.Get("x-sluice-request-id"))
			const details = "upstream_reset_before_response_started{remote_connection_failure|TLS_error:|268435581:SSL_routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED:verify_cert_failed:_X509_verify_cert:_certificate_verification_error_at_depth_0:_unable_to_get_local_issuer_certificate:TLS_error_end}"
			if x.Details != details || len(x.Attempts) != 2 {
				t.Errorf("details %q after %d attempts\nwant %q after 2 (retries.on connect-failure)", x.Details, len(x.Attempts), details)
			}
		})
	})
}
