package envoytest

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// The emulator against go-control-plane's own state-of-the-world server
// and SnapshotCache, over real gRPC on 127.0.0.1:0. (pkg/server/v3 wraps
// the same sotw server but also links the rate limit service, whose module
// this repository does not require; the ADS handler below is the one
// line of it that ADS needs.)

const adsNode = "emulator-1"

// controlPlane is a go-control-plane ADS server recording what the
// emulator sends.
type controlPlane struct {
	addr  string
	cache cachev3.SnapshotCache

	mu        sync.Mutex
	requests  []seenRequest
	responses map[string]*discoveryv3.DiscoveryResponse // by nonce
	nacks     chan *discoveryv3.DiscoveryRequest        // the first NACK not yet taken
	changed   chan struct{}                             // closed and replaced on every request

	breakNext atomic.Bool // end the stream on the next request
}

type seenRequest struct {
	stream int64
	req    *discoveryv3.DiscoveryRequest
}

// adsHandler is what pkg/server/v3 does for ADS: the sotw server, with
// the type URL left to each request.
type adsHandler struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	sotw sotw.Server
}

func (h adsHandler) StreamAggregatedResources(st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return h.sotw.StreamHandler(st, resourcev3.AnyType)
}

var _ sotw.Callbacks = (*controlPlane)(nil)

func (cp *controlPlane) OnStreamOpen(context.Context, int64, string) error { return nil }
func (cp *controlPlane) OnStreamClosed(int64, *corev3.Node)                {}

// OnStreamRequest records a request; a NACK is a request with
// error_detail (envoy-protocol.md §5).
func (cp *controlPlane) OnStreamRequest(id int64, r *discoveryv3.DiscoveryRequest) error {
	r = proto.Clone(r).(*discoveryv3.DiscoveryRequest)
	cp.mu.Lock()
	cp.requests = append(cp.requests, seenRequest{id, r})
	close(cp.changed)
	cp.changed = make(chan struct{})
	cp.mu.Unlock()
	if r.GetErrorDetail() != nil {
		select {
		case cp.nacks <- r:
		default:
		}
	}
	if cp.breakNext.CompareAndSwap(true, false) {
		return errors.New("test: the control plane ends the stream")
	}
	return nil
}

func (cp *controlPlane) OnStreamResponse(_ context.Context, _ int64, _ *discoveryv3.DiscoveryRequest, r *discoveryv3.DiscoveryResponse) {
	cp.mu.Lock()
	cp.responses[r.GetNonce()] = proto.Clone(r).(*discoveryv3.DiscoveryResponse)
	cp.mu.Unlock()
}

func startControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cp := &controlPlane{
		cache:     cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil),
		responses: map[string]*discoveryv3.DiscoveryResponse{},
		nacks:     make(chan *discoveryv3.DiscoveryRequest, 1),
		changed:   make(chan struct{}),
	}
	srv := sotw.NewServer(ctx, cp.cache, cp)
	cp.addr = startGRPC(t, func(s *grpc.Server) {
		discoveryv3.RegisterAggregatedDiscoveryServiceServer(s, adsHandler{sotw: srv})
	})
	return cp
}

// snap is a snapshot with a version per type.
type snap struct {
	v                                      XDSVersions
	clusters, endpoints, listeners, routes []types.Resource
}

func all(v string) XDSVersions {
	return XDSVersions{Clusters: v, Endpoints: v, Listeners: v, Routes: v}
}

func (cp *controlPlane) set(t *testing.T, s snap) {
	t.Helper()
	out := &cachev3.Snapshot{}
	for _, r := range []struct {
		url   string
		v     string
		items []types.Resource
	}{
		{resourcev3.ClusterType, s.v.Clusters, s.clusters},
		{resourcev3.EndpointType, s.v.Endpoints, s.endpoints},
		{resourcev3.ListenerType, s.v.Listeners, s.listeners},
		{resourcev3.RouteType, s.v.Routes, s.routes},
	} {
		out.Resources[cachev3.GetResponseType(r.url)] = cachev3.NewResources(r.v, r.items)
	}
	if err := cp.cache.SetSnapshot(context.Background(), adsNode, out); err != nil {
		t.Fatal(err)
	}
}

// seen returns the requests so far.
func (cp *controlPlane) seen() []seenRequest {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]seenRequest(nil), cp.requests...)
}

