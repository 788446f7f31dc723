package envoytest

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Upstream HTTP filters: an ext_proc in a cluster's upstream filter chain
// opens a new stream on every router attempt.

// upProc is an ExternalProcessor for upstream filter chains. Stream n
// (from 1) sets x-upstream-try: n and x-upstream: <its x-sluice-upstream
// metadata> on the request headers, replaces a buffered request body with
// "rewritten-n", adds x-served-by: try-n to the response headers, and sets
// dynamic metadata sluice.upstream_try = n.
type upProc struct {
	extprocsvc.UnimplementedExternalProcessorServer
	mu        sync.Mutex
	streams   []*upProcStream
	immediate bool // answer request headers with a 418 ImmediateResponse
}

type upProcStream struct {
	md  metadata.MD
	got []*extprocsvc.ProcessingRequest
}

func (p *upProc) Process(st extprocsvc.ExternalProcessor_ProcessServer) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	p.mu.Lock()
	rec := &upProcStream{md: md}
	p.streams = append(p.streams, rec)
	n := len(p.streams)
	immediate := p.immediate
	p.mu.Unlock()
	name := strings.Join(md.Get("x-sluice-upstream"), ",")
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		p.mu.Lock()
		rec.got = append(rec.got, req)
		p.mu.Unlock()
		var resp *extprocsvc.ProcessingResponse
		switch req.GetRequest().(type) {
		case *extprocsvc.ProcessingRequest_RequestHeaders:
			if immediate {
				resp = immediate418()
				break
			}
			resp = reqHeadersReply(&extprocsvc.CommonResponse{
				HeaderMutation:  mutation(setHdr("x-upstream-try", strconv.Itoa(n)), setHdr("x-upstream", name)),
				ClearRouteCache: true, // ignored in an upstream filter chain
			})
			resp.DynamicMetadata, _ = structpb.NewStruct(map[string]any{"sluice": map[string]any{"upstream_try": float64(n)}})
		case *extprocsvc.ProcessingRequest_RequestBody:
			nb := fmt.Sprintf("rewritten-%d", n)
			resp = reqBodyReply(&extprocsvc.CommonResponse{
				HeaderMutation: mutation(setHdr("content-length", strconv.Itoa(len(nb)))),
				BodyMutation:   newBody(nb),
			})
		case *extprocsvc.ProcessingRequest_ResponseHeaders:
			resp = respHeadersReply(&extprocsvc.CommonResponse{HeaderMutation: mutation(setHdr("x-served-by", fmt.Sprintf("try-%d", n)))})
		default:
			resp = continueFor(req)
		}
		if st.Send(resp) != nil {
			return nil
		}
	}
}

func immediate418() *extprocsvc.ProcessingResponse {
	return immediate(&extprocsvc.ImmediateResponse{Status: &typev3.HttpStatus{Code: 418}, Body: []byte("refused upstream")})
}

func (p *upProc) snapshot() []*upProcStream {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*upProcStream, len(p.streams))
	for i, s := range p.streams {
		c := *s
		c.got = append([]*extprocsvc.ProcessingRequest(nil), s.got...)
		out[i] = &c
	}
	return out
}

// upstreamExtProc is the ext_proc filter of an upstream chain: request
// headers and buffered body, response headers, initial metadata
// x-sluice-upstream: name.
func upstreamExtProc(procCluster, name string) *extprocv3.ExternalProcessor {
	gs := grpcCluster(procCluster, -1)
	gs.InitialMetadata = []*corev3.HeaderValue{{Key: "x-sluice-upstream", Value: name}}
	return &extprocv3.ExternalProcessor{
		GrpcService:     gs,
		MessageTimeout:  durationpb.New(5 * time.Second),
		ProcessingMode:  &extprocv3.ProcessingMode{RequestBodyMode: extprocv3.ProcessingMode_BUFFERED, ResponseHeaderMode: extprocv3.ProcessingMode_SEND},
		MetadataOptions: &extprocv3.MetadataOptions{ReceivingNamespaces: &extprocv3.MetadataOptions_MetadataNamespaces{Untyped: []string{"sluice"}}},
	}
}

// setUpstreamFilters gives c an upstream HTTP filter chain (HTTP/1.1),
// with the upstream codec last when withCodec.
func setUpstreamFilters(t testing.TB, c *clusterv3.Cluster, withCodec bool, filters ...*hcmv3.HttpFilter) {
	t.Helper()
	if withCodec {
		filters = append(filters, filterOf(t, "envoy.filters.http.upstream_codec", &upstreamcodecv3.UpstreamCodec{}))
	}
	opts := &upstreamhttpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}},
		}},
		HttpFilters: filters,
	}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{typeHTTPProtoOpt: mustAny(t, opts)}
}

