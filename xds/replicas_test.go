package xds

import (
	"testing"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestReplicasServeTheSameVersion: two Sluice replicas that compiled the
// same configuration on their own serve the same version of every type,
// to Envoy and to proxyless gRPC clients alike; an Envoy that held one
// replica's configuration and reconnects to the other, announcing the
// versions it holds as Envoy does, is sent no clusters and no listeners,
// and its endpoints and routes only at the versions it holds (barrier:
// nothing else comes before a change made after it connected).
func TestReplicasServeTheSameVersion(t *testing.T) {
	checkLeaks(t)
	a, b := startXDS(t), startXDS(t)
	policy := serverPolicy("1m", "1s", `{name: other, kind: openai, base_url: "https://api.openai.com", api_key: sk-test}`)
	a.update(t, policy)
	b.update(t, policy)
	if a.Version() != b.Version() {
		t.Errorf("replica versions %q and %q for one configuration", a.Version(), b.Version())
	}
	for _, f := range []Flavour{FlavourEnvoy, FlavourGRPC} {
		va, vb := a.served(t, f), b.served(t, f)
		for typ, v := range va {
			if vb[typ] != v {
				t.Errorf("flavour %d, %s: replica a serves %q, b %q", f, ShortType(typ), v, vb[typ])
			}
		}
	}

	want := a.served(t, FlavourEnvoy)
	node := envoyNode("envoy-1", "")
	first := newSotwClient(t, dial(t, a.addr), node, envoyNames("pool"))
	first.syncAll(want)

	// Envoy reconnects to the other replica: each type's first request
	// on the new stream carries the version it holds, and no nonce.
	again := newSotwClient(t, dial(t, b.addr), envoyNode("envoy-1", ""), envoyNames("pool"))
	for _, typ := range typeOrder {
		again.send(&discoverygrpc.DiscoveryRequest{TypeUrl: typ, VersionInfo: want[typ], ResourceNames: again.names[typ]})
	}
	// Endpoints and routes come again at the versions held (a request
	// names resources, and only a response tells the client it has them
	// all); clusters and listeners do not.
	for got := map[string]bool{}; len(got) < 2; {
		r := again.next()
		typ := r.GetTypeUrl()
		if typ != resourcev3.EndpointType && typ != resourcev3.RouteType {
			t.Fatalf("the other replica sent %s version %s to an Envoy holding %s", ShortType(typ), r.GetVersionInfo(), want[typ])
		}
		if r.GetVersionInfo() != want[typ] || got[typ] {
			t.Fatalf("the other replica sent %s version %s (again: %v); want %s once", ShortType(typ), r.GetVersionInfo(), got[typ], want[typ])
		}
		got[typ] = true
		again.ack(r)
	}
	barrier(t, b, again, serverPolicy("2m", "1s", `{name: other, kind: openai, base_url: "https://api.openai.com", api_key: sk-test}`))
}
