package envoytest

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestRouterMatching covers the route features Sluice's routes need:
// prefix and exact paths, header exact/present matchers, cluster_header,
// direct_response, and the 404 for no route.
func TestRouterMatching(t *testing.T) {
	a, b := &echoUpstream{}, &echoUpstream{}
	aAddr, bAddr := startHTTP(t, a), startHTTP(t, b)
	route := func(m *routev3.RouteMatch, act any) *routev3.Route {
		r := &routev3.Route{Match: m}
		switch a := act.(type) {
		case *routev3.Route_Route:
			r.Action = a
		case *routev3.Route_DirectResponse:
			r.Action = a
		}
		return r
	}
	toCluster := func(c string) *routev3.Route_Route {
		return &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: c}}}
	}
	rc := &routev3.RouteConfiguration{Name: "r", VirtualHosts: []*routev3.VirtualHost{{
		Name: "all", Domains: []string{"*"},
		Routes: []*routev3.Route{
			route(&routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}, Headers: []*routev3.HeaderMatcher{{
				Name: "x-sluice-provider", HeaderMatchSpecifier: &routev3.HeaderMatcher_ExactMatch{ExactMatch: "b"},
			}}}, toCluster("b")),
			route(&routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}, Headers: []*routev3.HeaderMatcher{{
				Name: "x-by-header", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true},
			}}}, &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_ClusterHeader{ClusterHeader: "x-by-header"}}}),
			route(&routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: "/v1/exact"}}, toCluster("a")),
			route(&routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/"}}, toCluster("a")),
			route(&routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/direct"}}, &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{
				Status: 418, Body: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "no provider for this path"}},
			}}),
		},
	}}}
	e, base := startEmulator(t, testBootstrap(t, rc, []*clusterv3.Cluster{testCluster(t, "a", aAddr, false), testCluster(t, "b", bAddr, true)}), Options{})
	for _, tc := range []struct {
		name, path   string
		headers      map[string]string
		status       int
		body         string
		cluster      string
		aHits, bHits int
	}{
		{"prefix", "/v1/chat/completions?x=1", nil, 200, "", "a", 1, 0},
		{"exact path", "/v1/exact", nil, 200, "", "a", 1, 0},
		{"header exact match wins over prefix (b over h2c)", "/v1/chat/completions", map[string]string{"x-sluice-provider": "b"}, 200, "", "b", 0, 1},
		{"header exact mismatch falls through", "/v1/chat/completions", map[string]string{"x-sluice-provider": "c"}, 200, "", "a", 1, 0},
		{"cluster_header names the cluster", "/anything", map[string]string{"x-by-header": "b"}, 200, "", "b", 0, 1},
		{"cluster_header naming no cluster is 503", "/anything", map[string]string{"x-by-header": "nope"}, 503, "", "nope", 0, 0},
		{"direct_response", "/direct/x", nil, 418, "no provider for this path", "", 0, 0},
		{"no route is 404", "/nothing", nil, 404, "", "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			aBefore, bBefore := len(a.received()), len(b.received())
			e.ResetExchanges()
			req, _ := http.NewRequest("GET", base+tc.path, nil)
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := readAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || (tc.body != "" && body != tc.body) {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, body, tc.status, tc.body)
			}
			if got := len(a.received()) - aBefore; got != tc.aHits {
				t.Errorf("a hits %d, want %d", got, tc.aHits)
			}
			if got := len(b.received()) - bBefore; got != tc.bHits {
				t.Errorf("b hits %d, want %d", got, tc.bHits)
			}
			if x := waitExchanges(t, e, 1)[0]; x.Cluster != tc.cluster {
				t.Errorf("cluster %q, want %q", x.Cluster, tc.cluster)
			}
		})
	}
	if got := a.received()[0].Header.Get("X-Envoy-Expected-Rq-Timeout-Ms"); got != "15000" {
		t.Errorf("default route timeout header %q, want 15000", got)
	}
}

