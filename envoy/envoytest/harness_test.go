package envoytest

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Test harness shared by the package's tests: build a bootstrap in Go,
// start gRPC and HTTP servers on 127.0.0.1:0, run the emulator.

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// testCluster is StaticCluster, failing the test on error.
func testCluster(t testing.TB, name, addr string, http2 bool) *clusterv3.Cluster {
	t.Helper()
	c, err := StaticCluster(name, addr, http2)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// grpcCluster names a gRPC service on a cluster, for filter configs.
func grpcCluster(name string, timeout time.Duration) *corev3.GrpcService {
	s := &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: name}}}
	if timeout >= 0 {
		s.Timeout = durationpb.New(timeout)
	}
	return s
}

// routeAll routes every path to cluster.
func routeAll(cluster string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: "local", VirtualHosts: []*routev3.VirtualHost{{
		Name: "all", Domains: []string{"*"},
		Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
		}},
	}}}
}

// testBootstrap is Bootstrap, failing the test on error.
func testBootstrap(t testing.TB, rc *routev3.RouteConfiguration, clusters []*clusterv3.Cluster, filters ...*hcmv3.HttpFilter) *bootstrapv3.Bootstrap {
	t.Helper()
	b, err := Bootstrap(rc, clusters, filters...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func filterOf(t testing.TB, name string, cfg proto.Message) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, cfg)}}
}

// startGRPC serves register's services on 127.0.0.1:0.
func startGRPC(t testing.TB, register func(*grpc.Server)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	register(gs)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// startHTTP serves h on 127.0.0.1:0 (HTTP/1.1 and h2c).
func startHTTP(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// startEmulator runs the emulator for b and returns it and its base URL.
func startEmulator(t testing.TB, b *bootstrapv3.Bootstrap, opts Options) (*Emulator, string) {
	t.Helper()
	e, err := New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := e.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return e, "http://" + ln.Addr().String()
}

// lastExchange waits for the emulator to finish recording n exchanges.
func waitExchanges(t testing.TB, e *Emulator, n int) []*Exchange {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if xs := e.Exchanges(); len(xs) >= n {
			return xs
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d exchanges (have %d)", n, len(e.Exchanges()))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// readAll reads a response body, returning what arrived and the error.
func readAll(r io.Reader) (string, error) {
	b, err := io.ReadAll(r)
	return string(b), err
}

// closedAddr is a loopback address with nothing listening: connecting to
// it fails at once (a connect failure).
func closedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// slowUpstream is an upstream that answers nothing for 5 s (or until the
// request is cancelled): longer than any route timeout the tests set.
func slowUpstream(t testing.TB) string {
	t.Helper()
	return startHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
}
