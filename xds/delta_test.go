package xds

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"
)

// A delta ADS client written for the test: a raw DeltaAggregatedResources
// stream that subscribes, ACKs and NACKs by nonce, and checks that only
// changes are sent.

type deltaClient struct {
	t      *testing.T
	node   *corev3.Node
	stream discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	first  bool
	in     chan *discoverygrpc.DeltaDiscoveryResponse
	err    error // after in is closed
}

func newDeltaClient(t *testing.T, cc *grpc.ClientConn, node *corev3.Node) *deltaClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &deltaClient{t: t, node: node, stream: stream, in: make(chan *discoverygrpc.DeltaDiscoveryResponse, 64)}
	receive(ctx, t, cancel, stream.Recv, c.in, &c.err)
	return c
}

func (c *deltaClient) send(req *discoverygrpc.DeltaDiscoveryRequest) {
	c.t.Helper()
	if !c.first {
		req.Node, c.first = c.node, true
	}
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("send %s: %v", ShortType(req.GetTypeUrl()), err)
	}
}

// subscribe opens a type's subscription: wildcard without names.
func (c *deltaClient) subscribe(typ string, names ...string) {
	c.t.Helper()
	c.send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: typ, ResourceNamesSubscribe: names})
}

func (c *deltaClient) next() *discoverygrpc.DeltaDiscoveryResponse {
	c.t.Helper()
	select {
	case r, ok := <-c.in:
		if !ok {
			c.t.Fatalf("delta stream ended: %v", c.err)
		}
		return r
	case <-time.After(testTimeout):
		c.t.Fatalf("no delta response within %v", testTimeout)
	}
	return nil
}

func (c *deltaClient) ack(r *discoverygrpc.DeltaDiscoveryResponse) {
	c.t.Helper()
	c.send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
}

func (c *deltaClient) nack(r *discoverygrpc.DeltaDiscoveryResponse, msg string) {
	c.t.Helper()
	c.send(&discoverygrpc.DeltaDiscoveryRequest{
		TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce(),
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: msg},
	})
}

// nextOf receives responses until one of each of types has arrived, ACKing
// each; a second response of a type, or one of another type, fails.
func (c *deltaClient) nextOf(types ...string) map[string]*discoverygrpc.DeltaDiscoveryResponse {
	c.t.Helper()
	got := map[string]*discoverygrpc.DeltaDiscoveryResponse{}
	for len(got) < len(types) {
		r := c.next()
		typ := r.GetTypeUrl()
		if !slices.Contains(types, typ) || got[typ] != nil {
			c.t.Fatalf("unexpected %s response (resources %v, removed %v); want one each of %v", ShortType(typ), deltaNames(r), r.GetRemovedResources(), shortTypes(types))
		}
		got[typ] = r
		c.ack(r)
	}
	return got
}

func shortTypes(types []string) []string {
	var out []string
	for _, t := range types {
		out = append(out, ShortType(t))
	}
	return out
}

func deltaNames(r *discoverygrpc.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.GetResources() {
		out = append(out, res.GetName())
	}
	slices.Sort(out)
	return out
}

// deltaConfig is the delta test's policy: providers a and (unless its
// endpoint is empty) b, both EDS.
type deltaConfig struct {
	aConnect  string
	bEndpoint string
	accessLog string
}

func (d deltaConfig) yaml() string {
	b, bModel := "", ""
	if d.bEndpoint != "" {
		b = `  - {name: b, kind: openai-compatible, base_url: "http://pool-b.test:8000", endpoints: ["` + d.bEndpoint + `"]}`
		bModel = "  - {name: model-b, provider: b}"
	}
	return fmt.Sprintf(`
listen: {grpc: "127.0.0.1:9001", envoy: "127.0.0.1:10000"}
providers:
  - {name: a, kind: openai-compatible, base_url: "http://pool-a.test:8000", endpoints: ["10.0.0.1:8000"], connect_timeout: %s}
%s
models:
  - {name: model-a, provider: a}
%s
xds: {access_log: %q}
`, d.aConnect, b, bModel, d.accessLog)
}

