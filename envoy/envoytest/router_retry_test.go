package envoytest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Test harness for the router's retries, aggregate clusters, host
// rewriting, circuit breakers and outlier detection.

// statusSeq answers the i-th request with codes[i] (the last code
// repeats), body "<code> from try <i>".
func statusSeq(codes ...int) func(w http.ResponseWriter, r *http.Request) {
	var n atomic.Int32
	return func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		c := codes[min(i, len(codes)-1)]
		w.Header()["Date"] = nil
		w.Header().Set("content-type", "text/plain")
		w.WriteHeader(c)
		fmt.Fprintf(w, "%d from try %d", c, i+1)
	}
}

// deadAddr is a 127.0.0.1 port that refuses connections: a socket bound
// to it but not listening keeps any other listener from taking it for the
// test's lifetime.
func deadAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// endpoint is one LbEndpoint at addr (host:port) with an optional
// endpoint.hostname.
func endpoint(t testing.TB, addr, hostname string) *endpointv3.LbEndpoint {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
		Hostname: hostname,
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
		}}},
	}}}
}

// hostsCluster is a STATIC (or the given type) cluster over endpoints, all
// at priority 0.
func hostsCluster(name string, typ clusterv3.Cluster_DiscoveryType, eps ...*endpointv3.LbEndpoint) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: typ},
		ConnectTimeout:       durationpb.New(time.Second),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: eps,
		}}},
	}
}

// aggregateCluster is an envoy.clusters.aggregate cluster over members, in
// priority order.
func aggregateCluster(t testing.TB, name string, members ...string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:           name,
		ConnectTimeout: durationpb.New(time.Second),
		LbPolicy:       clusterv3.Cluster_CLUSTER_PROVIDED,
		ClusterDiscoveryType: &clusterv3.Cluster_ClusterType{ClusterType: &clusterv3.Cluster_CustomClusterType{
			Name: "envoy.clusters.aggregate", TypedConfig: mustAny(t, &aggregatev3.ClusterConfig{Clusters: members}),
		}},
	}
}

// previousPriorities is the retry priority the xDS server uses.
func previousPriorities(t testing.TB, freq int32) *routev3.RetryPolicy_RetryPriority {
	return &routev3.RetryPolicy_RetryPriority{
		Name:       "envoy.retry_priorities.previous_priorities",
		ConfigType: &routev3.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: mustAny(t, &previousprioritiesv3.PreviousPrioritiesConfig{UpdateFrequency: freq})},
	}
}

// retryOn builds a RetryPolicy with a 1 ms back-off, so that retries
// do not slow the tests.
func retryOn(on string, n uint32, codes ...uint32) *routev3.RetryPolicy {
	return &routev3.RetryPolicy{
		RetryOn:              on,
		NumRetries:           wrapperspb.UInt32(n),
		RetriableStatusCodes: codes,
		RetryBackOff:         &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(time.Millisecond)},
	}
}

// routeTo routes every path to cluster with action and virtual host
// tweaks.
func routeTo(cluster string, mod func(ra *routev3.RouteAction, vh *routev3.VirtualHost)) *routev3.RouteConfiguration {
	rc := routeAll(cluster)
	if mod != nil {
		mod(rc.VirtualHosts[0].Routes[0].GetRoute(), rc.VirtualHosts[0])
	}
	return rc
}

// describeAttempts renders the attempts as "cluster status|reset[, retried]".
func describeAttempts(x *Exchange) []string {
	var out []string
	for _, a := range x.Attempts {
		d := a.Cluster + " "
		if a.Reset != "" {
			d += a.Reset
		} else {
			d += strconv.Itoa(a.Status)
		}
		if a.Retried {
			d += ", retried"
		}
		out = append(out, d)
	}
	return out
}

// routerEnv is what a case's setup builds on: two recording upstreams and
// a dead address.
type routerEnv struct {
	a, b *upstream
	dead string
}

func newRouterEnv(t *testing.T) *routerEnv {
	env := &routerEnv{a: &upstream{}, b: &upstream{}, dead: deadAddr(t)}
	env.a.url, env.b.url = startHTTP(t, env.a), startHTTP(t, env.b)
	return env
}

