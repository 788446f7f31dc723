package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/envoy/envoytest"
	"github.com/sluicegw/sluice/internal/logbuf"
	"github.com/sluicegw/sluice/internal/testtls"
)

func serveGRPC(t *testing.T, register func(*grpc.Server)) string {
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

// mockProvider runs the mock LLM provider on 127.0.0.1:0.
func mockProvider(t *testing.T, opts mockllm.Options) (*mockllm.Server, string) {
	t.Helper()
	m := mockllm.New(opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return m, ln.Addr().String()
}

// mockTLSProvider runs the mock LLM provider on 127.0.0.1:0 behind TLS
// with cert (ALPN http/1.1), recording the ClientHellos it sees.
func mockTLSProvider(t *testing.T, opts mockllm.Options, cert tls.Certificate) (*mockllm.Server, string, *testtls.Hellos) {
	t.Helper()
	m := mockllm.New(opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hellos := &testtls.Hellos{}
	tln := tls.NewListener(ln, testtls.ServerConfig(cert, []string{"http/1.1"}, hellos))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, tln) }()
	t.Cleanup(func() { cancel(); <-done })
	return m, ln.Addr().String(), hellos
}

func staticCluster(t *testing.T, name, addr string, http2 bool) *clusterv3.Cluster {
	t.Helper()
	c, err := envoytest.StaticCluster(name, addr, http2)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// bootstrap is one listener on 127.0.0.1:0 with filters then the router,
// routing every path to cluster "provider" with no route timeout.
func bootstrap(t *testing.T, clusters []*clusterv3.Cluster, filters ...*hcmv3.HttpFilter) *bootstrapv3.Bootstrap {
	t.Helper()
	rc := &routev3.RouteConfiguration{Name: "local", VirtualHosts: []*routev3.VirtualHost{{
		Name: "all", Domains: []string{"*"},
		Routes: []*routev3.Route{{
			Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{
				ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "provider"},
				Timeout:          durationpb.New(0),
			}},
		}},
	}}}
	b, err := envoytest.Bootstrap(rc, clusters, filters...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func filter(t *testing.T, name string, cfg proto.Message) *hcmv3.HttpFilter {
	t.Helper()
	f, err := envoytest.HTTPFilter(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// proxy is an Envoy under test: the emulator, or a real envoy.
type proxy struct {
	url string
	emu *envoytest.Emulator // nil for a real Envoy
}

// eachProxy runs fn against the emulator and, where an envoy binary is on
// PATH, against real Envoy, with the same bootstrap.
func eachProxy(t *testing.T, b *bootstrapv3.Bootstrap, fn func(t *testing.T, p proxy)) {
	t.Run("emulator", func(t *testing.T) {
		e, err := envoytest.New(b, envoytest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		// Run subscribes over ADS when the bootstrap is dynamic; Listen
		// waits for the first complete configuration (bounded here).
		xdsDone := make(chan error, 1)
		go func() { xdsDone <- e.Run(ctx) }()
		lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
		ln, err := e.Listen(lctx)
		lcancel()
		if err != nil {
			cancel()
			<-xdsDone
			t.Fatalf("emulator: %v (xDS status %+v)", err, e.XDSStatus())
		}
		done := make(chan error, 1)
		go func() { done <- e.Serve(ctx, ln) }()
		t.Cleanup(func() { cancel(); <-done; <-xdsDone })
		fn(t, proxy{url: "http://" + ln.Addr().String(), emu: e})
	})
	t.Run("real-envoy", func(t *testing.T) {
		fn(t, proxy{url: envoytest.StartRealEnvoy(t, b)})
	})
}

func do(t *testing.T, req *http.Request) (int, http.Header, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// syncBuf is a log sink safe for the server's goroutines.
type syncBuf = logbuf.Buffer

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}