// waitRequests waits until cond holds for the requests seen.
func (cp *controlPlane) waitRequests(t *testing.T, what string, cond func([]seenRequest) bool) []seenRequest {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		cp.mu.Lock()
		rs, ch := append([]seenRequest(nil), cp.requests...), cp.changed
		cp.mu.Unlock()
		if cond(rs) {
			return rs
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("timed out waiting for %s; requests: %v", what, rs)
		}
	}
}

func (cp *controlPlane) response(nonce string) *discoveryv3.DiscoveryResponse {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.responses[nonce]
}

// adsEmulator is an emulator configured over ADS from cp, running until
// the test ends.
type adsEmulator struct {
	*Emulator
	ctx    context.Context
	cancel context.CancelFunc
	client *http.Client
	url    string
}

// startADS creates the emulator and runs its ADS client; serve starts the
// data plane.
func startADS(t *testing.T, cp *controlPlane) *adsEmulator {
	t.Helper()
	b, err := ADSBootstrap(cp.addr, adsNode, "sluice-test")
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(b, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- e.Run(ctx) }()
	tr := &http.Transport{}
	t.Cleanup(func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
		tr.CloseIdleConnections()
	})
	return &adsEmulator{Emulator: e, ctx: ctx, cancel: cancel, client: &http.Client{Transport: tr}}
}

// serve listens (waiting for a complete configuration) and serves.
func (a *adsEmulator) serve(t *testing.T) {
	t.Helper()
	lctx, cancel := context.WithTimeout(a.ctx, 10*time.Second)
	defer cancel()
	ln, err := a.Listen(lctx)
	if err != nil {
		t.Fatal(err)
	}
	a.serveOn(t, ln)
}

func (a *adsEmulator) serveOn(t *testing.T, ln net.Listener) {
	done := make(chan error, 1)
	go func() { done <- a.Serve(a.ctx, ln) }()
	t.Cleanup(func() {
		a.cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	a.url = "http://" + ln.Addr().String()
}

func (a *adsEmulator) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := a.client.Get(a.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// wantGet checks that GET path answers 200 with body.
func (a *adsEmulator) wantGet(t *testing.T, path, body string) {
	t.Helper()
	if status, got := a.get(t, path); status != 200 || got != body {
		t.Errorf("GET %s = %d %q, want 200 %q", path, status, got, body)
	}
}

// waitStatus waits until cond holds for the emulator's ADS status.
func (a *adsEmulator) waitStatus(t *testing.T, what string, cond func(XDSStatus) bool) XDSStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(a.ctx, 10*time.Second)
	defer cancel()
	s, err := a.WaitXDS(ctx, cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v (status %+v)", what, err, s)
	}
	return s
}

// backend answers every request with body.
func backend(t *testing.T, body string) string {
	return startHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// routes is a route table named name: path prefixes to clusters, in order.
func routes(name string, prefixToCluster ...string) *routev3.RouteConfiguration {
	vh := &routev3.VirtualHost{Name: "all", Domains: []string{"*"}}
	for i := 0; i < len(prefixToCluster); i += 2 {
		vh.Routes = append(vh.Routes, &routev3.Route{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefixToCluster[i]}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: prefixToCluster[i+1]}}},
		})
	}
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{vh}}
}

func byType(rs []seenRequest, url string) []seenRequest {
	var out []seenRequest
	for _, r := range rs {
		if r.req.GetTypeUrl() == url {
			out = append(out, r)
		}
	}
	return out
}

func indexOf(rs []seenRequest, url string) int {
	for i, r := range rs {
		if r.req.GetTypeUrl() == url {
			return i
		}
	}
	return -1
}

