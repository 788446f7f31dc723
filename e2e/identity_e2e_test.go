package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/envoy/envoytest"
)

// identityPolicy is limitsPolicy with the provider named "local", so that
// gatewayBootstrap — a proxy that keeps a client's x-request-id, as one
// without use_remote_address does — routes to it.
const identityPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
providers:
  - {name: local, kind: openai-compatible, base_url: "http://%s"}
models:
  - {name: m, provider: local}
pricing:
  m: {input: 0, output: 1000000}
teams:
  - name: t
    limits:
      budgets: [{micro_usd: %d, period: day}]
`

// staticEmulator serves an emulator from a static bootstrap.
func staticEmulator(t *testing.T, b *bootstrapv3.Bootstrap) string {
	t.Helper()
	e, err := envoytest.New(b, envoytest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
	ln, err := e.Listen(lctx)
	lcancel()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String()
}

// TestClientRequestIDIsNotIdentity: 200 requests that reuse one
// x-request-id, and one that sends an empty one, through a proxy that
// passes the client's id to Sluice, are 201 records — the spend record's
// identity is Sluice's — and after a restart the budget rebuilt from the
// ledger counts all of them: it admits exactly what they left. Through
// Sluice's own listener the client's id is replaced by Envoy's, which the
// response carries and the record keeps for correlation.
func TestClientRequestIDIsNotIdentity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and restarts a sluice subprocess; not in -short")
	}
	const reused, cost, budget = 200, 100, 25_000 // 250 requests' worth
	_, mockAddr := mockProvider(t, mockllm.Options{Words: 100})
	config := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(identityPolicy, mockAddr, budget)), 0o600); err != nil {
		t.Fatal(err)
	}
	child, s := startChild(t, config)
	_, key := s.createKey(t, "t")
	url := staticEmulator(t, gatewayBootstrap(t, s.grpcAddr, mockAddr, mockAddr))
	client := &http.Client{}
	for i := range reused + 1 {
		id := "same-id"
		if i == reused {
			id = "" // sent, but empty
		}
		if r := send(client, url, key, id); r.err != nil || r.status != 200 {
			t.Fatalf("request %d: %d %s %v", i, r.status, r.body, r.err)
		}
	}
	recs := s.records(t)
	ids := map[string]bool{}
	clients := map[string]int{}
	for _, r := range recs {
		ids[r.RequestID] = true
		clients[r.ClientRequestID]++
	}
	if len(recs) != reused+1 || len(ids) != reused+1 || clients["same-id"] != reused || clients[""] != 1 {
		t.Fatalf("%d records with %d distinct ids, client ids %v; want %d records, %d of them same-id and one empty",
			len(recs), len(ids), clients, reused+1, reused)
	}

	// A crash loses none of them: the restarted Sluice's budget is what
	// the ledger says, 25,000 - 201×100 = 4,900: 49 more requests.
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, s2 := startChild(t, config)
	s2.waitForKey(t, key)

	// Through Sluice's listener (use_remote_address) the client's id is
	// replaced; the response and the record carry Envoy's.
	xdsURL := emulatorFor(t, s2, "identity")
	r := send(client, xdsURL, key, "same-id")
	if r.err != nil || r.status != 200 {
		t.Fatalf("through Sluice's listener: %d %s %v", r.status, r.body, r.err)
	}
	if r.requestID == "" || r.requestID == "same-id" {
		t.Errorf("response x-sluice-request-id %q; want Envoy's own", r.requestID)
	}
	if rec := s2.awaitRecord(t, r.requestID); rec.ClientRequestID != r.requestID || strings.Contains(rec.RequestID, "same-id") {
		t.Errorf("record %+v", rec)
	}

	url2 := staticEmulator(t, gatewayBootstrap(t, s2.grpcAddr, mockAddr, mockAddr))
	admitted := 0
	for {
		r := send(client, url2, key, "same-id")
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.status == 429 {
			break
		}
		if r.status != 200 || admitted > budget/cost {
			t.Fatalf("after the restart: %d %s after %d admitted", r.status, r.body, admitted)
		}
		admitted++
	}
	if want := (budget - (reused+2)*cost) / cost; admitted != want {
		t.Errorf("after the restart %d more requests were admitted; the ledger leaves room for %d", admitted, want)
	}
}
