// Package xdsfanout measures the xDS control plane's fan-out: how long one
// configuration change takes to reach, and be ACKed by, 1,000 connected
// Envoy-like ADS clients (xds/xdstest.Fleet) over real gRPC on loopback.
package xdsfanout

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicegw/sluice/policies"
	"github.com/sluicegw/sluice/xds"
	"github.com/sluicegw/sluice/xds/xdstest"
)

const nodes, conns = 1000, 8

func compile(b *testing.B, yaml string) *policies.Snapshot {
	b.Helper()
	cfg, err := policies.Parse([]byte(yaml), "bench.yaml", nil)
	if err != nil {
		b.Fatal(err)
	}
	s, err := policies.Compile(cfg, "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// versions is what the server serves for p to the default group's Envoys,
// by type URL.
func versions(b *testing.B, p *policies.Snapshot) map[string]string {
	b.Helper()
	r, err := xds.Build(p, xds.Groups(p)[0], xds.FlavourEnvoy)
	if err != nil {
		b.Fatal(err)
	}
	snap, _, err := xds.Snapshot(r)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]string{}
	for _, typ := range xdstest.Types {
		out[typ] = snap.GetVersion(typ)
	}
	return out
}

// BenchmarkPushTo1000 reports the time from Update to the moment all 1,000
// clients have received and ACKed every changed type (clusters,
// assignments, listener, routes), alternating between two configs.
func BenchmarkPushTo1000(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := xds.New(xds.Options{})
	g := grpc.NewServer(grpc.WaitForHandlers(true))
	s.Register(ctx, g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	defer func() {
		g.Stop()
		if err := <-served; err != nil {
			b.Error(err)
		}
	}()

	configs := []*policies.Snapshot{compile(b, xdstest.FanOutPolicy(1)), compile(b, xdstest.FanOutPolicy(2))}
	want := []map[string]string{versions(b, configs[0]), versions(b, configs[1])}
	if _, err := s.Update(configs[0]); err != nil {
		b.Fatal(err)
	}
	cc := make([]grpc.ClientConnInterface, conns)
	for i := range cc {
		c, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		cc[i] = c
	}
	fleet, err := xdstest.Start(ctx, xdstest.FleetConfig{
		Conns: cc,
		Nodes: nodes,
		Node: func(i int) *corev3.Node {
			return &corev3.Node{Id: fmt.Sprintf("bench-%04d", i), UserAgentName: "envoy"}
		},
		Names: map[string][]string{resourcev3.EndpointType: xdstest.FanOutEDSNames, resourcev3.RouteType: {xds.RouteName}},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer fleet.Close()
	waitAll := func() {
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		if n, err := fleet.Wait(wctx); err != nil {
			b.Fatalf("%d of %d clients: %v", n, nodes, err)
		}
	}
	fleet.Expect(want[0])
	waitAll()

	var total time.Duration
	pushes := 0
	for b.Loop() {
		next := (pushes + 1) % 2
		fleet.Expect(want[next])
		t0 := time.Now()
		if changed, err := s.Update(configs[next]); err != nil || !changed {
			b.Fatalf("Update = %v, %v", changed, err)
		}
		waitAll()
		total += time.Since(t0)
		pushes++
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(pushes), "ms/push-to-1000")
}