// built is what Build makes of a config for the default group's Envoys, by
// type URL and name.
func built(t *testing.T, yaml string) map[string]map[string]types.Resource {
	t.Helper()
	p := compile(t, yaml)
	r, err := Build(p, Groups(p)[0], FlavourEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]types.Resource{}
	add := func(typ string, res types.Resource) {
		if out[typ] == nil {
			out[typ] = map[string]types.Resource{}
		}
		out[typ][cachev3.GetResourceName(res)] = res
	}
	for _, c := range r.Clusters {
		add(resourcev3.ClusterType, c)
	}
	for _, e := range r.Endpoints {
		add(resourcev3.EndpointType, e)
	}
	for _, l := range r.Listeners {
		add(resourcev3.ListenerType, l)
	}
	for _, rc := range r.Routes {
		add(resourcev3.RouteType, rc)
	}
	return out
}

// checkDelta compares a response's resources with want (by name) and its
// removals with removed.
func checkDelta(t *testing.T, r *discoverygrpc.DeltaDiscoveryResponse, want map[string]types.Resource, removed ...string) {
	t.Helper()
	got := map[string]types.Resource{}
	for _, res := range r.GetResources() {
		m, err := res.GetResource().UnmarshalNew()
		if err != nil {
			t.Fatalf("%s %q: %v", ShortType(r.GetTypeUrl()), res.GetName(), err)
		}
		got[res.GetName()] = m
	}
	if diff := cmp.Diff(want, got, protocmp.Transform(), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("%s resources (-want +got):\n%s", ShortType(r.GetTypeUrl()), diff)
	}
	gotRemoved := slices.Sorted(slices.Values(r.GetRemovedResources()))
	if !slices.Equal(gotRemoved, removed) {
		t.Errorf("%s removed_resources = %v, want %v", ShortType(r.GetTypeUrl()), gotRemoved, removed)
	}
}

// pick returns the named resources of one type.
func pick(all map[string]map[string]types.Resource, typ string, names ...string) map[string]types.Resource {
	out := map[string]types.Resource{}
	for _, n := range names {
		out[n] = all[typ][n]
	}
	return out
}