// TestRouterRetries covers route retry policies, aggregate clusters with
// previous_priorities, host rewriting, circuit breakers, outlier detection
// and the stream idle timeout. Each case builds its own emulator.
func TestRouterRetries(t *testing.T) {
	type tc struct {
		name string
		// setup sets the upstreams' handlers and returns the bootstrap.
		setup        func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap
		body         string // POST body, or GET when empty
		wantStatus   int
		wantBody     string // "" skips
		wantAttempts []string
		wantFlags    string
		wantDetails  string
		wantReset    bool
		check        func(t *testing.T, env *routerEnv, resp *http.Response, x *Exchange)
	}
	twoMembers := func(t *testing.T, env *routerEnv, rp *routev3.RetryPolicy) *bootstrapv3.Bootstrap {
		return testBootstrap(t, routeTo("agg", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) { ra.RetryPolicy = rp }),
			[]*clusterv3.Cluster{testCluster(t, "a", env.a.url, false), testCluster(t, "b", env.b.url, false), aggregateCluster(t, "agg", "a", "b")})
	}
	withPrev := func(rp *routev3.RetryPolicy) *routev3.RetryPolicy {
		rp.RetryPriority = previousPriorities(t, 1)
		return rp
	}
	for _, c := range []tc{
		{
			name: "aggregate: a 503 from the first member is retried on the next priority",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(statusSeq(503))
				return twoMembers(t, env, withPrev(retryOn("5xx", 1)))
			},
			wantStatus: 200, wantBody: "ok",
			wantAttempts: []string{"a 503, retried", "b 200"},
			wantDetails:  "via_upstream",
			check: func(t *testing.T, env *routerEnv, _ *http.Response, x *Exchange) {
				if x.Cluster != "agg" || x.Attempts[1].Priority != 1 || x.Upstream.Cluster != "b" {
					t.Errorf("cluster %q, priority %d, last upstream %q", x.Cluster, x.Attempts[1].Priority, x.Upstream.Cluster)
				}
			},
		},
		{
			name: "aggregate without a retry priority retries the healthy first priority",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(statusSeq(503))
				return twoMembers(t, env, retryOn("5xx", 1))
			},
			wantStatus: 503, wantBody: "503 from try 2",
			wantAttempts: []string{"a 503, retried", "a 503"},
			wantFlags:    "URX", wantDetails: "via_upstream",
		},
		{
			name: "aggregate: every priority attempted, previous_priorities starts again from the first",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(statusSeq(503, 200))
				env.b.setHandler(statusSeq(503))
				return twoMembers(t, env, withPrev(retryOn("5xx", 2)))
			},
			wantStatus: 200, wantBody: "200 from try 2",
			wantAttempts: []string{"a 503, retried", "b 503, retried", "a 200"},
		},
		{
			name: "retries exhausted: the last response is returned",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(statusSeq(502))
				return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) { ra.RetryPolicy = retryOn("gateway-error", 2) }),
					[]*clusterv3.Cluster{testCluster(t, "a", env.a.url, false)})
			},
			wantStatus: 502, wantBody: "502 from try 3",
			wantAttempts: []string{"a 502, retried", "a 502, retried", "a 502"},
			wantFlags:    "URX", wantDetails: "via_upstream",
		},
		{
			name: "a 429 is not a 5xx",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(statusSeq(429, 200))
				return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) { ra.RetryPolicy = retryOn("5xx", 1) }),
					[]*clusterv3.Cluster{testCluster(t, "a", env.a.url, false)})
			},
			wantStatus: 429, wantAttempts: []string{"a 429"},
		},
		{
			name: "a 429 is retried through retriable_status_codes",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(statusSeq(429, 200))
				return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
					ra.RetryPolicy = retryOn("5xx,retriable-status-codes", 1, 429)
				}), []*clusterv3.Cluster{testCluster(t, "a", env.a.url, false)})
			},
			wantStatus: 200, wantBody: "200 from try 2",
			wantAttempts: []string{"a 429, retried", "a 200"},
		},
		{
			name: "connect failure retried on the next member with connect-failure",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				return testBootstrap(t, routeTo("agg", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
					ra.RetryPolicy = withPrev(retryOn("connect-failure", 1))
				}), []*clusterv3.Cluster{testCluster(t, "dead", env.dead, false), testCluster(t, "b", env.b.url, false), aggregateCluster(t, "agg", "dead", "b")})
			},
			wantStatus: 200, wantBody: "ok",
			wantAttempts: []string{"dead remote connection failure, retried", "b 200"},
		},
		{
			name: "connect failure not retried by retriable-status-codes alone",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				return testBootstrap(t, routeTo("dead", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
					ra.RetryPolicy = retryOn("retriable-status-codes", 1, 503)
				}), []*clusterv3.Cluster{testCluster(t, "dead", env.dead, false)})
			},
			wantStatus: 503, wantBody: "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, transport failure reason: delayed connect error: Connection refused",
			wantAttempts: []string{"dead remote connection failure"},
			wantFlags:    "UF", wantDetails: "upstream_reset_before_response_started{remote_connection_failure|delayed_connect_error:_Connection_refused}",
		},
		{
			name: "connect failures exhaust the retries: the last reset is reported",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				return testBootstrap(t, routeTo("dead", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
					ra.RetryPolicy = retryOn("connect-failure", 1)
				}), []*clusterv3.Cluster{testCluster(t, "dead", env.dead, false)})
			},
			wantStatus: 503, wantBody: "upstream connect error or disconnect/reset before headers. retried and the latest reset reason: remote connection failure, transport failure reason: delayed connect error: Connection refused",
			wantAttempts: []string{"dead remote connection failure, retried", "dead remote connection failure"},
			wantFlags:    "UF,URX",
		},
		{
			name: "reset before headers retried with reset",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				var n atomic.Int32
				env.a.setHandler(func(w http.ResponseWriter, r *http.Request) {
					if n.Add(1) == 1 {
						panic(http.ErrAbortHandler) // the connection closes before any response
					}
					writeText(w, "second")
				})
				return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) { ra.RetryPolicy = retryOn("reset", 1) }),
					[]*clusterv3.Cluster{testCluster(t, "a", env.a.url, false)})
			},
			wantStatus: 200, wantBody: "second",
			wantAttempts: []string{"a connection termination, retried", "a 200"},
		},
		{
			name: "no retry once the response has started: a reset mid-body reaches the client",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("content-type", "text/event-stream")
					io.WriteString(w, "data: partial\n\n")
					w.(http.Flusher).Flush()
					panic(http.ErrAbortHandler)
				})
				return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) { ra.RetryPolicy = retryOn("reset,5xx", 3) }),
					[]*clusterv3.Cluster{testCluster(t, "a", env.a.url, false)})
			},
			wantStatus: 200, wantReset: true,
			wantAttempts: []string{"a 200"},
			wantFlags:    "UC", wantDetails: "upstream_reset_after_response_started{connection_termination}",
		},
		{
			name: "the request body is buffered and sent again on a retry",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(statusSeq(503, 200))
				return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) { ra.RetryPolicy = retryOn("5xx", 1) }),
					[]*clusterv3.Cluster{testCluster(t, "a", env.a.url, false)})
			},
			body:       `{"model":"m","input":"hello"}`,
			wantStatus: 200, wantAttempts: []string{"a 503, retried", "a 200"},
			check: func(t *testing.T, env *routerEnv, _ *http.Response, x *Exchange) {
				got := env.a.requests()
				if len(got) != 2 || got[0].Body != got[1].Body || got[1].Body != `{"model":"m","input":"hello"}` {
					t.Errorf("bodies %+v", got)
				}
				if string(x.Attempts[0].Request.Body) != `{"model":"m","input":"hello"}` || x.Attempts[0].Request == x.Attempts[1].Request {
					t.Errorf("recorded attempts' requests %+v %+v", x.Attempts[0].Request, x.Attempts[1].Request)
				}
			},
		},
		{
			name: "a body over the buffer limit gives up retries",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(statusSeq(503, 200))
				b := testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) { ra.RetryPolicy = retryOn("5xx", 1) }),
					[]*clusterv3.Cluster{testCluster(t, "a", env.a.url, false)})
				b.StaticResources.Listeners[0].PerConnectionBufferLimitBytes = wrapperspb.UInt32(8)
				return b
			},
			body:       `{"model":"m","input":"hello"}`,
			wantStatus: 503, wantAttempts: []string{"a 503"},
		},
		{
			name: "per-try timeout: the slow attempt is reset and retried",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				var n atomic.Int32
				env.a.setHandler(func(w http.ResponseWriter, r *http.Request) {
					if n.Add(1) == 1 {
						<-r.Context().Done() // never answers the first attempt
						return
					}
					writeText(w, "fast")
				})
				return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
					ra.RetryPolicy = retryOn("5xx", 1)
					ra.RetryPolicy.PerTryTimeout = durationpb.New(100 * time.Millisecond)
				}), []*clusterv3.Cluster{testCluster(t, "a", env.a.url, false)})
			},
			wantStatus: 200, wantBody: "fast",
			wantAttempts: []string{"a local reset, retried", "a 200"},
			check: func(t *testing.T, env *routerEnv, _ *http.Response, _ *Exchange) {
				got := env.a.requests()
				if len(got) != 2 || got[0].Header.Get("X-Envoy-Expected-Rq-Timeout-Ms") != "100" {
					t.Errorf("expected timeout header %q", got[0].Header.Get("X-Envoy-Expected-Rq-Timeout-Ms"))
				}
			},
		},
		{
			name: "per-try timeout without a retry: 504",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
				return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
					ra.RetryPolicy = retryOn("connect-failure", 1)
					ra.RetryPolicy.PerTryTimeout = durationpb.New(50 * time.Millisecond)
				}), []*clusterv3.Cluster{testCluster(t, "a", env.a.url, false)})
			},
			wantStatus: 504, wantBody: "upstream request timeout",
			wantAttempts: []string{"a local reset"},
			wantFlags:    "UT", wantDetails: "upstream_per_try_timeout",
		},
		{
			name: "attempt count: in the request when asked for, and in the response",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(statusSeq(503, 503, 200))
				return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, vh *routev3.VirtualHost) {
					ra.RetryPolicy = retryOn("5xx", 3)
					vh.IncludeRequestAttemptCount = true
					vh.IncludeAttemptCountInResponse = true
				}), []*clusterv3.Cluster{testCluster(t, "a", env.a.url, false)})
			},
			wantStatus:   200,
			wantAttempts: []string{"a 503, retried", "a 503, retried", "a 200"},
			check: func(t *testing.T, env *routerEnv, resp *http.Response, _ *Exchange) {
				var counts []string
				for _, r := range env.a.requests() {
					counts = append(counts, r.Header.Get("X-Envoy-Attempt-Count"))
				}
				if strings.Join(counts, ",") != "1,2,3" || resp.Header.Get("X-Envoy-Attempt-Count") != "3" {
					t.Errorf("request attempt counts %v, response %q", counts, resp.Header.Get("X-Envoy-Attempt-Count"))
				}
			},
		},
		{
			name: "no attempt count unless the virtual host asks",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				return testBootstrap(t, routeAll("a"), []*clusterv3.Cluster{testCluster(t, "a", env.a.url, false)})
			},
			wantStatus: 200, wantAttempts: []string{"a 200"},
			check: func(t *testing.T, env *routerEnv, resp *http.Response, _ *Exchange) {
				if _, ok := env.a.requests()[0].Header["X-Envoy-Attempt-Count"]; ok || resp.Header.Get("X-Envoy-Attempt-Count") != "" {
					t.Error("attempt count sent without include_request_attempt_count / include_attempt_count_in_response")
				}
			},
		},
		{
			name: "auto_host_rewrite: each attempt carries its host's name",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(statusSeq(503))
				_, bPort, _ := net.SplitHostPort(env.b.url)
				a := hostsCluster("a", clusterv3.Cluster_STATIC, endpoint(t, env.a.url, "provider-a.example"))
				b := hostsCluster("b", clusterv3.Cluster_STRICT_DNS, endpoint(t, "localhost:"+bPort, ""))
				return testBootstrap(t, routeTo("agg", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
					ra.RetryPolicy = withPrev(retryOn("5xx", 1))
					ra.HostRewriteSpecifier = &routev3.RouteAction_AutoHostRewrite{AutoHostRewrite: wrapperspb.Bool(true)}
				}), []*clusterv3.Cluster{a, b, aggregateCluster(t, "agg", "a", "b")})
			},
			wantStatus: 200, wantAttempts: []string{"a 503, retried", "b 200"},
			check: func(t *testing.T, env *routerEnv, _ *http.Response, x *Exchange) {
				if h := env.a.requests()[0].Host; h != "provider-a.example" {
					t.Errorf("first attempt Host %q, want provider-a.example (endpoint.hostname)", h)
				}
				if h := env.b.requests()[0].Host; h != "localhost" {
					t.Errorf("second attempt Host %q, want localhost (the DNS name)", h)
				}
				if got := x.Attempts[1].Request.Headers.Value(":authority"); got != "localhost" {
					t.Errorf("recorded :authority %q", got)
				}
			},
		},
		{
			name: "auto_host_rewrite leaves Host alone for a host without a hostname",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
					ra.HostRewriteSpecifier = &routev3.RouteAction_AutoHostRewrite{AutoHostRewrite: wrapperspb.Bool(true)}
				}), []*clusterv3.Cluster{testCluster(t, "a", env.a.url, false)})
			},
			wantStatus: 200, wantAttempts: []string{"a 200"},
			check: func(t *testing.T, env *routerEnv, _ *http.Response, _ *Exchange) {
				if h := env.a.requests()[0].Host; h != "api.test" {
					t.Errorf("Host %q, want the client's api.test", h)
				}
			},
		},
		{
			name: "host_rewrite_literal with append_x_forwarded_host",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
					ra.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: "api.provider.example"}
					ra.AppendXForwardedHost = true
				}), []*clusterv3.Cluster{testCluster(t, "a", env.a.url, false)})
			},
			wantStatus: 200, wantAttempts: []string{"a 200"},
			check: func(t *testing.T, env *routerEnv, _ *http.Response, _ *Exchange) {
				r := env.a.requests()[0]
				if r.Host != "api.provider.example" || r.Header.Get("X-Forwarded-Host") != "api.test" {
					t.Errorf("Host %q, x-forwarded-host %q", r.Host, r.Header.Get("X-Forwarded-Host"))
				}
			},
		},
		{
			name: "max_retries 0: the retry overflows, the response is returned",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(statusSeq(503, 200))
				a := testCluster(t, "a", env.a.url, false)
				a.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{MaxRetries: wrapperspb.UInt32(0)}}}
				return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) { ra.RetryPolicy = retryOn("5xx", 2) }),
					[]*clusterv3.Cluster{a})
			},
			wantStatus: 503, wantAttempts: []string{"a 503"},
			wantFlags: "UO", wantDetails: "via_upstream",
		},
		{
			name: "the aggregate's max_retries bounds retries, not the members'",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(statusSeq(503))
				agg := aggregateCluster(t, "agg", "a", "b")
				agg.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{MaxRetries: wrapperspb.UInt32(0)}}}
				return testBootstrap(t, routeTo("agg", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) { ra.RetryPolicy = withPrev(retryOn("5xx", 1)) }),
					[]*clusterv3.Cluster{testCluster(t, "a", env.a.url, false), testCluster(t, "b", env.b.url, false), agg})
			},
			wantStatus: 503, wantAttempts: []string{"a 503"}, wantFlags: "UO",
		},
		{
			name: "route idle_timeout: no byte for that long is a 504 stream timeout",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
				return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
					ra.IdleTimeout = durationpb.New(50 * time.Millisecond)
					ra.Timeout = durationpb.New(0)
				}), []*clusterv3.Cluster{testCluster(t, "a", env.a.url, false)})
			},
			wantStatus: 504, wantBody: "stream timeout",
			wantAttempts: []string{"a 0"},
			wantFlags:    "SI", wantDetails: "stream_idle_timeout",
		},
		{
			name: "route idle_timeout after the response started: a reset",
			setup: func(t *testing.T, env *routerEnv) *bootstrapv3.Bootstrap {
				env.a.setHandler(func(w http.ResponseWriter, r *http.Request) {
					io.WriteString(w, "data: first\n\n")
					w.(http.Flusher).Flush()
					<-r.Context().Done()
				})
				return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
					ra.IdleTimeout = durationpb.New(50 * time.Millisecond)
				}), []*clusterv3.Cluster{testCluster(t, "a", env.a.url, false)})
			},
			wantStatus: 200, wantReset: true, wantAttempts: []string{"a 200"},
			wantFlags: "SI", wantDetails: "stream_idle_timeout",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := newRouterEnv(t)
			e, base := startEmulator(t, c.setup(t, env), Options{})
			method, body := "GET", io.Reader(nil)
			if c.body != "" {
				method, body = "POST", strings.NewReader(c.body)
			}
			req, _ := http.NewRequest(method, base+"/v1/chat/completions", body)
			req.Host = "api.test"
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, rerr := readAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.wantStatus || (c.wantBody != "" && got != c.wantBody) {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, got, c.wantStatus, c.wantBody)
			}
			if (rerr != nil) != c.wantReset {
				t.Errorf("body read error %v, want reset %v", rerr, c.wantReset)
			}
			x := waitExchanges(t, e, 1)[0]
			if d := describeAttempts(x); strings.Join(d, "; ") != strings.Join(c.wantAttempts, "; ") {
				t.Errorf("attempts\n got %q\nwant %q", d, c.wantAttempts)
			}
			if x.ResponseFlags != c.wantFlags {
				t.Errorf("response flags %q, want %q", x.ResponseFlags, c.wantFlags)
			}
			if c.wantDetails != "" && x.Details != c.wantDetails {
				t.Errorf("details %q, want %q", x.Details, c.wantDetails)
			}
			if c.check != nil {
				c.check(t, env, resp, x)
			}
		})
	}
}