// TestADS: the emulator subscribes like Envoy, serves real traffic through
// what it received, applies a change, NACKs what it cannot use and keeps
// the previous configuration in force.
func TestADS(t *testing.T) {
	opts := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opts) })
	one, two := backend(t, "one"), backend(t, "two")
	cp := startControlPlane(t)

	backendCluster := must[*clusterv3.Cluster](t)(EDSCluster("backend", false))
	listener := must[*listenerv3.Listener](t)(RDSListener("ingress", "routes"))
	// A gRPC-style listener: Envoy refuses api_listeners over LDS, and so
	// does the emulator, without rejecting the update.
	apiListener := &listenerv3.Listener{Name: "grpc-client", ApiListener: &listenerv3.ApiListener{
		ApiListener: listener.GetFilterChains()[0].GetFilters()[0].GetTypedConfig(),
	}}
	cp.set(t, snap{v: all("1"),
		clusters:  []types.Resource{backendCluster},
		endpoints: []types.Resource{must[*endpointv3.ClusterLoadAssignment](t)(Endpoints("backend", one))},
		listeners: []types.Resource{apiListener, listener},
		routes:    []types.Resource{routes("routes", "/", "backend")},
	})
	e := startADS(t, cp)
	e.serve(t)
	e.wantGet(t, "/", "one")
	if s := e.XDSStatus(); s.Accepted != all("1") || s.Active != all("1") || s.Rejected != 0 {
		t.Errorf("status %+v, want everything at version 1", s)
	}

	t.Run("subscription", func(t *testing.T) {
		rs := cp.waitRequests(t, "the RDS ACK", func(rs []seenRequest) bool {
			for _, r := range byType(rs, resourcev3.RouteType) {
				if r.req.GetVersionInfo() == "1" {
					return true
				}
			}
			return false
		})
		first := rs[0].req
		if first.GetTypeUrl() != resourcev3.ClusterType || first.GetVersionInfo() != "" || first.GetResponseNonce() != "" {
			t.Errorf("first request %v, want a CDS subscription", first)
		}
		if n := first.GetNode(); n.GetId() != adsNode || n.GetCluster() != "sluice-test" || n.GetUserAgentName() != "envoy" {
			t.Errorf("node %v, want id, cluster and user_agent_name envoy", n)
		}
		// CDS, then EDS for its clusters; LDS once clusters are initialized;
		// then RDS for the listener's route configuration.
		cds, eds, lds, rds := indexOf(rs, resourcev3.ClusterType), indexOf(rs, resourcev3.EndpointType), indexOf(rs, resourcev3.ListenerType), indexOf(rs, resourcev3.RouteType)
		if !(cds < eds && eds < lds && lds < rds) {
			t.Errorf("subscription order CDS %d EDS %d LDS %d RDS %d, want CDS < EDS < LDS < RDS", cds, eds, lds, rds)
		}
		if got := rs[eds].req.GetResourceNames(); len(got) != 1 || got[0] != "backend" {
			t.Errorf("EDS names %v, want [backend]", got)
		}
		if got := rs[rds].req.GetResourceNames(); len(got) != 1 || got[0] != "routes" {
			t.Errorf("RDS names %v, want [routes]", got)
		}
		// Every ACK carries the version and nonce of the response it ACKs.
		for _, r := range rs {
			q := r.req
			if q.GetResponseNonce() == "" {
				continue
			}
			resp := cp.response(q.GetResponseNonce())
			if resp == nil || resp.GetTypeUrl() != q.GetTypeUrl() || q.GetVersionInfo() != resp.GetVersionInfo() || q.GetErrorDetail() != nil {
				t.Errorf("request %v does not ACK response %v", q, resp)
			}
		}
		for _, r := range byType(rs, resourcev3.ListenerType) {
			if len(r.req.GetResourceNames()) != 0 {
				t.Errorf("LDS request %v: want a wildcard subscription", r.req)
			}
		}
	})

	t.Run("update", func(t *testing.T) {
		cp.set(t, snap{v: all("2"),
			clusters:  []types.Resource{backendCluster, testCluster(t, "backend2", two, false)},
			endpoints: []types.Resource{must[*endpointv3.ClusterLoadAssignment](t)(Endpoints("backend", one))},
			listeners: []types.Resource{listener},
			routes:    []types.Resource{routes("routes", "/two", "backend2", "/", "backend")},
		})
		e.waitStatus(t, "version 2 in force", func(s XDSStatus) bool { return s.Active == all("2") })
		e.wantGet(t, "/two", "two")
		e.wantGet(t, "/", "one")
	})

	t.Run("nack", func(t *testing.T) {
		// A listener whose connection manager runs a filter the emulator
		// does not implement.
		cors, err := HTTPFilter("envoy.filters.http.cors", &corsv3.Cors{})
		if err != nil {
			t.Fatal(err)
		}
		bad := must[*listenerv3.Listener](t)(RDSListener("ingress", "routes", cors))
		good := snap{v: all("2"),
			clusters:  []types.Resource{backendCluster, testCluster(t, "backend2", two, false)},
			endpoints: []types.Resource{must[*endpointv3.ClusterLoadAssignment](t)(Endpoints("backend", one))},
			listeners: []types.Resource{listener},
			routes:    []types.Resource{routes("routes", "/two", "backend2", "/", "backend")},
		}
		next := good
		next.v.Listeners = "3"
		next.listeners = []types.Resource{bad}
		cp.set(t, next)
		var nack *discoveryv3.DiscoveryRequest
		select {
		case nack = <-cp.nacks:
		case <-time.After(10 * time.Second):
			t.Fatal("no NACK")
		}
		// The SnapshotCache resends a rejected version at once
		// (envoy-protocol.md §5, NACK storm): roll back to what was ACKed.
		cp.set(t, good)
		rejected := cp.response(nack.GetResponseNonce())
		if nack.GetTypeUrl() != resourcev3.ListenerType || rejected.GetTypeUrl() != resourcev3.ListenerType || rejected.GetVersionInfo() != "3" {
			t.Errorf("NACK %v of response %v, want the LDS version 3 rejected", nack, rejected)
		}
		if nack.GetVersionInfo() != "2" {
			t.Errorf("NACK version_info %q, want the last accepted, 2", nack.GetVersionInfo())
		}
		if d := nack.GetErrorDetail(); codes.Code(d.GetCode()) != codes.Internal || !strings.Contains(d.GetMessage(), "envoy.extensions.filters.http.cors.v3.Cors") {
			t.Errorf("error_detail %v, want INTERNAL naming the filter type", d)
		}
		s := e.XDSStatus()
		if s.Rejected == 0 || s.Accepted.Listeners != "2" || s.Active.Listeners != "2" {
			t.Errorf("status %+v, want a rejection and listeners at 2", s)
		}
		e.wantGet(t, "/two", "two")
	})
}

