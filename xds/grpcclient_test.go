package xds

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds" // registers the xds resolver and balancers

	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/policies"
)

// grpc-go as an independent xDS client of Sluice: a proxyless gRPC channel
// dials xds:///sluice-grpc, routes each RPC on x-sluice-provider to a
// provider's EDS endpoints, and is the judge of what Sluice serves.

// startBackend serves the gRPC health service on 127.0.0.1:0 and names
// itself in every response's "backend" header.
func startBackend(t *testing.T, name string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := grpc.SetHeader(ctx, metadata.Pairs("backend", name)); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(g, health.NewServer())
	done := make(chan error, 1)
	go func() { done <- g.Serve(lis) }()
	t.Cleanup(func() {
		g.Stop()
		if err := <-done; err != nil {
			t.Errorf("backend %s: %v", name, err)
		}
	})
	return lis.Addr().String()
}

// grpcPolicy has providers a and b on the given endpoints, served to
// proxyless gRPC clients (xds.proxyless: routing_only). a's scheme and
// connect timeout vary: https makes its cluster carry TLS with the system
// roots, which grpc-go rejects unless GRPC_EXPERIMENTAL_XDS_SYSTEM_ROOT_CERTS
// is set (gRFC A82), while Envoy's validation accepts it.
func grpcPolicy(aScheme, aAddr, bAddr, aConnect string, more ...string) string {
	return grpcPolicyProxyless(policies.ProxylessRoutingOnly, aScheme, aAddr, bAddr, aConnect, more...)
}

// grpcPolicyProxyless is grpcPolicy with xds.proxyless set to mode ("":
// unset, the default).
func grpcPolicyProxyless(mode, aScheme, aAddr, bAddr, aConnect string, more ...string) string {
	proxyless := ""
	if mode != "" {
		proxyless = ", proxyless: " + mode
	}
	return fmt.Sprintf(`
listen: {grpc: "127.0.0.1:9001", envoy: "127.0.0.1:10000"}
providers:
  - {name: a, kind: openai-compatible, base_url: "%s://backend-a.test:8443", endpoints: ["%s"], connect_timeout: %s}
  - {name: b, kind: openai-compatible, base_url: "http://backend-b.test:80", endpoints: ["%s"]}
models:
  - {name: model-a, provider: a}
  - {name: model-b, provider: b}
%s
xds: {access_log: "off"%s}
`, aScheme, aAddr, aConnect, bAddr, strings.Join(more, "\n"), proxyless)
}

// grpcClient is a proxyless gRPC channel with its own bootstrap (the
// environment's is read once at init, envoy-protocol.md §5).
type grpcClient struct {
	t    *testing.T
	node string
	hc   healthpb.HealthClient
}

func newGRPCClient(t *testing.T, xdsAddr string) *grpcClient {
	t.Helper()
	return newGRPCClientBootstrap(t, xdsAddr, "")
}