// TestRouterCircuitBreakers: past max_requests (or max_pending_requests)
// an attempt overflows: 503 with x-envoy-overloaded, flag UO, and no
// retry.
func TestRouterCircuitBreakers(t *testing.T) {
	for _, c := range []struct {
		name string
		th   *clusterv3.CircuitBreakers_Thresholds
	}{
		{"max_requests", &clusterv3.CircuitBreakers_Thresholds{MaxRequests: wrapperspb.UInt32(1)}},
		{"max_pending_requests with max_connections", &clusterv3.CircuitBreakers_Thresholds{MaxConnections: wrapperspb.UInt32(1), MaxPendingRequests: wrapperspb.UInt32(1)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			arrived, release := make(chan struct{}, 4), make(chan struct{})
			up := &upstream{}
			up.setHandler(func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				<-release
				writeText(w, "done")
			})
			up.url = startHTTP(t, up)
			a := testCluster(t, "a", up.url, false)
			a.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{c.th}}
			b := testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) { ra.RetryPolicy = retryOn("5xx,reset", 2) }),
				[]*clusterv3.Cluster{a})
			e, base := startEmulator(t, b, Options{})

			// The first request holds the only slot.
			first := make(chan *http.Response, 1)
			go func() {
				resp, err := http.Get(base + "/first")
				if err != nil {
					first <- nil
					return
				}
				first <- resp
			}()
			<-arrived
			// With max_connections 1 the second request waits for the
			// connection (pending); the third overflows.
			var held chan *http.Response
			if c.th.GetMaxPendingRequests() != nil {
				held = make(chan *http.Response, 1)
				go func() {
					resp, _ := http.Get(base + "/pending")
					held <- resp
				}()
				waitFor(t, "a pending request", func() bool { return e.cfg.Load().clusters["a"].pending.n.Load() == 1 })
			}
			resp, err := http.Get(base + "/overflow")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := readAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 503 || resp.Header.Get("X-Envoy-Overloaded") != "true" || body != "upstream connect error or disconnect/reset before headers. reset reason: overflow" {
				t.Errorf("overflow: %d %q overloaded=%q", resp.StatusCode, body, resp.Header.Get("X-Envoy-Overloaded"))
			}
			close(release)
			if r := <-first; r == nil || r.StatusCode != 200 {
				t.Errorf("first request: %v", r)
			} else {
				r.Body.Close()
			}
			if held != nil {
				if r := <-held; r == nil || r.StatusCode != 200 {
					t.Errorf("pending request: %v", r)
				} else {
					r.Body.Close()
				}
			}
			var x *Exchange
			waitFor(t, "the /overflow exchange", func() bool {
				for _, ex := range e.Exchanges() {
					if ex.Path == "/overflow" {
						x = ex
					}
				}
				return x != nil
			})
			if x.ResponseFlags != "UO" || x.Details != "upstream_reset_before_response_started{overflow}" || strings.Join(describeAttempts(x), ";") != "a overflow" {
				t.Errorf("overflow exchange: flags %q details %q attempts %q", x.ResponseFlags, x.Details, describeAttempts(x))
			}
		})
	}
}