// TestADSWarming: a configuration is put in force only when it is
// complete — a listener waits for its route configuration.
func TestADSWarming(t *testing.T) {
	opts := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opts) })
	one, two := backend(t, "one"), backend(t, "two")
	cp := startControlPlane(t)
	clusters := []types.Resource{must[*clusterv3.Cluster](t)(EDSCluster("backend", false)), testCluster(t, "backend2", two, false)}
	endpoints := []types.Resource{must[*endpointv3.ClusterLoadAssignment](t)(Endpoints("backend", one))}
	listener := must[*listenerv3.Listener](t)(RDSListener("ingress", "routes"))

	// The listener arrives; its route configuration does not.
	cp.set(t, snap{v: all("1"), clusters: clusters, endpoints: endpoints, listeners: []types.Resource{listener}, routes: []types.Resource{}})
	e := startADS(t, cp)
	listened := make(chan net.Listener, 1)
	go func() {
		ln, err := e.Listen(e.ctx)
		if err != nil {
			return
		}
		listened <- ln
	}()
	e.waitStatus(t, "listeners and routes at 1", func(s XDSStatus) bool { return s.Accepted.Listeners == "1" && s.Accepted.Routes == "1" })
	select {
	case <-listened:
		t.Fatal("Listen returned with no route configuration")
	default:
	}
	if s := e.XDSStatus(); s.Active != (XDSVersions{}) || e.ListenAddr() != "" {
		t.Fatalf("status %+v, address %q: nothing may be in force", s, e.ListenAddr())
	}

	cp.set(t, snap{v: all("2"), clusters: clusters, endpoints: endpoints, listeners: []types.Resource{listener}, routes: []types.Resource{routes("routes", "/", "backend")}})
	var ln net.Listener
	select {
	case ln = <-listened:
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not return once the route configuration arrived")
	}
	e.serveOn(t, ln)
	e.wantGet(t, "/", "one")

	// A new version of the listener names a route configuration that has
	// not arrived: the listener in force keeps serving.
	moved := must[*listenerv3.Listener](t)(RDSListener("ingress", "routes-b"))
	cp.set(t, snap{v: all("3"), clusters: clusters, endpoints: endpoints, listeners: []types.Resource{moved}, routes: []types.Resource{routes("routes", "/", "backend")}})
	s := e.waitStatus(t, "listeners and routes at 3", func(s XDSStatus) bool { return s.Accepted.Listeners == "3" && s.Accepted.Routes == "3" })
	if s.Active.Listeners != "2" || s.Active.Routes != "3" {
		t.Errorf("status %+v: the new listener warms, the one in force takes the new routes", s)
	}
	e.wantGet(t, "/", "one")

	cp.set(t, snap{v: all("4"), clusters: clusters, endpoints: endpoints, listeners: []types.Resource{moved}, routes: []types.Resource{routes("routes-b", "/", "backend2")}})
	e.waitStatus(t, "version 4 in force", func(s XDSStatus) bool { return s.Active == all("4") })
	e.wantGet(t, "/", "two")
	// The route configuration of the listener replaced is no longer
	// subscribed to.
	cp.waitRequests(t, "RDS for routes-b only", func(rs []seenRequest) bool {
		rds := byType(rs, resourcev3.RouteType)
		names := rds[len(rds)-1].req.GetResourceNames()
		return len(names) == 1 && names[0] == "routes-b"
	})
}