// headerOf returns the raw value of key in a headers message.
func headerOf(m *corev3.HeaderMap, key string) (string, bool) {
	for _, h := range m.GetHeaders() {
		if h.GetKey() == key {
			return string(h.GetRawValue()), true
		}
	}
	return "", false
}

// TestRouterUpstreamFilters covers upstream HTTP filter chains: a new
// ext_proc stream per attempt with the filter's initial metadata, its
// mutations, and which cluster's chain runs behind an aggregate cluster.
func TestRouterUpstreamFilters(t *testing.T) {
	const reqBody = `{"model":"m","input":"hello"}`
	type env struct {
		a, b *upstream
		proc *upProc
		addr string // the processor's address
	}
	for _, c := range []struct {
		name       string
		setup      func(t *testing.T, e *env) *bootstrapv3.Bootstrap
		wantStatus int
		wantBody   string
		check      func(t *testing.T, e *env, resp *http.Response, x *Exchange)
	}{
		{
			name: "a new stream per attempt, each attempt's mutations sent upstream",
			setup: func(t *testing.T, e *env) *bootstrapv3.Bootstrap {
				e.a.setHandler(statusSeq(503, 200))
				p := testCluster(t, "p", e.a.url, false)
				setUpstreamFilters(t, p, true, filterOf(t, "ext_proc", upstreamExtProc("proc", "provider-p")))
				return testBootstrap(t, routeTo("p", func(ra *routev3.RouteAction, vh *routev3.VirtualHost) {
					ra.RetryPolicy = retryOn("5xx", 1)
					vh.IncludeRequestAttemptCount = true
				}), []*clusterv3.Cluster{p, testCluster(t, "proc", e.addr, true)})
			},
			wantStatus: 200, wantBody: "200 from try 2",
			check: func(t *testing.T, e *env, resp *http.Response, x *Exchange) {
				streams := e.proc.snapshot()
				if len(streams) != 2 {
					t.Fatalf("%d ext_proc streams, want one per attempt (2)", len(streams))
				}
				for i, s := range streams {
					if got := s.md.Get("x-sluice-upstream"); len(got) != 1 || got[0] != "provider-p" {
						t.Errorf("stream %d: initial metadata x-sluice-upstream %q", i+1, got)
					}
					rh := s.got[0].GetRequestHeaders().GetHeaders()
					if v, _ := headerOf(rh, "x-envoy-attempt-count"); v != strconv.Itoa(i+1) {
						t.Errorf("stream %d: x-envoy-attempt-count %q", i+1, v)
					}
					if b := s.got[1].GetRequestBody(); string(b.GetBody()) != reqBody || !b.GetEndOfStream() {
						t.Errorf("stream %d: request body %q (each attempt gets the router's buffered original)", i+1, b.GetBody())
					}
				}
				// Envoy's upstream filters mutate the one downstream header
				// map: the second attempt starts from what the first did.
				if v, ok := headerOf(streams[1].got[0].GetRequestHeaders().GetHeaders(), "x-upstream-try"); !ok || v != "1" {
					t.Errorf("second stream saw x-upstream-try %q, want the first attempt's 1", v)
				}
				ups := e.a.requests()
				if len(ups) != 2 {
					t.Fatalf("%d upstream requests", len(ups))
				}
				for i, u := range ups {
					n := strconv.Itoa(i + 1)
					if u.Body != "rewritten-"+n || u.Header.Get("X-Upstream-Try") != n || u.Header.Get("X-Upstream") != "provider-p" || u.ContentLength != int64(len("rewritten-"+n)) {
						t.Errorf("upstream request %d: body %q x-upstream-try %q x-upstream %q content-length %d", i+1, u.Body, u.Header.Get("X-Upstream-Try"), u.Header.Get("X-Upstream"), u.ContentLength)
					}
				}
				if got := resp.Header.Values("X-Served-By"); len(got) != 1 || got[0] != "try-2" {
					t.Errorf("x-served-by %q: only the answering attempt's response headers reach the client", got)
				}
				attempts := map[int]bool{}
				for _, ev := range x.ExtProc {
					attempts[ev.Attempt] = true
				}
				if !attempts[1] || !attempts[2] || attempts[0] || len(attempts) != 2 {
					t.Errorf("ext_proc events by attempt %v", attempts)
				}
				if v := x.Metadata["sluice"].GetFields()["upstream_try"].GetNumberValue(); v != 2 {
					t.Errorf("dynamic metadata sluice.upstream_try %v: upstream filters share the stream's metadata", v)
				}
				if string(x.Upstream.Body) != "rewritten-2" || x.Upstream.Headers.Value("x-upstream-try") != "2" {
					t.Errorf("recorded upstream %q %q", x.Upstream.Body, x.Upstream.Headers.Value("x-upstream-try"))
				}
			},
		},
		{
			name: "aggregate: Envoy runs the route cluster's chain, so a member's upstream filters do not run",
			setup: func(t *testing.T, e *env) *bootstrapv3.Bootstrap {
				e.a.setHandler(statusSeq(503))
				fb := testCluster(t, "b.fallback", e.b.url, false)
				setUpstreamFilters(t, fb, true, filterOf(t, "ext_proc", upstreamExtProc("proc", "b")))
				return testBootstrap(t, routeTo("agg", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
					ra.RetryPolicy = retryOn("5xx", 1)
					ra.RetryPolicy.RetryPriority = previousPriorities(t, 1)
				}), []*clusterv3.Cluster{testCluster(t, "a", e.a.url, false), fb, aggregateCluster(t, "agg", "a", "b.fallback"), testCluster(t, "proc", e.addr, true)})
			},
			wantStatus: 200, wantBody: "ok",
			check: func(t *testing.T, e *env, _ *http.Response, x *Exchange) {
				if n := len(e.proc.snapshot()); n != 0 {
					t.Errorf("%d ext_proc streams: a member cluster's http_filters must not run behind an aggregate", n)
				}
				if ups := e.b.requests(); len(ups) != 1 || ups[0].Body != reqBody {
					t.Errorf("fallback member got %+v", ups)
				}
				if got := describeAttempts(x); strings.Join(got, ";") != "a 503, retried;b.fallback 200" {
					t.Errorf("attempts %q", got)
				}
			},
		},
		{
			name: "aggregate: its own http_filters run on every attempt, whichever member",
			setup: func(t *testing.T, e *env) *bootstrapv3.Bootstrap {
				e.a.setHandler(statusSeq(503))
				agg := aggregateCluster(t, "agg", "a", "b")
				setUpstreamFilters(t, agg, true, filterOf(t, "ext_proc", upstreamExtProc("proc", "agg")))
				return testBootstrap(t, routeTo("agg", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
					ra.RetryPolicy = retryOn("5xx", 1)
					ra.RetryPolicy.RetryPriority = previousPriorities(t, 1)
				}), []*clusterv3.Cluster{testCluster(t, "a", e.a.url, false), testCluster(t, "b", e.b.url, false), agg, testCluster(t, "proc", e.addr, true)})
			},
			wantStatus: 200, wantBody: "ok",
			check: func(t *testing.T, e *env, resp *http.Response, _ *Exchange) {
				if n := len(e.proc.snapshot()); n != 2 {
					t.Errorf("%d ext_proc streams, want 2", n)
				}
				if ups := e.b.requests(); len(ups) != 1 || ups[0].Body != "rewritten-2" {
					t.Errorf("second member got %+v", ups)
				}
				if resp.Header.Get("X-Served-By") != "try-2" {
					t.Errorf("x-served-by %q", resp.Header.Get("X-Served-By"))
				}
			},
		},
		{
			name: "§1.10 aggregate: a member without a healthy host is skipped; the attempt's request attributes read its host's metadata",
			setup: func(t *testing.T, e *env) *bootstrapv3.Bootstrap {
				const attr = "xds.upstream_host_metadata.filter_metadata['sluice']['provider']"
				withMeta := func(c *clusterv3.Cluster, provider string, health corev3.HealthStatus) *clusterv3.Cluster {
					lb := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0]
					lb.HealthStatus = health
					lb.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"sluice": {Fields: map[string]*structpb.Value{"provider": structpb.NewStringValue(provider)}}}}
					return c
				}
				agg := aggregateCluster(t, "agg", "a", "b")
				ep := upstreamExtProc("proc", "agg")
				ep.RequestAttributes = []string{attr}
				setUpstreamFilters(t, agg, true, filterOf(t, "ext_proc", ep))
				return testBootstrap(t, routeTo("agg", func(ra *routev3.RouteAction, vh *routev3.VirtualHost) {
					ra.RetryPolicy = retryOn("5xx", 1)
					ra.RetryPolicy.RetryPriority = previousPriorities(t, 1)
					vh.IncludeRequestAttemptCount = true
				}), []*clusterv3.Cluster{
					withMeta(testCluster(t, "a", e.a.url, false), "provider-a", corev3.HealthStatus_UNHEALTHY),
					withMeta(testCluster(t, "b", e.b.url, false), "provider-b", corev3.HealthStatus_UNKNOWN),
					agg, testCluster(t, "proc", e.addr, true),
				})
			},
			wantStatus: 200, wantBody: "ok",
			check: func(t *testing.T, e *env, _ *http.Response, x *Exchange) {
				streams := e.proc.snapshot()
				if len(streams) != 1 || len(e.a.requests()) != 0 || len(e.b.requests()) != 1 {
					t.Fatalf("%d streams, a got %d, b got %d; want attempt 1 on the second member", len(streams), len(e.a.requests()), len(e.b.requests()))
				}
				rh := streams[0].got[0]
				if v, _ := headerOf(rh.GetRequestHeaders().GetHeaders(), "x-envoy-attempt-count"); v != "1" {
					t.Errorf("x-envoy-attempt-count %q, want 1: the attempt's number does not name its member", v)
				}
				got := rh.GetAttributes()[ExtProcAttributesKey].AsMap()
				if want := map[string]any{"xds.upstream_host_metadata.filter_metadata['sluice']['provider']": "provider-b"}; !cmp.Equal(want, got) {
					t.Errorf("request attributes %v, want %v", got, want)
				}
				if len(streams[0].got) > 1 && streams[0].got[1].GetAttributes() != nil {
					t.Errorf("attributes sent again on %s", reqKind(streams[0].got[1]))
				}
				if got := describeAttempts(x); strings.Join(got, ";") != "b 200" {
					t.Errorf("attempts %q", got)
				}
			},
		},
		{
			name: "an upstream filter's immediate response is a local reply, never retried",
			setup: func(t *testing.T, e *env) *bootstrapv3.Bootstrap {
				e.proc.immediate = true
				p := testCluster(t, "p", e.a.url, false)
				setUpstreamFilters(t, p, true, filterOf(t, "ext_proc", upstreamExtProc("proc", "p")))
				return testBootstrap(t, routeTo("p", func(ra *routev3.RouteAction, _ *routev3.VirtualHost) {
					ra.RetryPolicy = retryOn("5xx,reset", 2)
				}), []*clusterv3.Cluster{p, testCluster(t, "proc", e.addr, true)})
			},
			wantStatus: 418, wantBody: "refused upstream",
			check: func(t *testing.T, e *env, _ *http.Response, x *Exchange) {
				if n := len(e.a.requests()); n != 0 {
					t.Errorf("the upstream got %d requests", n)
				}
				if len(x.Attempts) != 1 || x.Attempts[0].Request != nil || x.Upstream != nil {
					t.Errorf("attempts %q, upstream %+v", describeAttempts(x), x.Upstream)
				}
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := &env{a: &upstream{}, b: &upstream{}, proc: &upProc{}}
			e.a.url, e.b.url = startHTTP(t, e.a), startHTTP(t, e.b)
			e.addr = startGRPC(t, func(s *grpc.Server) { extprocsvc.RegisterExternalProcessorServer(s, e.proc) })
			em, base := startEmulator(t, c.setup(t, e), Options{})
			resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(reqBody))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := readAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.wantStatus || got != c.wantBody {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, got, c.wantStatus, c.wantBody)
			}
			x := waitExchanges(t, em, 1)[0]
			if t.Failed() {
				for _, ev := range x.ExtProc {
					t.Logf("ext_proc attempt %d: %s %v %v", ev.Attempt, ev.Event, reqKindOrNil(ev.Sent), respKindOrNil(ev.Received))
				}
				t.Logf("attempts %q details %q", describeAttempts(x), x.Details)
			}
			c.check(t, e, resp, x)
		})
	}
}

func reqKindOrNil(m *extprocsvc.ProcessingRequest) string {
	if m == nil {
		return ""
	}
	return reqKind(m)
}

func respKindOrNil(m *extprocsvc.ProcessingResponse) string {
	if m == nil {
		return ""
	}
	return respKind(m)
}