// TestRouterOutlierDetection: consecutive 5xx eject a host, which then
// gets no traffic until its ejection ends.
func TestRouterOutlierDetection(t *testing.T) {
	bad, good := &upstream{}, &upstream{}
	bad.setHandler(statusSeq(503))
	bad.url, good.url = startHTTP(t, bad), startHTTP(t, good)
	c := hostsCluster("a", clusterv3.Cluster_STATIC, endpoint(t, bad.url, ""), endpoint(t, good.url, ""))
	c.OutlierDetection = &clusterv3.OutlierDetection{
		Consecutive_5Xx:    wrapperspb.UInt32(2),
		Interval:           durationpb.New(time.Hour),
		BaseEjectionTime:   durationpb.New(time.Hour),
		MaxEjectionTime:    durationpb.New(2 * time.Hour),
		MaxEjectionPercent: wrapperspb.UInt32(50),
	}
	e, base := startEmulator(t, testBootstrap(t, routeAll("a"), []*clusterv3.Cluster{c}), Options{})
	var statuses []string
	for range 8 {
		resp, err := http.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		statuses = append(statuses, strconv.Itoa(resp.StatusCode))
	}
	// Round robin: bad, good, bad (second consecutive 5xx: ejected), then
	// only good.
	if got := strings.Join(statuses, ","); got != "503,200,503,200,200,200,200,200" {
		t.Errorf("statuses %s", got)
	}
	if n := len(bad.requests()); n != 2 {
		t.Errorf("the ejected host got %d requests, want 2", n)
	}
	if !e.cfg.Load().clusters["a"].priorities[0][0].od.isEjected() {
		t.Error("the failing host is not ejected")
	}
}