// newGRPCClientBootstrap is newGRPCClient with extra top-level bootstrap
// fields (JSON members, without the braces).
func newGRPCClientBootstrap(t *testing.T, xdsAddr, extra string) *grpcClient {
	t.Helper()
	node := fmt.Sprintf("grpc-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
	if extra != "" {
		extra = "," + extra
	}
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": "passthrough:///%s", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q}%s
	}`, xdsAddr, node, extra)
	rb, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///sluice-grpc", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return &grpcClient{t: t, node: node, hc: healthpb.NewHealthClient(cc)}
}

// call sends one RPC routed to provider (none: no routing header) and
// returns the backend that answered.
func (c *grpcClient) call(provider string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if provider != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, chain.RoutingHeader, provider)
	}
	var hdr metadata.MD
	if _, err := c.hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
		return "", err
	}
	if b := hdr.Get("backend"); len(b) == 1 {
		return b[0], nil
	}
	return "", fmt.Errorf("no backend header in %v", hdr)
}

// waitRoute polls until RPCs for provider reach backend.
func (c *grpcClient) waitRoute(provider, backend string) {
	c.t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		got, err := c.call(provider)
		if err == nil && got == backend {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("RPCs for provider %s: got backend %q, error %v; want backend %s within %v", provider, got, err, backend, testTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// expectRoutes checks one RPC per provider against the backend it must
// reach.
func (c *grpcClient) expectRoutes(want map[string]string) {
	c.t.Helper()
	for provider, backend := range want {
		if got, err := c.call(provider); err != nil || got != backend {
			c.t.Errorf("RPC for provider %s: backend %q, error %v; want %s", provider, got, err, backend)
		}
	}
}

func TestGRPCClient(t *testing.T) {
	if v := os.Getenv("GRPC_EXPERIMENTAL_XDS_SYSTEM_ROOT_CERTS"); strings.EqualFold(v, "true") {
		t.Skip("GRPC_EXPERIMENTAL_XDS_SYSTEM_ROOT_CERTS=true: grpc-go accepts the TLS cluster this test relies on it rejecting")
	}
	ts := startXDS(t)
	addrA, addrB := startBackend(t, "A"), startBackend(t, "B")
	ts.update(t, grpcPolicy("http", addrA, addrB, "5s"))
	c := newGRPCClient(t, ts.addr)

	// Routing on the header, to each provider's endpoints.
	c.waitRoute("a", "A")
	c.waitRoute("b", "B")
	if _, err := c.call(""); err == nil {
		t.Error("an RPC without the routing header succeeded; the catch-all route (a direct_response grpc-go cannot serve) should fail it")
	}
	v1 := ts.served(t, FlavourGRPC)
	n := ts.waitNode(t, c.node, "ACK all four types", func(n NodeStatus) bool { return ackedAll(n, v1) })
	if n.Flavour != FlavourGRPC || n.Pinned || len(n.Nacked) != 0 {
		t.Fatalf("grpc-go node after the first config: %+v", n)
	}

	// NACK: a becomes https, which changes only its cluster, and grpc-go
	// rejects it.
	ts.update(t, grpcPolicy("https", addrA, addrB, "5s"))
	v2 := ts.served(t, FlavourGRPC)
	for _, typ := range typeOrder {
		if changed := v2[typ] != v1[typ]; changed != (typ == resourcev3.ClusterType) {
			t.Fatalf("%s version %s → %s: the bad config must change the clusters only", ShortType(typ), v1[typ], v2[typ])
		}
	}
	n = ts.waitNode(t, c.node, "NACK the TLS cluster", func(n NodeStatus) bool { return n.Nacked["cds"] == v2[resourcev3.ClusterType] })
	if !n.Pinned || n.Acked["cds"] != v1[resourcev3.ClusterType] || !strings.Contains(n.LastError, "ca_certificate_provider_instance") {
		t.Errorf("after grpc-go's NACK: pinned %v, cds ACKed %s (want %s), last error %q", n.Pinned, n.Acked["cds"], v1[resourcev3.ClusterType], n.LastError)
	}
	if got := metricValue(t, ts.m.nacks.WithLabelValues("cds")); got != 1 {
		t.Errorf("sluice_xds_nacks_total{type=cds} = %v, want 1", got)
	}

	// No resend loop: for 2 s the old config keeps serving RPCs and the
	// node is sent nothing more. Unpatched, go-control-plane resends the
	// rejected version thousands of times a second.
	sent, nacks := ts.wire.responses(c.node, ""), ts.wire.nacksFrom(c.node)
	rpcs := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); rpcs += 2 {
		c.expectRoutes(map[string]string{"a": "A", "b": "B"})
	}
	extra, extraNacks := ts.wire.responses(c.node, "")-sent, ts.wire.nacksFrom(c.node)-nacks
	t.Logf("in the 2 s after the NACK: %d RPCs on the old config, %d responses sent to the node, %d more NACKs (total NACKs %d)", rpcs, extra, extraNacks, ts.wire.nacksFrom(c.node))
	if extra > 1 || extraNacks > 1 {
		t.Errorf("resend loop: %d responses and %d NACKs in the 2 s after the NACK, want at most 1 of each", extra, extraNacks)
	}

	// Fixed: back to plain HTTP, a new connect timeout (a new cluster
	// version), and a now served by backend B.
	ts.update(t, grpcPolicy("http", addrB, addrB, "2s"))
	v3 := ts.served(t, FlavourGRPC)
	if v3[resourcev3.ClusterType] == v1[resourcev3.ClusterType] || v3[resourcev3.EndpointType] == v1[resourcev3.EndpointType] {
		t.Fatalf("the fix must change clusters and endpoints: %v → %v", v1, v3)
	}
	ts.waitNode(t, c.node, "ACK the fix", func(n NodeStatus) bool { return ackedAll(n, v3) && !n.Pinned })
	c.waitRoute("a", "B")
	c.expectRoutes(map[string]string{"a": "B", "b": "B"})

}

// TestGRPCClientFallbackModel: a priority model's fallback resources
// (aggregate and member clusters, the fallback route) are Envoy's only —
// each attempt needs the upstream ext_proc. grpc-go, which names only the
// clusters its routes reach and refuses CLUSTER_PROVIDED, must keep
// routing to the providers and keep receiving cluster changes.
func TestGRPCClientFallbackModel(t *testing.T) {
	ts := startXDS(t)
	addrA, addrB := startBackend(t, "A"), startBackend(t, "B")
	ha := "  - {name: model-ha, providers: [{name: a}, {name: b}]}"
	ts.update(t, grpcPolicy("http", addrA, addrB, "2s", ha))
	c := newGRPCClient(t, ts.addr)
	c.waitRoute("a", "A")
	c.waitRoute("b", "B")
	ts.update(t, grpcPolicy("http", addrA, addrB, "3s", ha))
	v := ts.served(t, FlavourGRPC)
	ts.waitNode(t, c.node, "ACK the new clusters", func(n NodeStatus) bool { return n.Acked["cds"] == v[resourcev3.ClusterType] })
	c.expectRoutes(map[string]string{"a": "A", "b": "B"})
}

// TestGRPCClientWithheld: with xds.proxyless unset (off), grpc-go is
// served its listener and a virtual host without routes, which it
// accepts (no NACK): every RPC fails at once with UNAVAILABLE, not after
// the 15 s resource-not-found timer, and no provider cluster reaches it.
// The node is logged and counted once, however often the mode changes;
// routing_only gives it the routes, and off takes them away again.
func TestGRPCClientWithheld(t *testing.T) {
	ts := startXDS(t)
	addrA, addrB := startBackend(t, "A"), startBackend(t, "B")
	ts.update(t, grpcPolicyProxyless("", "http", addrA, addrB, "5s"))
	v := ts.served(t, FlavourGRPC)
	c := newGRPCClient(t, ts.addr)

	// withheld waits for an RPC to fail for want of a route, and checks
	// that it failed at once.
	withheld := func(what string) {
		t.Helper()
		deadline := time.Now().Add(testTimeout)
		for {
			start := time.Now()
			_, err := c.call("a")
			if status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "no matched route was found") {
				if took := time.Since(start); took > 2*time.Second {
					t.Errorf("%s: the RPC took %v to fail", what, took)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: RPC error %v, want UNAVAILABLE \"no matched route was found\" within %v", what, err, testTimeout)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	withheld("proxyless unset")
	n := ts.waitNode(t, c.node, "ACK the listener and routes", func(n NodeStatus) bool {
		return n.Acked["lds"] == v[resourcev3.ListenerType] && n.Acked["rds"] == v[resourcev3.RouteType]
	})
	if n.Flavour != FlavourGRPC || n.Pinned || len(n.Nacked) != 0 || n.Acked["cds"] != "" {
		t.Errorf("withheld grpc-go node: %+v; want no NACK and no clusters asked for", n)
	}
	if got := ts.wire.responses(c.node, resourcev3.ClusterType); got != 0 {
		t.Errorf("%d CDS responses sent to a withheld node, want none", got)
	}
	warned := func() int { return strings.Count(ts.logs.String(), "proxyless gRPC client served no routes") }
	if got := metricValue(t, ts.m.withheld); got != 1 || warned() != 1 {
		t.Errorf("sluice_xds_proxyless_withheld_total = %v and %d warnings, want 1 of each; logs:\n%s", got, warned(), ts.logs)
	}
	if !strings.Contains(ts.logs.String(), "node="+c.node) {
		t.Errorf("the warning does not name the node; logs:\n%s", ts.logs)
	}

	ts.update(t, grpcPolicy("http", addrA, addrB, "5s"))
	c.waitRoute("a", "A")
	c.waitRoute("b", "B")

	ts.update(t, grpcPolicyProxyless(policies.ProxylessOff, "http", addrA, addrB, "5s"))
	withheld("proxyless off again")
	if got := metricValue(t, ts.m.withheld); got != 1 || warned() != 1 {
		t.Errorf("after off, routing_only, off: sluice_xds_proxyless_withheld_total = %v and %d warnings, want still 1 (once per node)", got, warned())
	}
	if n, _ := ts.node(c.node); n.Pinned || len(n.Nacked) != 0 {
		t.Errorf("after the routes were withdrawn: %+v", n)
	}
}