// TestRouterRemovesRequestHeaders: request_headers_to_remove of the route,
// its virtual host and the route configuration are removed when the router
// forwards the request — after routing, so a route can match on a header it
// removes (Envoy's RouteEntryImplBase::finalizeRequestHeaders) — and
// pseudo-headers or host are refused at load, as Envoy's HeaderParser
// refuses them.
func TestRouterRemovesRequestHeaders(t *testing.T) {
	up := &echoUpstream{}
	addr := startHTTP(t, up)
	rc := &routev3.RouteConfiguration{Name: "r", RequestHeadersToRemove: []string{"x-rc"}, VirtualHosts: []*routev3.VirtualHost{{
		Name: "all", Domains: []string{"*"}, RequestHeadersToRemove: []string{"x-vh"},
		Routes: []*routev3.Route{{
			Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}, Headers: []*routev3.HeaderMatcher{{
				Name: "x-sluice-provider", HeaderMatchSpecifier: &routev3.HeaderMatcher_ExactMatch{ExactMatch: "up"},
			}}},
			Action:                 &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "up"}}},
			RequestHeadersToRemove: []string{"X-Sluice-Provider", "x-route"},
		}},
	}}}
	e, base := startEmulator(t, testBootstrap(t, rc, []*clusterv3.Cluster{testCluster(t, "up", addr, false)}), Options{})
	req, _ := http.NewRequest("GET", base+"/v1/models", nil)
	for _, h := range []string{"x-sluice-provider", "x-route", "x-vh", "x-rc", "x-keep"} {
		req.Header.Set(h, "up")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: the route must match on the header it removes", resp.StatusCode)
	}
	got := up.received()
	if len(got) != 1 {
		t.Fatalf("upstream saw %d requests", len(got))
	}
	for _, h := range []string{"x-sluice-provider", "x-route", "x-vh", "x-rc"} {
		if v := got[0].Header.Values(h); len(v) != 0 {
			t.Errorf("upstream received %s: %q", h, v)
		}
	}
	if got[0].Header.Get("x-keep") != "up" {
		t.Error("a header nobody removes was lost")
	}
	if x := waitExchanges(t, e, 1)[0]; x.Cluster != "up" {
		t.Errorf("cluster %q", x.Cluster)
	}

	for _, bad := range []string{":path", "Host", ":authority"} {
		rc := routeAll("up")
		rc.VirtualHosts[0].Routes[0].RequestHeadersToRemove = []string{bad}
		_, err := New(testBootstrap(t, rc, []*clusterv3.Cluster{testCluster(t, "up", addr, false)}), Options{})
		if err == nil || !strings.Contains(err.Error(), ":-prefixed or host headers may not be removed") {
			t.Errorf("removing %s: %v", bad, err)
		}
	}
}

// TestRouterStreamsChunkByChunk proves the response is streamed: the
// client reads the first chunk while the upstream is still holding back
// the second.
func TestRouterStreamsChunkByChunk(t *testing.T) {
	release := make(chan struct{})
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: two\n\n")
	})
	_, base := startEmulator(t, testBootstrap(t, routeAll("up"), []*clusterv3.Cluster{testCluster(t, "up", startHTTP(t, up), false)}), Options{})
	resp, err := http.Get(base + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first line %q %v", line, err)
	}
	close(release)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: two\n\n" {
		t.Fatalf("rest %q %v", rest, err)
	}
	if resp.Header.Get("Content-Length") != "" {
		t.Error("a streamed response must not carry content-length")
	}
}

// TestRouterUpstreamResetMidBody: the client sees a reset, not a clean end.
func TestRouterUpstreamResetMidBody(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream")
		io.WriteString(w, "data: partial\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	e, base := startEmulator(t, testBootstrap(t, routeAll("up"), []*clusterv3.Cluster{testCluster(t, "up", startHTTP(t, up), false)}), Options{})
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	got, err := readAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatalf("body %q ended cleanly; want a reset", got)
	}
	if got != "data: partial\n\n" {
		t.Errorf("got %q before the reset", got)
	}
	x := waitExchanges(t, e, 1)[0]
	if !x.Reset || x.Status != 200 {
		t.Errorf("exchange reset=%v status=%d details=%q", x.Reset, x.Status, x.Details)
	}
}