// TestADSHoldsCDSAckWhileClustersWarm: after initialization, Envoy keeps
// CDS paused while a new cluster waits for its endpoints, so that the CDS
// ACK tells the server the clusters are warm.
func TestADSHoldsCDSAckWhileClustersWarm(t *testing.T) {
	opts := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opts) })
	one, two := backend(t, "one"), backend(t, "two")
	cp := startControlPlane(t)
	backendCluster := must[*clusterv3.Cluster](t)(EDSCluster("backend", false))
	lateCluster := must[*clusterv3.Cluster](t)(EDSCluster("late", false))
	listener := must[*listenerv3.Listener](t)(RDSListener("ingress", "routes"))
	oneLA := must[*endpointv3.ClusterLoadAssignment](t)(Endpoints("backend", one))
	cp.set(t, snap{v: all("1"), clusters: []types.Resource{backendCluster}, endpoints: []types.Resource{oneLA},
		listeners: []types.Resource{listener}, routes: []types.Resource{routes("routes", "/", "backend")}})
	e := startADS(t, cp)
	e.serve(t)

	// Version 2 adds a cluster, and a route to it, but not its endpoints.
	v2 := snap{v: all("2"), clusters: []types.Resource{backendCluster, lateCluster}, endpoints: []types.Resource{oneLA},
		listeners: []types.Resource{listener}, routes: []types.Resource{routes("routes", "/late", "late", "/", "backend")}}
	cp.set(t, v2)
	s := e.waitStatus(t, "version 2 accepted", func(s XDSStatus) bool { return s.Accepted == all("2") })
	if s.Active.Routes == "2" {
		t.Errorf("status %+v: a route to a warming cluster must not be in force", s)
	}
	for _, r := range byType(cp.seen(), resourcev3.ClusterType) {
		if r.req.GetVersionInfo() == "2" {
			t.Errorf("CDS ACK %v sent while cluster late warms", r.req)
		}
	}
	e.wantGet(t, "/late", "one") // the routes in force send /late to backend

	v3 := v2
	v3.v = all("3")
	v3.endpoints = []types.Resource{oneLA, must[*endpointv3.ClusterLoadAssignment](t)(Endpoints("late", two))}
	cp.set(t, v3)
	e.waitStatus(t, "version 3 in force", func(s XDSStatus) bool { return s.Active == all("3") })
	e.wantGet(t, "/late", "two")
	cp.waitRequests(t, "the CDS ACK", func(rs []seenRequest) bool {
		for _, r := range byType(rs, resourcev3.ClusterType) {
			if r.req.GetVersionInfo() == "3" {
				return true
			}
		}
		return false
	})
}

