package xds

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/sluicegw/sluice/policies"
	"github.com/sluicegw/sluice/xds/xdstest"
)

// expectedVersions is what the server will serve for p to the default
// group's Envoys, by type URL, computed without serving it.
func expectedVersions(t testing.TB, p *policies.Snapshot) map[string]string {
	t.Helper()
	r, err := Build(p, Groups(p)[0], FlavourEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	snap, _, err := Snapshot(r)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, typ := range typeOrder {
		out[typ] = snap.GetVersion(typ)
	}
	return out
}

// TestScale1000 connects 1,000 Envoy-like ADS clients, each its own node,
// and pushes one config change to all of them. It checks that every one
// gets it and logs how long that took and the heap it cost; the targets
// are bench/xdsfanout's.
func TestScale1000(t *testing.T) {
	const nodes, conns = 1000, 8
	checkLeaks(t)
	ts := startXDS(t)
	ts.update(t, xdstest.FanOutPolicy(1))
	v1 := ts.served(t, FlavourEnvoy)
	cc := make([]grpc.ClientConnInterface, conns)
	for i := range cc {
		cc[i] = dial(t, ts.addr)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	fleet, err := xdstest.Start(ctx, xdstest.FleetConfig{
		Conns: cc,
		Nodes: nodes,
		Node: func(i int) *corev3.Node {
			return &corev3.Node{Id: fmt.Sprintf("scale-%04d", i), Cluster: "scale", UserAgentName: "envoy"}
		},
		Names: map[string][]string{resourcev3.EndpointType: xdstest.FanOutEDSNames, resourcev3.RouteType: {RouteName}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleet.Close)

	// wait returns how long after t0 every client had received and ACKed
	// want, and every ACK had been recorded by the server.
	wait := func(what string, want map[string]string, t0 time.Time) (client, server time.Duration) {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		if n, err := fleet.Wait(wctx); err != nil || n != nodes {
			t.Fatalf("%s: %d of %d clients received and ACKed it: %v", what, n, nodes, err)
		}
		client = time.Since(t0)
		// The server's view: every node's ACKs recorded.
		for {
			acked := 0
			ns := ts.Nodes()
			for _, n := range ns {
				if ackedAll(n, want) {
					acked++
				}
			}
			if len(ns) == nodes && acked == nodes {
				return client, time.Since(t0)
			}
			if wctx.Err() != nil {
				t.Fatalf("%s: the server recorded %d of %d nodes (%d connected) as ACKing it", what, acked, nodes, len(ns))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	fleet.Expect(v1)
	connectClient, connectServer := wait("version 1", v1, start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	responses := fleet.Responses()

	// The push: every type changes.
	p2 := compile(t, xdstest.FanOutPolicy(2))
	v2 := expectedVersions(t, p2)
	for _, typ := range typeOrder {
		if v2[typ] == v1[typ] {
			t.Fatalf("%s unchanged between the versions", ShortType(typ))
		}
	}
	fleet.Expect(v2)
	t0 := time.Now()
	if changed, err := ts.Update(p2); err != nil || !changed {
		t.Fatalf("Update = %v, %v", changed, err)
	}
	update := time.Since(t0)
	pushClient, pushServer := wait("version 2", v2, t0)

	inuse := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("%d nodes over %d connections: connected and ACKed version 1 in %v (%v until the server recorded every ACK), %d responses",
		nodes, conns, connectClient.Round(time.Millisecond), connectServer.Round(time.Millisecond), responses)
	t.Logf("push to all %d: %v until every client received and ACKed it (Update itself %v), %v until the server recorded every ACK; %d responses",
		nodes, pushClient.Round(time.Millisecond), update.Round(time.Millisecond), pushServer.Round(time.Millisecond), fleet.Responses()-responses)
	t.Logf("heap in use: %.1f MiB before connecting, %.1f MiB with %d nodes connected: +%.1f MiB, %.1f KiB per node (server and test clients together)",
		mib(before.HeapInuse), mib(after.HeapInuse), nodes, float64(inuse)/(1<<20), float64(inuse)/1024/nodes)
	if got := fleet.Responses() - responses; got != nodes*len(typeOrder) {
		t.Errorf("the push sent %d responses, want %d: one per type per node", got, nodes*len(typeOrder))
	}
	if err := fleet.Err(); err != nil {
		t.Errorf("a client failed: %v", err)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