// TestRouterOutlierPanic: a cluster's only host is ejected (0% ejected is
// under the default max_ejection_percent of 10%), and the cluster then
// routes to it anyway: with no healthy host the priority is in panic.
func TestRouterOutlierPanic(t *testing.T) {
	bad := &upstream{}
	bad.setHandler(statusSeq(503))
	bad.url = startHTTP(t, bad)
	c := testCluster(t, "a", bad.url, false)
	c.OutlierDetection = &clusterv3.OutlierDetection{Consecutive_5Xx: wrapperspb.UInt32(1)}
	e, base := startEmulator(t, testBootstrap(t, routeAll("a"), []*clusterv3.Cluster{c}), Options{})
	for range 3 {
		resp, err := http.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if !e.cfg.Load().clusters["a"].priorities[0][0].od.isEjected() {
		t.Error("the host is not ejected")
	}
	if n := len(bad.requests()); n != 3 {
		t.Errorf("requests %d, want 3: a cluster whose only host is ejected still routes to it", n)
	}
}

// TestRouterConfigRefusals: what the emulator cannot emulate is refused
// at load, naming the field.
func TestRouterConfigRefusals(t *testing.T) {
	up := startHTTP(t, &upstream{})
	for _, c := range []struct {
		name string
		b    func(t *testing.T) *bootstrapv3.Bootstrap
		want string
	}{
		{"an unsupported retry_on", func(t *testing.T) *bootstrapv3.Bootstrap {
			return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
				ra.RetryPolicy = retryOn("5xx,retriable-4xx", 1)
			}),
				[]*clusterv3.Cluster{testCluster(t, "a", up, false)})
		}, `retry_on "retriable-4xx" is not supported`},
		{"a retry host predicate", func(t *testing.T) *bootstrapv3.Bootstrap {
			return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
				ra.RetryPolicy = retryOn("5xx", 1)
				ra.RetryPolicy.RetryHostPredicate = []*routev3.RetryPolicy_RetryHostPredicate{{Name: "envoy.retry_host_predicates.previous_hosts"}}
			}), []*clusterv3.Cluster{testCluster(t, "a", up, false)})
		}, "retry_host_predicate is not supported"},
		{"an aggregate member that does not exist", func(t *testing.T) *bootstrapv3.Bootstrap {
			return testBootstrap(t, routeAll("agg"), []*clusterv3.Cluster{testCluster(t, "a", up, false), aggregateCluster(t, "agg", "a", "missing")})
		}, `cluster "agg": aggregate member "missing" is not defined`},
		{"an upstream filter chain without the codec last", func(t *testing.T) *bootstrapv3.Bootstrap {
			a := testCluster(t, "a", up, false)
			setUpstreamFilters(t, a, false, filterOf(t, "ext_proc", upstreamExtProc("proc", "a")))
			return testBootstrap(t, routeAll("a"), []*clusterv3.Cluster{a, testCluster(t, "proc", up, true)})
		}, "the last filter must be envoy.filters.http.upstream_codec"},
		{"an upstream filter the emulator does not implement", func(t *testing.T) *bootstrapv3.Bootstrap {
			a := testCluster(t, "a", up, false)
			setUpstreamFilters(t, a, true, filterOf(t, "router", &aggregatev3.ClusterConfig{}))
			return testBootstrap(t, routeAll("a"), []*clusterv3.Cluster{a})
		}, `unsupported upstream filter type "envoy.extensions.clusters.aggregate.v3.ClusterConfig"`},
		{"a route priority HIGH", func(t *testing.T) *bootstrapv3.Bootstrap {
			return testBootstrap(t, routeTo("a", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) { ra.Priority = corev3.RoutingPriority_HIGH }),
				[]*clusterv3.Cluster{testCluster(t, "a", up, false)})
		}, "priority HIGH is not supported"},
		{"a retry budget", func(t *testing.T) *bootstrapv3.Bootstrap {
			a := testCluster(t, "a", up, false)
			a.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{RetryBudget: &clusterv3.CircuitBreakers_Thresholds_RetryBudget{}}}}
			return testBootstrap(t, routeAll("a"), []*clusterv3.Cluster{a})
		}, "retry_budget is not supported"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := New(c.b(t), Options{})
			if err == nil {
				e.conns.close()
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want %q", err, c.want)
			}
		})
	}
}

