package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/policies"
	"github.com/sluicegw/sluice/xds"
)

// fallbackHostPolicy: a model that falls back from p1 to p2, each
// provider with its own credential (the mocks refuse any other).
const fallbackHostPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
providers:
  - {name: p1, kind: openai-compatible, base_url: "http://%s", api_key: sk-p1-secret}
  - {name: p2, kind: openai-compatible, base_url: "http://%s", api_key: sk-p2-secret}
models:
  - name: m-ha
    providers: [{name: p1}, {name: p2}]
teams: [{name: t}]
`

// TestFallbackSkippedMemberGetsItsOwnCredential: the first provider's
// member has no healthy host (its endpoints are UNHEALTHY in EDS, as an
// active health check or the control plane marks them), so the aggregate
// cluster gives it no load and the request's FIRST attempt goes to the
// second provider (source/extensions/clusters/aggregate/cluster.cc and the
// priority load: a member's share follows its health). The attempt number
// would name p1; the host names p2, and the upstream processor rewrites
// for the host's provider: p2 receives p2's credential and nothing of
// p1's, and the request is recorded against p2. The xDS resources are
// Sluice's own (xds.Build of the same policy), served by a control plane
// that marks p1's endpoints unhealthy.
func TestFallbackSkippedMemberGetsItsOwnCredential(t *testing.T) {
	p1, p1Addr := mockProvider(t, mockllm.Options{APIKey: "sk-p1-secret"})
	p2, p2Addr := mockProvider(t, mockllm.Options{APIKey: "sk-p2-secret"})
	policy := fmt.Sprintf(fallbackHostPolicy, p1Addr, p2Addr)
	s := startSluice(t, policy)
	_, key := s.createKey(t, "t")

	cfg, err := policies.Parse([]byte(policy), "sluice.yaml", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policies.Compile(cfg, filepath.Join(t.TempDir(), "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	g := xds.Groups(snap)[0]
	g.SluiceAddresses = []string{s.grpcAddr}
	r, err := xds.Build(snap, g, xds.FlavourEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	unhealthy := 0
	for _, la := range r.Endpoints {
		if la.GetClusterName() != "p1" {
			continue
		}
		for _, lle := range la.GetEndpoints() {
			for _, lb := range lle.GetLbEndpoints() {
				lb.HealthStatus = corev3.HealthStatus_UNHEALTHY
				unhealthy++
			}
		}
	}
	if unhealthy == 0 {
		t.Fatal("p1 has no EDS endpoints to mark unhealthy")
	}
	cs, _, err := xds.Snapshot(r)
	if err != nil {
		t.Fatal(err)
	}
	const node = "e2e-fallback-host"
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cache := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)
	if err := cache.SetSnapshot(ctx, node, cs); err != nil {
		t.Fatal(err)
	}
	xdsAddr := serveGRPC(t, func(gs *grpc.Server) {
		discoverygrpc.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(ctx, cache, nil, sotw.WithOrderedADS()))
	})
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: node, XDSAddress: xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	eachProxy(t, b, func(t *testing.T, p proxy) {
		p1.Reset()
		p2.Reset()
		st, h, body := call{path: "/v1/chat/completions", body: `{"model":"m-ha","messages":[{"role":"user","content":"hi"}]}`}.do(t, p.url, key)
		if st != 200 {
			t.Fatalf("m-ha: %d %s, want the second provider's 200", st, body)
		}
		if n := p1.Requests(); n != 0 {
			t.Errorf("p1, without a healthy host, got %d requests", n)
		}
		got := p2.Received()
		if len(got) != 1 {
			t.Fatalf("p2 got %d requests, want 1", len(got))
		}
		if a := got[0].Header.Get("Authorization"); a != "Bearer sk-p2-secret" {
			t.Errorf("p2 got authorization %q, want its own credential", a)
		}
		for k, vs := range got[0].Header {
			for _, v := range vs {
				if strings.Contains(v, "sk-p1-secret") {
					t.Errorf("p2 got p1's credential in %s", k)
				}
			}
		}
		if rec := s.awaitRecord(t, h.Get("x-sluice-request-id")); rec.Provider != "p2" || rec.Model != "m-ha" || rec.Status != 200 {
			t.Errorf("spend record %+v; want provider p2, model m-ha, 200", rec)
		}
		if p.emu != nil {
			x := waitExchanges(t, p.emu, 1)[0]
			var attempts []string
			for _, a := range x.Attempts {
				attempts = append(attempts, fmt.Sprintf("%s:%d", a.Cluster, a.Status))
			}
			if got := strings.Join(attempts, " "); got != "p2.fallback:200" {
				t.Errorf("attempts %q, want the first and only one on p2's member", got)
			}
		}
	})
}
