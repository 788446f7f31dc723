package xds

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sluicegw/sluice/internal/logbuf"
	"github.com/sluicegw/sluice/policies"
	"go.uber.org/goleak"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The test harness: Sluice's xDS server on 127.0.0.1:0 behind a stream
// interceptor that counts what goes over the wire per node, and a raw
// state-of-the-world ADS client.

// testTimeout bounds every wait for something the server or a client must
// do; nothing is timed against it.
const testTimeout = 20 * time.Second

// testXDS is a running server.
type testXDS struct {
	*Server
	addr string
	reg  *prometheus.Registry
	wire *wireCounter
	logs *syncBuffer
}

// startXDS serves a new Server (no configuration yet) until the test ends.
// Warnings and errors are logged to logs.
func startXDS(t testing.TB) *testXDS {
	t.Helper()
	ts := &testXDS{reg: prometheus.NewRegistry(), wire: newWireCounter(), logs: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(ts.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ts.Server = New(Options{Log: log, Metrics: NewMetrics(ts.reg)})
	g := grpc.NewServer(grpc.ChainStreamInterceptor(ts.wire.intercept), grpc.WaitForHandlers(true))
	ctx, cancel := context.WithCancel(context.Background())
	ts.Register(ctx, g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = lis.Addr().String()
	done := make(chan error, 1)
	go func() { done <- g.Serve(lis) }()
	t.Cleanup(func() {
		g.Stop()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("xDS gRPC server: %v", err)
		}
	})
	return ts
}

// update serves a policy and fails the test if it is refused.
func (ts *testXDS) update(t testing.TB, yaml string) {
	t.Helper()
	if _, err := ts.Update(compile(t, yaml)); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

// served is what a node of group 0 and flavour f is served, by type URL.
func (ts *testXDS) served(t testing.TB, f Flavour) map[string]string {
	t.Helper()
	short, err := ts.Served(0, f)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, typ := range typeOrder {
		out[typ] = short[ShortType(typ)]
	}
	return out
}

// node returns the status of one node, or false.
func (ts *testXDS) node(id string) (NodeStatus, bool) {
	for _, n := range ts.Nodes() {
		if n.ID == id {
			return n, true
		}
	}
	return NodeStatus{}, false
}

// waitNode polls the node's status until cond holds.
func (ts *testXDS) waitNode(t testing.TB, id, what string, cond func(NodeStatus) bool) NodeStatus {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		n, ok := ts.node(id)
		if ok && cond(n) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: %s: not within %v; status %+v (known: %v)", id, what, testTimeout, n, ok)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ackedAll reports whether a node has ACKed exactly the versions given by
// type URL.
func ackedAll(n NodeStatus, want map[string]string) bool {
	for typ, v := range want {
		if n.Acked[ShortType(typ)] != v {
			return false
		}
	}
	return true
}

// metricValue reads a counter or gauge. (prometheus/testutil would need a
// module go.mod does not list.)
func metricValue(t testing.TB, c prometheus.Metric) float64 {
	t.Helper()
	m := &dto.Metric{}
	if err := c.Write(m); err != nil {
		t.Fatal(err)
	}
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// wireCounter counts, per node id, the xDS responses sent (by type URL) and
// the NACKs received, on both ADS flavours.
type wireCounter struct {
	mu    sync.Mutex
	sent  map[string]map[string]int
	nacks map[string]int
}

func newWireCounter() *wireCounter {
	return &wireCounter{sent: map[string]map[string]int{}, nacks: map[string]int{}}
}

func (w *wireCounter) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &countingStream{ServerStream: ss, w: w})
}

// responses is the number of responses sent to a node, of one type or
// (typ "") all.
func (w *wireCounter) responses(node, typ string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if typ != "" {
		return w.sent[node][typ]
	}
	n := 0
	for _, c := range w.sent[node] {
		n += c
	}
	return n
}

func (w *wireCounter) nacksFrom(node string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nacks[node]
}

// countingStream learns the node from the stream's first request.
type countingStream struct {
	grpc.ServerStream
	w    *wireCounter
	node string // guarded by w.mu
}

func (s *countingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	var id string
	var nack bool
	switch r := m.(type) {
	case *discoverygrpc.DiscoveryRequest:
		id, nack = r.GetNode().GetId(), r.GetErrorDetail() != nil
	case *discoverygrpc.DeltaDiscoveryRequest:
		id, nack = r.GetNode().GetId(), r.GetErrorDetail() != nil
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.node == "" {
		s.node = id
	}
	if nack {
		s.w.nacks[s.node]++
	}
	return nil
}

func (s *countingStream) SendMsg(m any) error {
	var typ string
	switch r := m.(type) {
	case *discoverygrpc.DiscoveryResponse:
		typ = r.GetTypeUrl()
	case *discoverygrpc.DeltaDiscoveryResponse:
		typ = r.GetTypeUrl()
	}
	if typ != "" {
		s.w.mu.Lock()
		if s.w.sent[s.node] == nil {
			s.w.sent[s.node] = map[string]int{}
		}
		s.w.sent[s.node][typ]++
		s.w.mu.Unlock()
	}
	return s.ServerStream.SendMsg(m)
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer = logbuf.Buffer

// dial connects to the server; the connection closes when the test ends.
func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// sotwClient is a raw state-of-the-world ADS stream, driven by the test.
type sotwClient struct {
	t      testing.TB
	node   *corev3.Node
	stream discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	names  map[string][]string // subscribed names by type URL (none: wildcard)
	first  bool                // the node has been sent
	in     chan *discoverygrpc.DiscoveryResponse
	err    error // after in is closed
}

// envoyNames are the subscriptions of an Envoy to Sluice's resources:
// every cluster and listener, the named assignments and route.
func envoyNames(eds ...string) map[string][]string {
	return map[string][]string{resourcev3.EndpointType: eds, resourcev3.RouteType: {RouteName}}
}

func newSotwClient(t testing.TB, cc *grpc.ClientConn, node *corev3.Node, names map[string][]string) *sotwClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &sotwClient{t: t, node: node, stream: stream, names: names, in: make(chan *discoverygrpc.DiscoveryResponse, 64)}
	receive(ctx, t, cancel, stream.Recv, c.in, &c.err)
	return c
}

// receive pumps a test client's stream into in until the stream ends (the
// error lands in *errp before in closes) or the test does.
func receive[T any](ctx context.Context, t testing.TB, cancel context.CancelFunc, recv func() (T, error), in chan<- T, errp *error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(in)
		for {
			r, err := recv()
			if err != nil {
				*errp = err
				return
			}
			select {
			case in <- r:
			case <-ctx.Done():
				*errp = ctx.Err()
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func (c *sotwClient) send(req *discoverygrpc.DiscoveryRequest) {
	c.t.Helper()
	if !c.first {
		req.Node, c.first = c.node, true
	}
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("send %s: %v", ShortType(req.GetTypeUrl()), err)
	}
}

// subscribe sends the first request of each type, in make-before-break
// order.
func (c *sotwClient) subscribe(types ...string) {
	c.t.Helper()
	for _, typ := range types {
		c.send(&discoverygrpc.DiscoveryRequest{TypeUrl: typ, ResourceNames: c.names[typ]})
	}
}

// next returns the next response, failing the test if none arrives.
func (c *sotwClient) next() *discoverygrpc.DiscoveryResponse {
	c.t.Helper()
	select {
	case r, ok := <-c.in:
		if !ok {
			c.t.Fatalf("ADS stream ended: %v", c.err)
		}
		return r
	case <-time.After(testTimeout):
		c.t.Fatalf("no xDS response within %v", testTimeout)
	}
	return nil
}

// streamErr waits for the stream to end and returns its error.
func (c *sotwClient) streamErr() error {
	c.t.Helper()
	for {
		select {
		case _, ok := <-c.in:
			if !ok {
				return c.err
			}
		case <-time.After(testTimeout):
			c.t.Fatalf("the ADS stream did not end within %v", testTimeout)
		}
	}
}

func (c *sotwClient) ack(r *discoverygrpc.DiscoveryResponse) {
	c.t.Helper()
	c.send(&discoverygrpc.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: c.names[r.GetTypeUrl()]})
}

// nack rejects r, keeping version kept, as Envoy does.
func (c *sotwClient) nack(r *discoverygrpc.DiscoveryResponse, kept, msg string) {
	c.t.Helper()
	c.send(&discoverygrpc.DiscoveryRequest{
		TypeUrl: r.GetTypeUrl(), VersionInfo: kept, ResponseNonce: r.GetNonce(), ResourceNames: c.names[r.GetTypeUrl()],
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: msg},
	})
}

// syncAll subscribes to types (default: all) and ACKs responses until the
// client holds the versions want (by type URL); it returns the last
// response of each type.
func (c *sotwClient) syncAll(want map[string]string, types ...string) map[string]*discoverygrpc.DiscoveryResponse {
	c.t.Helper()
	if len(types) == 0 {
		types = typeOrder
	}
	c.subscribe(types...)
	got := map[string]*discoverygrpc.DiscoveryResponse{}
	for !versionsAre(got, want) {
		r := c.next()
		got[r.GetTypeUrl()] = r
		c.ack(r)
	}
	return got
}

func versionsAre(got map[string]*discoverygrpc.DiscoveryResponse, want map[string]string) bool {
	for typ, v := range want {
		if got[typ].GetVersionInfo() != v {
			return false
		}
	}
	return true
}

// envoyNode is an Envoy's node.
func envoyNode(id, cluster string) *corev3.Node {
	return &corev3.Node{Id: id, Cluster: cluster, UserAgentName: "envoy"}
}

// serverPolicy has one EDS provider, pool, whose idle timeout is in the
// routes and connect timeout in the clusters, then any extra providers
// (YAML flow mappings).
func serverPolicy(idle, connect string, extra ...string) string {
	var more strings.Builder
	for _, p := range extra {
		more.WriteString("  - " + p + "\n")
	}
	return fmt.Sprintf(`
listen: {grpc: "127.0.0.1:9001", envoy: "127.0.0.1:10000"}
providers:
  - {name: pool, kind: openai-compatible, base_url: "http://pool.test:8000", endpoints: ["10.0.0.1:8000"], idle_timeout: %s, connect_timeout: %s}
%smodels:
  - {name: llama, provider: pool}
xds:
  access_log: "off"
  node_groups:
    - {name: eu, cluster: "eu-*", envoy: "127.0.0.1:10443", sluice_addresses: ["sluice-eu.internal:9001"]}
`, idle, connect, more.String())
}

// checkLeaks fails the test if it leaves goroutines behind. It runs after
// every other cleanup of the test.
func checkLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// barrier proves that nothing was sent to c since its last response: it
// serves a config that changes the routes only and checks that the very
// next response is those routes. Responses to one stream are queued in
// order, so anything pushed earlier would come first.
func barrier(t *testing.T, ts *testXDS, c *sotwClient, yaml string) {
	t.Helper()
	ts.update(t, yaml)
	want := ts.served(t, FlavourEnvoy)[resourcev3.RouteType]
	r := c.next()
	if r.GetTypeUrl() != resourcev3.RouteType || r.GetVersionInfo() != want {
		t.Fatalf("after the barrier the next response is %s version %s, want rds %s: something was pushed before it", ShortType(r.GetTypeUrl()), r.GetVersionInfo(), want)
	}
	c.ack(r)
}

func TestUpdateUnchangedPushesNothing(t *testing.T) {
	checkLeaks(t)
	ts := startXDS(t)
	ts.update(t, serverPolicy("1m", "1s"))
	version := ts.Version()
	c := newSotwClient(t, dial(t, ts.addr), envoyNode("envoy-1", ""), envoyNames("pool"))
	want := ts.served(t, FlavourEnvoy)
	c.syncAll(want)
	ts.waitNode(t, "envoy-1", "ACK every type", func(n NodeStatus) bool { return ackedAll(n, want) })
	before := ts.wire.responses("envoy-1", "")

	// The same config, compiled again; and one whose differences (prices,
	// teams) are none of Envoy's business.
	for _, yaml := range []string{
		serverPolicy("1m", "1s"),
		serverPolicy("1m", "1s") + "pricing: {llama: {input: 1, output: 2}}\nteams: [{name: t}]\n",
	} {
		changed, err := ts.Update(compile(t, yaml))
		if err != nil || changed {
			t.Fatalf("Update(unchanged) = %v, %v; want false, nil", changed, err)
		}
		if ts.Version() != version {
			t.Fatalf("version %s → %s for an unchanged config", version, ts.Version())
		}
	}
	if n := ts.wire.responses("envoy-1", ""); n != before {
		t.Errorf("%d responses sent for unchanged configs", n-before)
	}
	if got := metricValue(t, ts.m.updates); got != 1 {
		t.Errorf("sluice_xds_updates_total = %v, want 1", got)
	}
	barrier(t, ts, c, serverPolicy("2m", "1s"))
}

func TestUpdateRefusesInvalidResources(t *testing.T) {
	checkLeaks(t)
	ts := startXDS(t)
	ts.update(t, serverPolicy("1m", "1s"))
	version, served := ts.Version(), ts.served(t, FlavourEnvoy)
	c := newSotwClient(t, dial(t, ts.addr), envoyNode("envoy-1", ""), envoyNames("pool"))
	c.syncAll(served)

	// The policy checks keep every config this test could write valid,
	// so the builder is made to produce what Envoy would refuse: a
	// negative connect timeout.
	ts.Server.build = func(p *policies.Snapshot, g Group, f Flavour, fs Features) (*Resources, error) {
		r, err := BuildFor(p, g, f, fs)
		if err == nil {
			r.Clusters[0].ConnectTimeout = durationpb.New(-time.Second)
		}
		return r, err
	}
	changed, err := ts.Update(compile(t, serverPolicy("1m", "2s")))
	ts.Server.build = BuildFor
	if err == nil || changed || !strings.Contains(err.Error(), "ConnectTimeout") {
		t.Fatalf("Update(invalid) = %v, %v; want false and a ConnectTimeout error", changed, err)
	}
	if ts.Version() != version {
		t.Errorf("version %s → %s after a refused config", version, ts.Version())
	}
	if got := ts.served(t, FlavourEnvoy); fmt.Sprint(got) != fmt.Sprint(served) {
		t.Errorf("served %v → %v after a refused config", served, got)
	}
	if got := metricValue(t, ts.m.snapshotErrors); got != 1 {
		t.Errorf("sluice_xds_snapshot_errors_total = %v, want 1", got)
	}
	if !strings.Contains(ts.logs.String(), "invalid xDS snapshot not served") {
		t.Errorf("the refusal was not logged; logs:\n%s", ts.logs)
	}
	// Nothing reached the client: the next response is the barrier's.
	barrier(t, ts, c, serverPolicy("2m", "1s"))
}

func TestNodeGroups(t *testing.T) {
	checkLeaks(t)
	ts := startXDS(t)
	ts.update(t, serverPolicy("1m", "1s"))
	cc := dial(t, ts.addr)
	tests := []struct {
		node, cluster, group string
		port                 uint32
		sluiceType           clusterv3.Cluster_DiscoveryType
	}{
		{"envoy-eu", "eu-1", "eu", 10443, clusterv3.Cluster_STRICT_DNS},
		{"envoy-us", "us-1", "", 10000, clusterv3.Cluster_STATIC},
		{"envoy-none", "", "", 10000, clusterv3.Cluster_STATIC},
	}
	for _, tt := range tests {
		t.Run(tt.node, func(t *testing.T) {
			c := newSotwClient(t, cc, envoyNode(tt.node, tt.cluster), envoyNames("pool"))
			c.subscribe(resourcev3.ClusterType, resourcev3.ListenerType)
			var l *listenerv3.Listener
			var sluice *clusterv3.Cluster
			for l == nil || sluice == nil {
				r := c.next()
				c.ack(r)
				for _, a := range r.GetResources() {
					switch r.GetTypeUrl() {
					case resourcev3.ListenerType:
						l = &listenerv3.Listener{}
						if err := a.UnmarshalTo(l); err != nil {
							t.Fatal(err)
						}
					case resourcev3.ClusterType:
						cl := &clusterv3.Cluster{}
						if err := a.UnmarshalTo(cl); err != nil {
							t.Fatal(err)
						}
						if cl.GetName() == SluiceCluster {
							sluice = cl
						}
					}
				}
			}
			if got := l.GetAddress().GetSocketAddress().GetPortValue(); got != tt.port {
				t.Errorf("listener port %d, want %d", got, tt.port)
			}
			if sluice.GetType() != tt.sluiceType {
				t.Errorf("Sluice cluster type %v, want %v", sluice.GetType(), tt.sluiceType)
			}
			n := ts.waitNode(t, tt.node, "connect", func(NodeStatus) bool { return true })
			if n.Group != tt.group || n.Flavour != FlavourEnvoy {
				t.Errorf("node group %q flavour %v, want %q envoy", n.Group, n.Flavour, tt.group)
			}
		})
	}
}

func TestRequestWithoutNodeIDRefused(t *testing.T) {
	checkLeaks(t)
	ts := startXDS(t)
	ts.update(t, serverPolicy("1m", "1s"))
	cc := dial(t, ts.addr)
	check := func(t *testing.T, err error) {
		t.Helper()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "node.id") {
			t.Errorf("stream ended with %v, want InvalidArgument naming node.id", err)
		}
		if n := len(ts.Nodes()); n != 0 {
			t.Errorf("%d nodes registered", n)
		}
	}
	t.Run("sotw no node", func(t *testing.T) {
		c := newSotwClient(t, cc, nil, nil)
		c.first = true
		c.subscribe(resourcev3.ClusterType)
		check(t, c.streamErr())
	})
	t.Run("sotw empty id", func(t *testing.T) {
		c := newSotwClient(t, cc, &corev3.Node{Cluster: "eu-1", UserAgentName: "envoy"}, nil)
		c.subscribe(resourcev3.ClusterType)
		check(t, c.streamErr())
	})
	t.Run("delta no node", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType}); err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		check(t, err)
	})
}

