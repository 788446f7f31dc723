package e2e

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/policies"
)

// extprocOnlyPolicy: team t may make four requests a minute; team doomed
// is removed while the test runs. Arguments: the mock's address, the
// sha256 of the declared key that expired, and the teams after t.
const extprocOnlyPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
providers:
  - {name: provider, kind: openai-compatible, base_url: "http://%[1]s"}
models:
  - {name: m, provider: provider}
pricing:
  m: {input: 1000000, output: 10000000}
keys:
  - {name: old, team: t, sha256: %[2]s, expires_at: 2020-01-01T00:00:00Z}
teams:
  - name: t
    limits: {requests: {per_minute: 4}}
%[3]s`

const expiredExtprocOnly = "sk-sluice-EXPIRED0123456789abcdefghijklmnopqrstuvwxyzAB"

// TestExtprocAloneRefusesUnusableKeys: Envoy with ext_proc and no
// ext_authz, so that Sluice reads the key from the request itself. A
// revoked key, an expired one and one whose team was removed are refused
// with ext_authz's statuses and reasons, the provider is never called,
// no spend record is written, and nothing was counted against the team:
// of its four requests a minute, the checks that saw its two keys created
// (createKey asks ext_authz until it accepts a key) took two, and its
// usable key still gets the other two, then a 429.
func TestExtprocAloneRefusesUnusableKeys(t *testing.T) {
	mock, mockAddr := mockProvider(t, mockllm.Options{})
	withDoomed := "  - name: doomed\n"
	s := startSluice(t, fmt.Sprintf(extprocOnlyPolicy, mockAddr, sha256Hex(expiredExtprocOnly), withDoomed))
	_, good := s.createKey(t, "t")
	revokedID, revoked := s.createKey(t, "t")
	_, orphan := s.createKey(t, "doomed")
	var out, errb bytes.Buffer
	if err := app.Run(t.Context(), []string{"keys", "revoke", "--config", s.config, revokedID}, &out, &errb, noEnv); err != nil {
		t.Fatalf("keys revoke: %v %s", err, errb.String())
	}
	// The team goes; the server reloads the file and its key is left
	// without a team: ext_authz says so (asked directly, not through the
	// chain, which would serve the key until then).
	if err := os.WriteFile(s.config, fmt.Appendf(nil, extprocOnlyPolicy, mockAddr, sha256Hex(expiredExtprocOnly), ""), 0o600); err != nil {
		t.Fatal(err)
	}
	awaitAuthzRefusal(t, s.grpcAddr, orphan, "which no longer exists")
	awaitAuthzRefusal(t, s.grpcAddr, revoked, "was revoked")

	sl := staticCluster(t, "sluice", s.grpcAddr, true)
	filters := chain.HTTPFilters(chain.Options{Cluster: "sluice"})[1:] // ext_proc alone
	b := bootstrap(t, []*clusterv3.Cluster{sl, staticCluster(t, "provider", mockAddr, false)}, filters...)
	sluiceListener(b, policies.Default().Gateway.MaxRequestBodyBytes)
	url := staticEmulator(t, b)

	chat := func(rid string) call {
		return call{path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, headers: map[string]string{"x-request-id": rid}}
	}
	calls := mock.Requests()
	for _, tc := range []struct {
		name, key string
		status    int
		says      string
	}{
		{"revoked", revoked, 403, "was revoked at"},
		{"expired", expiredExtprocOnly, 403, "expired at 2020-01-01T00:00:00Z"},
		{"team removed", orphan, 403, `doomed\", which no longer exists`},
	} {
		st, h, body := chat("alone-"+tc.name).do(t, url, tc.key)
		if st != tc.status || !strings.Contains(body, tc.says) || !strings.Contains(body, `"code":"invalid_api_key"`) {
			t.Errorf("%s key: %d %s; want %d invalid_api_key saying %q", tc.name, st, body, tc.status, tc.says)
		}
		if id := h.Get("x-sluice-request-id"); id != "" {
			if recs := s.run(t, "spend", "--records", "--format", "json", "--limit", "0"); strings.Contains(recs, id) {
				t.Errorf("%s key: a spend record for its request: %s", tc.name, recs)
			}
		}
	}
	if n := mock.Requests(); n != calls {
		t.Errorf("the provider was called %d times for refused keys", n-calls)
	}
	for i := range 2 {
		if st, _, body := chat(fmt.Sprintf("alone-good-%d", i)).do(t, url, good); st != 200 {
			t.Fatalf("usable key, request %d of the team's last 2 this minute: %d %s", i+1, st, body)
		}
	}
	if st, _, body := chat("alone-good-3").do(t, url, good); st != 429 {
		t.Errorf("usable key, a third request in the minute: %d %s; want 429", st, body)
	}
	recs := s.run(t, "spend", "--records", "--format", "json", "--limit", "0")
	if n := strings.Count(strings.TrimSpace(recs), "\n") + 1; recs == "" || n != 2 {
		t.Errorf("%d spend records; want the usable key's 2:\n%s", n, recs)
	}
}

// awaitAuthzRefusal asks ext_authz, directly, until it refuses secret with
// a body that says says (the server learns of a change through its store
// feed or its config watcher, within seconds).
func awaitAuthzRefusal(t *testing.T, addr, secret, says string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := authv3.NewAuthorizationClient(conn)
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
		Path: "/v1/chat/completions", Headers: map[string]string{":path": "/v1/chat/completions", "authorization": "Bearer " + secret, "x-request-id": "await-refusal"},
	}}}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := c.Check(t.Context(), req)
		if err == nil && strings.Contains(resp.GetDeniedResponse().GetBody(), says) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ext_authz never refused the key saying %q: %v %v", says, resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