// waitFor polls cond until it holds (no sleeps as readiness checks).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tk := time.NewTicker(time.Millisecond)
	defer tk.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tk.C:
		}
	}
}

// TestRouterOutlierUneject: an ejected host comes back once its ejection
// time has passed, at an interval tick.
func TestRouterOutlierUneject(t *testing.T) {
	flaky, good := &upstream{}, &upstream{}
	flaky.setHandler(statusSeq(503, 200))
	flaky.url, good.url = startHTTP(t, flaky), startHTTP(t, good)
	c := hostsCluster("a", clusterv3.Cluster_STATIC, endpoint(t, flaky.url, ""), endpoint(t, good.url, ""))
	c.OutlierDetection = &clusterv3.OutlierDetection{
		Consecutive_5Xx:    wrapperspb.UInt32(1),
		Interval:           durationpb.New(10 * time.Millisecond),
		BaseEjectionTime:   durationpb.New(30 * time.Millisecond),
		MaxEjectionPercent: wrapperspb.UInt32(50),
	}
	e, base := startEmulator(t, testBootstrap(t, routeAll("a"), []*clusterv3.Cluster{c}), Options{})
	get := func() {
		resp, err := http.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	get() // flaky: 503, ejected
	if !e.cfg.Load().clusters["a"].priorities[0][0].od.isEjected() {
		t.Fatal("not ejected after one 5xx with consecutive_5xx 1")
	}
	get() // good, while flaky is ejected
	if n := len(flaky.requests()); n != 1 {
		t.Fatalf("the ejected host got %d requests", n)
	}
	waitFor(t, "the ejected host to get traffic again", func() bool {
		get()
		return len(flaky.requests()) == 2
	})
}

// TestRouterResetWhileRequestStreams: an upstream reset after the response
// started ends the stream even while the client is still sending the
// request body (h2c, so that neither side waits for the body).
func TestRouterResetWhileRequestStreams(t *testing.T) {
	// Answers 200 with a partial chunked body without reading the request,
	// then closes the connection.
	up := startHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n7\r\npartial\r\n")
		bw.Flush()
		conn.Close()
	}))
	e, base := startEmulator(t, testBootstrap(t, routeAll("a"), []*clusterv3.Cluster{testCluster(t, "a", up, false)}), Options{})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	defer tr.CloseIdleConnections() // else the server's shutdown waits out its GOAWAY
	client := &http.Client{Transport: tr}
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte("first chunk of a body that never ends"))
	req, _ := http.NewRequest("POST", base+"/", pr)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readAll(resp.Body); err == nil || got != "partial" {
		t.Errorf("got %q, %v; want the partial body, then a reset", got, err)
	}
	resp.Body.Close()
	if x := waitExchanges(t, e, 1)[0]; !x.Reset || x.Details != "upstream_reset_after_response_started{connection_termination}" {
		t.Errorf("exchange reset=%v details %q", x.Reset, x.Details)
	}
}