// TestDelta runs one delta stream through a sequence of config changes;
// each step builds on the previous one.
func TestDelta(t *testing.T) {
	checkLeaks(t)
	ts := startXDS(t)
	cfg := deltaConfig{aConnect: "1s", bEndpoint: "10.0.1.1:8000", accessLog: "/tmp/sluice-access-0.log"}
	ts.update(t, cfg.yaml())
	const node = "delta-1"
	c := newDeltaClient(t, dial(t, ts.addr), envoyNode(node, ""))

	// barrier proves nothing was sent since the last response: it changes
	// the listener only and checks that the next response is that.
	barriers := 0
	barrier := func() {
		t.Helper()
		barriers++
		cfg.accessLog = fmt.Sprintf("/tmp/sluice-access-%d.log", barriers)
		ts.update(t, cfg.yaml())
		r := c.nextOf(resourcev3.ListenerType)[resourcev3.ListenerType]
		checkDelta(t, r, pick(built(t, cfg.yaml()), resourcev3.ListenerType, ListenerName))
	}
	ackedServed := func(what string) NodeStatus {
		t.Helper()
		v := ts.served(t, FlavourEnvoy)
		return ts.waitNode(t, node, what, func(n NodeStatus) bool { return ackedAll(n, v) })
	}

	// Subscribe: wildcard clusters and listeners, named assignments and
	// routes. Everything arrives once, as Build made it.
	c.subscribe(resourcev3.ClusterType)
	c.subscribe(resourcev3.EndpointType, "a", "b")
	c.subscribe(resourcev3.ListenerType)
	c.subscribe(resourcev3.RouteType, RouteName)
	got := c.nextOf(typeOrder...)
	want := built(t, cfg.yaml())
	v1 := ts.served(t, FlavourEnvoy)
	for _, typ := range typeOrder {
		checkDelta(t, got[typ], want[typ])
		if got[typ].GetSystemVersionInfo() != v1[typ] {
			t.Errorf("%s system_version_info %s, want %s", ShortType(typ), got[typ].GetSystemVersionInfo(), v1[typ])
		}
	}
	ackedServed("ACK every type")
	barrier()

	// Only changes: b's endpoints move, so one assignment and nothing else.
	cfg.bEndpoint = "10.0.1.2:8000"
	ts.update(t, cfg.yaml())
	r := c.nextOf(resourcev3.EndpointType)[resourcev3.EndpointType]
	checkDelta(t, r, pick(built(t, cfg.yaml()), resourcev3.EndpointType, "b"))
	barrier()

	// Removal: b goes, so its cluster and assignment are removed and the
	// routes change.
	cfg.bEndpoint = ""
	ts.update(t, cfg.yaml())
	got = c.nextOf(resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.RouteType)
	checkDelta(t, got[resourcev3.ClusterType], nil, "b")
	checkDelta(t, got[resourcev3.EndpointType], nil, "b")
	checkDelta(t, got[resourcev3.RouteType], pick(built(t, cfg.yaml()), resourcev3.RouteType, RouteName))
	barrier()
	ackedServed("ACK the removal")

	// NACK: a's cluster changes and the node rejects it.
	before := built(t, cfg.yaml())
	kept := ts.served(t, FlavourEnvoy)[resourcev3.ClusterType]
	cfg.aConnect = "2s"
	ts.update(t, cfg.yaml())
	rejected := ts.served(t, FlavourEnvoy)[resourcev3.ClusterType]
	r = c.next()
	if r.GetTypeUrl() != resourcev3.ClusterType || !slices.Equal(deltaNames(r), []string{"a"}) {
		t.Fatalf("got %s %v, want cds [a]", ShortType(r.GetTypeUrl()), deltaNames(r))
	}
	cdsBefore := ts.wire.responses(node, resourcev3.ClusterType)
	c.nack(r, "connect_timeout: no")

	// Rolled back: the cluster the node accepted comes back, once.
	r = c.next()
	if r.GetTypeUrl() != resourcev3.ClusterType || r.GetSystemVersionInfo() != kept {
		t.Fatalf("after the NACK got %s version %s, want the rollback: cds %s", ShortType(r.GetTypeUrl()), r.GetSystemVersionInfo(), kept)
	}
	checkDelta(t, r, pick(before, resourcev3.ClusterType, "a"))
	c.ack(r)
	n := ts.waitNode(t, node, "pinned", func(n NodeStatus) bool { return n.Pinned && n.Acked["cds"] == kept })
	if n.Nacked["cds"] != rejected || n.LastError != "connect_timeout: no" {
		t.Errorf("after the NACK: %+v", n)
	}
	if got := metricValue(t, ts.m.nacks.WithLabelValues("cds")); got != 1 {
		t.Errorf("sluice_xds_nacks_total{type=cds} = %v, want 1", got)
	}
	// No loop. A first wildcard subscription (to secrets, of which there
	// are none) is answered at once, with nothing, and any cluster resend
	// would be queued before that answer. (A config change is no barrier
	// here: it unpins the node, which then gets the rejected cluster again.)
	c.subscribe(resourcev3.SecretType)
	r = c.next()
	if r.GetTypeUrl() != resourcev3.SecretType || len(r.GetResources()) != 0 {
		t.Fatalf("after the rollback got %s %v, want the empty secrets answer", ShortType(r.GetTypeUrl()), deltaNames(r))
	}
	c.ack(r)
	if got := ts.wire.responses(node, resourcev3.ClusterType) - cdsBefore; got != 1 {
		t.Errorf("%d CDS responses after the NACK, want 1 (the rollback)", got)
	}
	if got := ts.wire.nacksFrom(node); got != 1 {
		t.Errorf("%d NACKs on the wire, want 1", got)
	}

	// A new config unpins the node, which takes it.
	cfg.aConnect = "3s"
	ts.update(t, cfg.yaml())
	r = c.nextOf(resourcev3.ClusterType)[resourcev3.ClusterType]
	checkDelta(t, r, pick(built(t, cfg.yaml()), resourcev3.ClusterType, "a"))
	if n := ackedServed("ACK the fix"); n.Pinned {
		t.Errorf("still pinned: %+v", n)
	}
	if s := ts.logs.String(); strings.Count(s, "xDS NACK") != 1 {
		t.Errorf("want one NACK logged; logs:\n%s", s)
	}
}
