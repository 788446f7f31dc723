package envoytest

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// replica is an ext_authz server with gRPC health, counting its calls.
type replica struct {
	addr   string
	calls  atomic.Int64
	health *health.Server
	gs     *grpc.Server
	ln     net.Listener
}

func startReplica(t *testing.T, withHealth bool) *replica {
	t.Helper()
	r := &replica{health: health.NewServer()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.ln, r.addr = ln, ln.Addr().String()
	r.gs = grpc.NewServer()
	authv3.RegisterAuthorizationServer(r.gs, &scriptedAuthz{check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
		r.calls.Add(1)
		return okResp(nil), nil
	}})
	if withHealth {
		healthpb.RegisterHealthServer(r.gs, r.health)
	}
	go r.gs.Serve(ln)
	t.Cleanup(r.gs.Stop)
	return r
}

func (r *replica) serving(ok bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if !ok {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	r.health.SetServingStatus("", st)
}

// blackHole forwards TCP to a target until swallow is set; from then on
// it accepts connections and reads their bytes, and nothing comes back:
// a replica whose network path went dark.
type blackHole struct {
	addr    string
	swallow atomic.Bool
}

func startBlackHole(t *testing.T, target string) *blackHole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackHole{addr: ln.Addr().String()}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				dst.Close()
				return
			}
			if !b.swallow.Load() {
				if _, err := dst.Write(buf[:n]); err != nil {
					src.Close()
					return
				}
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			conns.Add(2)
			go func() { defer conns.Done(); pipe(up, c) }()
			go func() { defer conns.Done(); pipe(c, up) }()
			t.Cleanup(func() { c.Close(); up.Close() })
		}
	}()
	return b
}

// hcCluster is an HTTP/2 cluster over addrs with a gRPC health check.
func hcCluster(t *testing.T, addrs []string, hc *corev3.HealthCheck, od *clusterv3.OutlierDetection) *clusterv3.Cluster {
	t.Helper()
	c := testCluster(t, "sluice", addrs[0], true)
	la := &endpointv3.LocalityLbEndpoints{}
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		var p uint32
		for _, ch := range port {
			p = p*10 + uint32(ch-'0')
		}
		la.LbEndpoints = append(la.LbEndpoints, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: p}}}},
		}}})
	}
	c.LoadAssignment = &endpointv3.ClusterLoadAssignment{ClusterName: "sluice", Endpoints: []*endpointv3.LocalityLbEndpoints{la}}
	if hc != nil {
		c.HealthChecks = []*corev3.HealthCheck{hc}
	}
	c.OutlierDetection = od
	return c
}

func grpcHC(interval, timeout time.Duration, unhealthy, healthy uint32) *corev3.HealthCheck {
	return &corev3.HealthCheck{
		Interval:           durationpb.New(interval),
		NoTrafficInterval:  durationpb.New(interval),
		Timeout:            durationpb.New(timeout),
		UnhealthyThreshold: wrapperspb.UInt32(unhealthy),
		HealthyThreshold:   wrapperspb.UInt32(healthy),
		HealthChecker:      &corev3.HealthCheck_GrpcHealthCheck_{GrpcHealthCheck: &corev3.HealthCheck_GrpcHealthCheck{}},
	}
}

// authzFront is an emulator whose ext_authz calls the "sluice" cluster c
// (failing closed with 503, timeout authzTimeout) in front of an echo
// upstream.
func authzFront(t *testing.T, c *clusterv3.Cluster, authzTimeout time.Duration) (*Emulator, func(n int) map[int]int) {
	t.Helper()
	up := startHTTP(t, &echoUpstream{})
	b := testBootstrap(t, routeAll("upstream"), []*clusterv3.Cluster{c, testCluster(t, "upstream", up, false)},
		filterOf(t, "envoy.filters.http.ext_authz", &extauthzv3.ExtAuthz{
			TransportApiVersion: corev3.ApiVersion_V3,
			Services:            &extauthzv3.ExtAuthz_GrpcService{GrpcService: grpcCluster("sluice", authzTimeout)},
			StatusOnError:       &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
		}))
	e, url := startEmulator(t, b, Options{})
	send := func(n int) map[int]int {
		out := map[int]int{}
		for range n {
			resp, err := http.Get(url + "/x")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			out[resp.StatusCode]++
		}
		return out
	}
	return e, send
}