// TestADSReconnect: when the stream breaks the emulator reconnects and
// subscribes again, in the same order, with the versions it accepted.
func TestADSReconnect(t *testing.T) {
	opts := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opts) })
	one, two := backend(t, "one"), backend(t, "two")
	cp := startControlPlane(t)
	clusters := []types.Resource{must[*clusterv3.Cluster](t)(EDSCluster("backend", false)), testCluster(t, "backend2", two, false)}
	endpoints := []types.Resource{must[*endpointv3.ClusterLoadAssignment](t)(Endpoints("backend", one))}
	listeners := []types.Resource{must[*listenerv3.Listener](t)(RDSListener("ingress", "routes"))}
	cp.set(t, snap{v: all("1"), clusters: clusters, endpoints: endpoints, listeners: listeners, routes: []types.Resource{routes("routes", "/", "backend")}})
	e := startADS(t, cp)
	e.serve(t)
	e.waitStatus(t, "version 1", func(s XDSStatus) bool { return s.Active == all("1") })
	cp.waitRequests(t, "the RDS ACK", func(rs []seenRequest) bool {
		rds := byType(rs, resourcev3.RouteType)
		return len(rds) > 0 && rds[len(rds)-1].req.GetVersionInfo() == "1"
	})

	// Only the routes change; the server ends the stream on their ACK.
	cp.breakNext.Store(true)
	v := all("1")
	v.Routes = "2"
	cp.set(t, snap{v: v, clusters: clusters, endpoints: endpoints, listeners: listeners, routes: []types.Resource{routes("routes", "/", "backend2")}})
	rs := cp.waitRequests(t, "a second stream's four subscriptions", func(rs []seenRequest) bool {
		n := 0
		for _, r := range rs {
			if r.stream != rs[0].stream {
				n++
			}
		}
		return n >= 4
	})
	var again []*discoveryv3.DiscoveryRequest
	for _, r := range rs {
		if r.stream != rs[0].stream {
			again = append(again, r.req)
		}
	}
	want := []struct{ url, version string }{
		{resourcev3.ClusterType, "1"}, {resourcev3.EndpointType, "1"}, {resourcev3.ListenerType, "1"}, {resourcev3.RouteType, "2"},
	}
	for i, w := range want {
		q := again[i]
		if q.GetTypeUrl() != w.url || q.GetVersionInfo() != w.version || q.GetResponseNonce() != "" {
			t.Errorf("request %d on the new stream: %v, want %s at version %q without a nonce", i, q, w.url, w.version)
		}
	}
	if again[0].GetNode().GetId() != adsNode {
		t.Errorf("first request on the new stream has node %v", again[0].GetNode())
	}
	e.wantGet(t, "/", "two")

	// The new stream carries updates.
	cp.set(t, snap{v: all("3"), clusters: clusters, endpoints: endpoints, listeners: listeners, routes: []types.Resource{routes("routes", "/", "backend")}})
	e.waitStatus(t, "version 3 in force", func(s XDSStatus) bool { return s.Active == all("3") })
	e.wantGet(t, "/", "one")
}

// TestADSBootstrapRefused: what the emulator cannot subscribe with is
// refused by New, naming the field.
func TestADSBootstrapRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(b *bootstrapv3.Bootstrap)
		want   string
	}{
		{"no node", func(b *bootstrapv3.Bootstrap) { b.Node = nil }, "node: id and cluster are required"},
		{"delta", func(b *bootstrapv3.Bootstrap) {
			b.DynamicResources.AdsConfig.ApiType = corev3.ApiConfigSource_DELTA_GRPC
		}, "ads_config.api_type: DELTA_GRPC"},
		{"transport v2", func(b *bootstrapv3.Bootstrap) {
			b.DynamicResources.AdsConfig.TransportApiVersion = corev3.ApiVersion_AUTO
		}, "transport_api_version: must be V3"},
		{"lds over a path", func(b *bootstrapv3.Bootstrap) {
			b.DynamicResources.LdsConfig = &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Path{Path: "/lds.yaml"}}
		}, "lds_config: only ads"},
		{"no such cluster", func(b *bootstrapv3.Bootstrap) {
			b.DynamicResources.AdsConfig.GrpcServices[0].GetEnvoyGrpc().ClusterName = "nope"
		}, `cluster_name "nope": no such static cluster`},
		{"http/1 xds cluster", func(b *bootstrapv3.Bootstrap) {
			b.StaticResources.Clusters[0].TypedExtensionProtocolOptions = nil
		}, "must enable HTTP/2"},
		{"static listener", func(b *bootstrapv3.Bootstrap) {
			sb := testBootstrap(t, routeAll("x"), nil)
			b.StaticResources.Listeners = sb.StaticResources.Listeners
		}, "static_resources.listeners"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ADSBootstrap("127.0.0.1:1", adsNode, "c")
			if err != nil {
				t.Fatal(err)
			}
			tc.change(b)
			_, err = New(b, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestADSRunWithoutXDS: with a static bootstrap Run just waits.
func TestADSRunWithoutXDS(t *testing.T) {
	e, err := New(testBootstrap(t, routeAll("x"), []*clusterv3.Cluster{testCluster(t, "x", "127.0.0.1:1", false)}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.conns.close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.Run(ctx); err != nil {
		t.Errorf("Run = %v", err)
	}
	if s := e.XDSStatus(); s != (XDSStatus{}) {
		t.Errorf("XDSStatus = %+v", s)
	}
}