// TestSotwNACKPinsNode drives the NACK path with a raw client, including a
// NACK of the very first response (nothing accepted yet). The listener
// subscription is held back and used as a barrier: its response is queued
// behind anything the NACK caused.
func TestSotwNACKPinsNode(t *testing.T) {
	checkLeaks(t)
	ts := startXDS(t)
	ts.update(t, serverPolicy("1m", "1s"))
	c := newSotwClient(t, dial(t, ts.addr), envoyNode("envoy-1", ""), envoyNames("pool"))
	v1 := ts.served(t, FlavourEnvoy)
	delete(v1, resourcev3.ListenerType)
	c.syncAll(v1, resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.RouteType)
	ts.waitNode(t, "envoy-1", "ACK v1", func(n NodeStatus) bool { return ackedAll(n, v1) })

	// A CDS change, rejected.
	ts.update(t, serverPolicy("1m", "2s"))
	v2 := ts.served(t, FlavourEnvoy)
	r := c.next()
	if r.GetTypeUrl() != resourcev3.ClusterType || r.GetVersionInfo() != v2[resourcev3.ClusterType] {
		t.Fatalf("got %s %s, want cds %s", ShortType(r.GetTypeUrl()), r.GetVersionInfo(), v2[resourcev3.ClusterType])
	}
	c.nack(r, v1[resourcev3.ClusterType], "connect_timeout: not today")
	c.subscribe(resourcev3.ListenerType)
	if r := c.next(); r.GetTypeUrl() != resourcev3.ListenerType {
		t.Fatalf("after the NACK the next response is %s %s, want lds: the rejected version was resent", ShortType(r.GetTypeUrl()), r.GetVersionInfo())
	} else {
		c.ack(r)
	}
	n := ts.waitNode(t, "envoy-1", "NACK seen", func(n NodeStatus) bool { return n.Pinned })
	if n.Nacked["cds"] != v2[resourcev3.ClusterType] || n.Acked["cds"] != v1[resourcev3.ClusterType] || n.LastError != "connect_timeout: not today" {
		t.Errorf("after the NACK: %+v", n)
	}
	if got := metricValue(t, ts.m.nacks.WithLabelValues("cds")); got != 1 {
		t.Errorf("sluice_xds_nacks_total{type=cds} = %v, want 1", got)
	}
	if !strings.Contains(ts.logs.String(), "xDS NACK") {
		t.Errorf("NACK not logged; logs:\n%s", ts.logs)
	}
	if got := ts.wire.responses("envoy-1", resourcev3.ClusterType); got != 2 {
		t.Errorf("%d CDS responses, want 2 (v1 and the rejected v2)", got)
	}

	// A change elsewhere (routes only) leaves the rejected clusters
	// current: the node stays pinned and gets the routes, not the
	// rejected clusters again.
	ts.update(t, serverPolicy("2m", "2s"))
	if v := ts.served(t, FlavourEnvoy); v[resourcev3.ClusterType] != v2[resourcev3.ClusterType] || v[resourcev3.RouteType] == v2[resourcev3.RouteType] {
		t.Fatalf("the idle-timeout change must change routes only: %v → %v", v2, v)
	}
	if r := c.next(); r.GetTypeUrl() != resourcev3.RouteType {
		t.Fatalf("after an unrelated change got %s %s, want rds only", ShortType(r.GetTypeUrl()), r.GetVersionInfo())
	} else {
		c.ack(r)
	}
	if n := ts.waitNode(t, "envoy-1", "still pinned", func(n NodeStatus) bool { return n.Acked["rds"] != v2[resourcev3.RouteType] }); !n.Pinned {
		t.Errorf("an unrelated change unpinned the node: %+v", n)
	}
	if got := ts.wire.responses("envoy-1", resourcev3.ClusterType); got != 2 {
		t.Errorf("%d CDS responses after an unrelated change, want still 2", got)
	}

	// A change of the rejected type unpins: the node gets the new clusters.
	ts.update(t, serverPolicy("2m", "3s"))
	v3 := ts.served(t, FlavourEnvoy)
	r = c.next()
	if r.GetTypeUrl() != resourcev3.ClusterType || r.GetVersionInfo() != v3[resourcev3.ClusterType] {
		t.Fatalf("after the fix got %s %s, want cds %s", ShortType(r.GetTypeUrl()), r.GetVersionInfo(), v3[resourcev3.ClusterType])
	}
	c.ack(r)
	n = ts.waitNode(t, "envoy-1", "ACK v3", func(n NodeStatus) bool { return ackedAll(n, v3) })
	if n.Pinned {
		t.Errorf("still pinned after a new config: %+v", n)
	}

	// A new node that rejects its very first clusters: nothing to roll
	// back to, and nothing is resent.
	c2 := newSotwClient(t, dial(t, ts.addr), envoyNode("envoy-2", ""), envoyNames("pool"))
	c2.subscribe(resourcev3.ClusterType)
	r = c2.next()
	c2.nack(r, "", "no")
	c2.subscribe(resourcev3.ListenerType)
	if r := c2.next(); r.GetTypeUrl() != resourcev3.ListenerType {
		t.Errorf("after a first-response NACK the next response is %s, want lds (no CDS resend)", ShortType(r.GetTypeUrl()))
	}
	n = ts.waitNode(t, "envoy-2", "pinned", func(n NodeStatus) bool { return n.Pinned })
	if n.Acked["cds"] != "" || n.Nacked["cds"] != v3[resourcev3.ClusterType] {
		t.Errorf("envoy-2 after a first-response NACK: %+v", n)
	}
	if got := ts.wire.responses("envoy-2", resourcev3.ClusterType); got != 1 {
		t.Errorf("envoy-2: %d CDS responses, want 1", got)
	}
}