// eventually polls cond until it holds, or fails the test after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGRPCHealthCheck: Envoy's active gRPC health checker takes a replica
// that says NOT_SERVING out at its next check, puts it back after
// healthy_threshold good checks, takes a dead one out after
// unhealthy_threshold failed connections, and when every host is
// unhealthy the cluster is in panic and uses them all.
func TestGRPCHealthCheck(t *testing.T) {
	a, b := startReplica(t, true), startReplica(t, true)
	_, send := authzFront(t, hcCluster(t, []string{a.addr, b.addr}, grpcHC(50*time.Millisecond, 500*time.Millisecond, 2, 2), nil), time.Second)

	// Warm: both hosts passed their first check before the first request.
	if got := send(20); got[200] != 20 {
		t.Fatalf("both healthy: statuses %v", got)
	}
	if a.calls.Load() == 0 || b.calls.Load() == 0 {
		t.Fatalf("round robin: a %d, b %d calls", a.calls.Load(), b.calls.Load())
	}

	b.serving(false)
	eventually(t, 2*time.Second, "b, NOT_SERVING, still takes calls", func() bool {
		before := b.calls.Load()
		send(10)
		return b.calls.Load() == before
	})
	b.serving(true)
	eventually(t, 2*time.Second, "b, SERVING again, takes no calls", func() bool {
		before := b.calls.Load()
		send(10)
		return b.calls.Load() > before
	})

	// Dead: connections refused. Once found out, no request fails.
	b.gs.Stop()
	eventually(t, 3*time.Second, "requests still fail with b dead", func() bool {
		return send(20)[200] == 20
	})
	if got := send(50); got[200] != 50 {
		t.Errorf("b dead and out: statuses %v", got)
	}

	// Every host unhealthy: panic, and round robin over all of them (a
	// answers, b cannot).
	a.serving(false)
	eventually(t, 3*time.Second, "a NOT_SERVING and b dead: no request reached a (panic mode uses every host)", func() bool {
		before := a.calls.Load()
		got := send(20)
		return a.calls.Load() > before && got[503] > 0
	})
}

// TestGRPCHealthCheckBlackHole: a replica that stops answering (packets
// dropped, no reset) fails its checks by timeout and is taken out after
// unhealthy_threshold of them; a host whose first check times out is
// never used.
func TestGRPCHealthCheckBlackHole(t *testing.T) {
	a, b := startReplica(t, true), startReplica(t, true)
	hole := startBlackHole(t, b.addr)
	_, send := authzFront(t, hcCluster(t, []string{a.addr, hole.addr}, grpcHC(50*time.Millisecond, 100*time.Millisecond, 2, 1), nil), 100*time.Millisecond)
	if got := send(10); got[200] != 10 || b.calls.Load() == 0 {
		t.Fatalf("both healthy: statuses %v, b %d calls", got, b.calls.Load())
	}
	hole.swallow.Store(true)
	eventually(t, 3*time.Second, "requests still fail with b black-holed", func() bool {
		return send(20)[200] == 20
	})

	// A cluster built while b is dark: its first check times out, and it
	// stays out.
	c, d := startReplica(t, true), startReplica(t, true)
	dark := startBlackHole(t, d.addr)
	dark.swallow.Store(true)
	_, send2 := authzFront(t, hcCluster(t, []string{c.addr, dark.addr}, grpcHC(50*time.Millisecond, 100*time.Millisecond, 2, 1), nil), 100*time.Millisecond)
	if got := send2(20); got[200] != 20 || d.calls.Load() != 0 {
		t.Errorf("dark host at start-up: statuses %v, its calls %d", got, d.calls.Load())
	}
}