// TestRouterClientDisconnect: the upstream request is cancelled when the
// client goes away mid-stream.
func TestRouterClientDisconnect(t *testing.T) {
	upstreamDone := make(chan error, 1)
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream")
		for i := 0; ; i++ {
			if _, err := io.WriteString(w, "data: tick\n\n"); err != nil {
				upstreamDone <- err
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				upstreamDone <- r.Context().Err()
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	e, base := startEmulator(t, testBootstrap(t, routeAll("up"), []*clusterv3.Cluster{testCluster(t, "up", startHTTP(t, up), false)}), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	select {
	case err := <-upstreamDone:
		if err == nil {
			t.Error("upstream ended without an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request was not cancelled")
	}
	if x := waitExchanges(t, e, 1)[0]; !x.Reset {
		t.Errorf("exchange not marked reset: %+v", x.Details)
	}
}

func TestRouterFailures(t *testing.T) {
	dead := closedAddr(t) // connect failure
	slow := slowUpstream(t)
	rc := &routev3.RouteConfiguration{Name: "r", VirtualHosts: []*routev3.VirtualHost{{
		Name: "all", Domains: []string{"*"},
		Routes: []*routev3.Route{
			{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/dead"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "dead"}}}},
			{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/slow"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "slow"}, Timeout: durationpb.New(50 * time.Millisecond)}}},
		},
	}}}
	e, base := startEmulator(t, testBootstrap(t, rc, []*clusterv3.Cluster{testCluster(t, "dead", dead, false), testCluster(t, "slow", slow, false)}), Options{})
	for _, tc := range []struct {
		path, details string
		status        int
	}{
		{"/dead", "upstream_reset_before_response_started{remote_connection_failure|delayed_connect_error:_Connection_refused}", 503},
		{"/slow", "upstream_response_timeout", 504},
	} {
		e.ResetExchanges()
		resp, err := http.Get(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.path, resp.StatusCode, tc.status)
		}
		if x := waitExchanges(t, e, 1)[0]; x.Details != tc.details {
			t.Errorf("%s: details %q, want %q", tc.path, x.Details, tc.details)
		}
	}
}

func TestConfigRefusesWhatItCannotEmulate(t *testing.T) {
	up := startHTTP(t, &echoUpstream{})
	rc := routeAll("missing")
	_, err := New(testBootstrap(t, rc, []*clusterv3.Cluster{testCluster(t, "up", up, false)}), Options{})
	if err == nil || !strings.Contains(err.Error(), `names cluster "missing", which is not defined`) {
		t.Errorf("missing cluster: %v", err)
	}
	rc = routeAll("up")
	rc.VirtualHosts[0].Routes[0].Match.PathSpecifier = &routev3.RouteMatch_SafeRegex{}
	_, err = New(testBootstrap(t, rc, []*clusterv3.Cluster{testCluster(t, "up", up, false)}), Options{})
	if err == nil || !strings.Contains(err.Error(), "only prefix and path are supported") {
		t.Errorf("regex route: %v", err)
	}
}

// TestRouterLocalReplyReachesExtProc: since Envoy 1.37 the router's own
// local replies (here a connect failure, 503) run through ext_proc's
// encode path (envoy-protocol.md §4, "Upstream error before headers").
func TestRouterLocalReplyReachesExtProc(t *testing.T) {
	dead := closedAddr(t)
	proc := &procServer{}
	procAddr := startGRPC(t, func(s *grpc.Server) { extprocsvc.RegisterExternalProcessorServer(s, proc) })
	ep := &extprocv3.ExternalProcessor{
		GrpcService:    grpcCluster("proc", -1),
		ProcessingMode: &extprocv3.ProcessingMode{RequestHeaderMode: extprocv3.ProcessingMode_SKIP, ResponseHeaderMode: extprocv3.ProcessingMode_SEND},
	}
	b := testBootstrap(t, routeAll("dead"), []*clusterv3.Cluster{testCluster(t, "dead", dead, false), testCluster(t, "proc", procAddr, true)},
		filterOf(t, "envoy.filters.http.ext_proc", ep))
	e, base := startEmulator(t, b, Options{})
	resp, err := http.Get(base + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("status %d, want 503", resp.StatusCode)
	}
	x := waitExchanges(t, e, 1)[0]
	var statuses []string
	for _, ev := range x.ExtProc {
		if rh := ev.Sent.GetResponseHeaders(); rh != nil {
			for _, h := range rh.GetHeaders().GetHeaders() {
				if h.GetKey() == ":status" {
					statuses = append(statuses, string(h.GetRawValue()))
				}
			}
		}
	}
	if len(statuses) != 1 || statuses[0] != "503" {
		t.Errorf("ext_proc saw response_headers :status %v, want [503]", statuses)
	}
}

// TestAccessLog: one line per request with method, path, protocol,
// status, details, cluster, bytes, duration and the selected metadata.
func TestAccessLog(t *testing.T) {
	var log syncWriter
	az := &scriptedAuthz{check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
		md, _ := structpb.NewStruct(map[string]any{"key_id": "key_1", "team": "red"})
		r := okResp(nil)
		r.DynamicMetadata = md
		return r, nil
	}}
	azAddr := startGRPC(t, func(s *grpc.Server) { authv3.RegisterAuthorizationServer(s, az) })
	b := testBootstrap(t, routeAll("up"), []*clusterv3.Cluster{testCluster(t, "up", startHTTP(t, &echoUpstream{}), false), testCluster(t, "authz", azAddr, true)},
		filterOf(t, "authz", &extauthzv3.ExtAuthz{Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: grpcCluster("authz", -1)}, TransportApiVersion: corev3.ApiVersion_V3}))
	e, base := startEmulator(t, b, Options{AccessLog: &log, AccessLogMetadata: []string{AuthzNamespace + ":key_id", AuthzNamespace + ":team", AuthzNamespace + ":absent"}})
	resp, err := http.Post(base+"/v1/embeddings?x=1", "application/json", strings.NewReader(`{"input":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	waitExchanges(t, e, 1)
	line := log.String()
	re := regexp.MustCompile(`^\[\S+\] "POST /v1/embeddings\?x=1 HTTP/1.1" 200 via_upstream cluster="up" rx=14 tx=\d+ \d+ms envoy.filters.http.ext_authz:key_id="key_1" envoy.filters.http.ext_authz:team="red" envoy.filters.http.ext_authz:absent=-\n$`)
	if !re.MatchString(line) {
		t.Errorf("access log line %q does not match %s", line, re)
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