// TestGRPCHealthCheckAnswers: what counts as a failed check — a server
// without the health service (grpc-go answers Unimplemented), a status
// other than SERVING — keeps a host out from its first check. (Two good
// hosts of four: one of three would be below the panic threshold.)
func TestGRPCHealthCheckAnswers(t *testing.T) {
	good, good2 := startReplica(t, true), startReplica(t, true)
	noHealth := startReplica(t, false)
	unknown := startReplica(t, true)
	unknown.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVICE_UNKNOWN)
	_, send := authzFront(t, hcCluster(t, []string{good.addr, noHealth.addr, unknown.addr, good2.addr}, grpcHC(50*time.Millisecond, 500*time.Millisecond, 3, 1), nil), time.Second)
	if got := send(30); got[200] != 30 {
		t.Fatalf("statuses %v", got)
	}
	if noHealth.calls.Load() != 0 || unknown.calls.Load() != 0 || good.calls.Load()+good2.calls.Load() != 30 {
		t.Errorf("calls: good %d and %d, no health service %d, SERVICE_UNKNOWN %d", good.calls.Load(), good2.calls.Load(), noHealth.calls.Load(), unknown.calls.Load())
	}
}

// TestGRPCOutlierDetection: without active checks, five failed calls in
// a row to a dead replica eject it (a refused connection counts as 503).
func TestGRPCOutlierDetection(t *testing.T) {
	a := startReplica(t, true)
	dead := closedAddr(t)
	od := &clusterv3.OutlierDetection{Consecutive_5Xx: wrapperspb.UInt32(5), MaxEjectionPercent: wrapperspb.UInt32(50), BaseEjectionTime: durationpb.New(time.Minute)}
	_, send := authzFront(t, hcCluster(t, []string{a.addr, dead}, nil, od), time.Second)
	got := send(10) // half reach the dead host, and fail closed
	if got[503] != 5 {
		t.Fatalf("before ejection: statuses %v (want 5 failures, the 5th ejecting)", got)
	}
	if got := send(30); got[200] != 30 {
		t.Errorf("after ejection: statuses %v", got)
	}
}

// TestHealthCheckConfigRefused: what the emulator does not implement is
// refused when the configuration loads.
func TestHealthCheckConfigRefused(t *testing.T) {
	a := startReplica(t, true)
	httpHC := grpcHC(time.Second, time.Second, 1, 1)
	httpHC.HealthChecker = &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &corev3.HealthCheck_HttpHealthCheck{Path: "/"}}
	noThreshold := grpcHC(time.Second, time.Second, 1, 1)
	noThreshold.HealthyThreshold = nil
	noInterval := grpcHC(time.Second, time.Second, 1, 1)
	noInterval.Interval = nil
	for name, tc := range map[string]struct {
		hcs  []*corev3.HealthCheck
		want string
	}{
		"http":         {[]*corev3.HealthCheck{httpHC}, "only grpc_health_check"},
		"two":          {[]*corev3.HealthCheck{grpcHC(time.Second, time.Second, 1, 1), grpcHC(time.Second, time.Second, 1, 1)}, "one health check"},
		"no threshold": {[]*corev3.HealthCheck{noThreshold}, "HealthyThreshold: value is required"},
		"no interval":  {[]*corev3.HealthCheck{noInterval}, "Interval: value is required"},
	} {
		t.Run(name, func(t *testing.T) {
			c := hcCluster(t, []string{a.addr}, nil, nil)
			c.HealthChecks = tc.hcs
			b, err := Bootstrap(routeAll("sluice"), []*clusterv3.Cluster{c})
			if err == nil {
				_, err = New(b, Options{})
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}
