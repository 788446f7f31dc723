package envoytest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// scriptedAuthz is an ext_authz server whose answer is a function.
type scriptedAuthz struct {
	authv3.UnimplementedAuthorizationServer
	check func(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error)
}

func (s *scriptedAuthz) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return s.check(ctx, req)
}

// echoUpstream records what reached it and answers 200 with a JSON echo.
type echoUpstream struct {
	mu   sync.Mutex
	reqs []echoed
}

type echoed struct {
	Method, Path string
	Header       http.Header
	Body         string
}

func (u *echoUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.reqs = append(u.reqs, echoed{r.Method, r.URL.RequestURI(), r.Header.Clone(), string(b)})
	u.mu.Unlock()
	w.Header().Set("content-type", "application/json")
	w.Header().Set("x-upstream", "yes")
	json.NewEncoder(w).Encode(map[string]string{"path": r.URL.Path, "body": string(b)})
}

func (u *echoUpstream) received() []echoed {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]echoed(nil), u.reqs...)
}

func hv(k, v string, appendV *bool) *corev3.HeaderValueOption {
	o := &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}}
	if appendV != nil {
		o.Append = wrapperspb.Bool(*appendV)
	}
	return o
}

var (
	yes = func() *bool { b := true; return &b }()
	no  = func() *bool { b := false; return &b }()
)

func okResp(ok *authv3.OkHttpResponse) *authv3.CheckResponse {
	if ok == nil {
		ok = &authv3.OkHttpResponse{}
	}
	return &authv3.CheckResponse{Status: &rpcstatus.Status{}, HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: ok}}
}

type authzCase struct {
	name   string // names the envoy-protocol.md item covered
	cfg    func(*extauthzv3.ExtAuthz)
	routes func(upstream, other string) *routev3.RouteConfiguration
	check  func(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error)
	// request
	method, path, body string
	headers            [][2]string
	// expectations
	wantStatus   int
	wantBody     string // substring; "" = not checked
	wantHeaders  map[string]string
	noHeaders    []string
	wantUpstream func(t *testing.T, got []echoed, other []echoed)
	wantChecks   int
	inspect      func(t *testing.T, x *Exchange)
}

func TestExtAuthzClient(t *testing.T) {
	cases := []authzCase{
		{
			name:   "§2 CheckRequest: pseudo-headers, lower-case keys, duplicates comma-joined, numeric id, path with query, host, protocol, addresses",
			check:  func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) { return okResp(nil), nil },
			method: "POST", path: "/v1/chat/completions?trace=1", body: `{"model":"m"}`,
			headers:    [][2]string{{"Authorization", "Bearer a"}, {"Authorization", "Bearer b"}, {"X-Custom", "1"}, {"X-Custom", "2"}, {"Content-Type", "application/json"}},
			wantStatus: 200, wantChecks: 1,
			inspect: func(t *testing.T, x *Exchange) {
				req := x.Authz[0].Request
				h := req.GetAttributes().GetRequest().GetHttp()
				if h.GetId() == "" || strings.Trim(h.GetId(), "0123456789") != "" {
					t.Errorf("http.id %q is not numeric", h.GetId())
				}
				if h.GetMethod() != "POST" || h.GetPath() != "/v1/chat/completions?trace=1" || h.GetScheme() != "http" || h.GetProtocol() != "HTTP/1.1" {
					t.Errorf("method/path/scheme/protocol = %q %q %q %q", h.GetMethod(), h.GetPath(), h.GetScheme(), h.GetProtocol())
				}
				if h.GetHost() != h.GetHeaders()[":authority"] || !strings.HasPrefix(h.GetHost(), "127.0.0.1:") {
					t.Errorf("host %q, :authority %q", h.GetHost(), h.GetHeaders()[":authority"])
				}
				for k, want := range map[string]string{":method": "POST", ":path": "/v1/chat/completions?trace=1", ":scheme": "http", "authorization": "Bearer a,Bearer b", "x-custom": "1,2", "content-type": "application/json", "x-forwarded-proto": "http"} {
					if got := h.GetHeaders()[k]; got != want {
						t.Errorf("headers[%q] = %q, want %q", k, got, want)
					}
				}
				if _, ok := h.GetHeaders()["x-request-id"]; !ok {
					t.Error("x-request-id missing (Envoy adds it before filters)")
				}
				if h.GetQuery() != "" || h.GetFragment() != "" {
					t.Error("query and fragment must be empty")
				}
				if a := req.GetAttributes().GetSource().GetAddress().GetSocketAddress(); a.GetAddress() != "127.0.0.1" || a.GetPortValue() == 0 {
					t.Errorf("source = %v", a)
				}
				if a := req.GetAttributes().GetDestination().GetAddress().GetSocketAddress(); a.GetAddress() != "127.0.0.1" || a.GetPortValue() == 0 {
					t.Errorf("destination = %v", a)
				}
			},
		},
		{
			name: "§2 context_extensions from the route's ExtAuthzPerRoute",
			routes: func(up, _ string) *routev3.RouteConfiguration {
				rc := routeAll(up)
				rc.VirtualHosts[0].Routes[0].TypedPerFilterConfig = map[string]*anypb.Any{"authz": mustAny(t, &extauthzv3.ExtAuthzPerRoute{
					Override: &extauthzv3.ExtAuthzPerRoute_CheckSettings{CheckSettings: &extauthzv3.CheckSettings{ContextExtensions: map[string]string{"route": "chat"}}},
				})}
				return rc
			},
			check:      func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) { return okResp(nil), nil },
			wantStatus: 200, wantChecks: 1,
			inspect: func(t *testing.T, x *Exchange) {
				if diff := cmp.Diff(map[string]string{"route": "chat"}, x.Authz[0].Request.GetAttributes().GetContextExtensions()); diff != "" {
					t.Error(diff)
				}
			},
		},
		{
			name: "§2 skipped entirely when no route matched",
			routes: func(up, _ string) *routev3.RouteConfiguration {
				rc := routeAll(up)
				rc.VirtualHosts[0].Routes[0].Match.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: "/v1/"}
				return rc
			},
			check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return nil, errors.New("must not be called")
			},
			path:       "/elsewhere",
			wantStatus: 404, wantChecks: 0,
			wantUpstream: func(t *testing.T, got, _ []echoed) {
				if len(got) != 0 {
					t.Errorf("upstream reached %d times", len(got))
				}
			},
		},
		{
			name: "§2 OK: headers via value; append=true is appendCopy, skipped when absent; else setCopy",
			check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return okResp(&authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{
					hv("x-set", "new", nil), hv("x-existing", "replaced", no), hv("x-joined", "more", yes), hv("x-absent", "never", yes),
					{Header: &corev3.HeaderValue{Key: "x-raw-only", RawValue: []byte("raw")}},
				}}), nil
			},
			headers:    [][2]string{{"X-Existing", "old"}, {"X-Joined", "first"}},
			wantStatus: 200, wantChecks: 1,
			wantUpstream: func(t *testing.T, got, _ []echoed) {
				h := got[0].Header
				for k, want := range map[string]string{"X-Set": "new", "X-Existing": "replaced", "X-Joined": "first,more", "X-Absent": "", "X-Raw-Only": ""} {
					if h.Get(k) != want {
						t.Errorf("upstream %s = %q, want %q", k, h.Get(k), want)
					}
				}
				if _, ok := h["X-Raw-Only"]; !ok {
					t.Error("a header with only raw_value must still be set (with an empty value)")
				}
			},
		},
		{
			name: "§2 OK: headers_to_remove cannot remove :-headers or host",
			check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return okResp(&authv3.OkHttpResponse{HeadersToRemove: []string{"authorization", ":path", "host", ":authority"}}), nil
			},
			path: "/kept", headers: [][2]string{{"Authorization", "Bearer x"}},
			wantStatus: 200, wantChecks: 1,
			wantUpstream: func(t *testing.T, got, _ []echoed) {
				if got[0].Path != "/kept" || got[0].Header.Get("Authorization") != "" {
					t.Errorf("upstream path %q authorization %q", got[0].Path, got[0].Header.Get("Authorization"))
				}
			},
		},
		{
			name: "§2 OK: response_headers_to_add with append and append_action",
			check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				act := func(k, v string, a corev3.HeaderValueOption_HeaderAppendAction) *corev3.HeaderValueOption {
					return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}, AppendAction: a}
				}
				return okResp(&authv3.OkHttpResponse{ResponseHeadersToAdd: []*corev3.HeaderValueOption{
					act("x-upstream", "added", corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD),
					act("content-type", "text/nope", corev3.HeaderValueOption_ADD_IF_ABSENT),
					act("x-absent", "nope", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS),
					act("x-new", "yes", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
					hv("x-set-by-append-false", "v", no),
				}}), nil
			},
			wantStatus: 200, wantChecks: 1,
			wantHeaders: map[string]string{"x-upstream": "yes, added", "content-type": "application/json", "x-new": "yes", "x-set-by-append-false": "v"},
			noHeaders:   []string{"x-absent"},
		},
		{
			name: "§2 OK: query parameters set/remove rewrite :path",
			check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return okResp(&authv3.OkHttpResponse{
					QueryParametersToSet:    []*corev3.QueryParameter{{Key: "api-version", Value: "2024-10-21"}},
					QueryParametersToRemove: []string{"secret"},
				}), nil
			},
			path:       "/v1/x?secret=1&keep=2",
			wantStatus: 200, wantChecks: 1,
			wantUpstream: func(t *testing.T, got, _ []echoed) {
				if got[0].Path != "/v1/x?api-version=2024-10-21&keep=2" {
					t.Errorf("upstream path %q", got[0].Path)
				}
			},
		},
		{
			name: "§2 OK: dynamic_metadata lands in envoy.filters.http.ext_authz with ext_authz_duration; ok_response.dynamic_metadata overrides the top level",
			check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				top, _ := structpb.NewStruct(map[string]any{"from": "top"})
				inner, _ := structpb.NewStruct(map[string]any{"from": "ok_response", "team": "t"})
				r := okResp(&authv3.OkHttpResponse{DynamicMetadata: inner})
				r.DynamicMetadata = top
				return r, nil
			},
			wantStatus: 200, wantChecks: 1,
			inspect: func(t *testing.T, x *Exchange) {
				m := x.Metadata[AuthzNamespace].AsMap()
				if m["from"] != "ok_response" || m["team"] != "t" {
					t.Errorf("metadata = %v", m)
				}
				if _, ok := m["ext_authz_duration"]; !ok {
					t.Errorf("ext_authz_duration missing: %v", m)
				}
			},
		},
		{
			name: "§2 Denied: status and body; only non-append headers; same-name replaced; upstream not reached",
			check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return &authv3.CheckResponse{
					Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied)},
					HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
						Status:  &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests},
						Headers: []*corev3.HeaderValueOption{hv("retry-after", "7", no), hv("x-dropped", "1", yes), hv("x-unset-append", "kept", nil), hv("content-type", "application/json", no)},
						Body:    `{"error":"slow down"}`,
					}},
				}, nil
			},
			wantStatus: 429, wantBody: `{"error":"slow down"}`, wantChecks: 1,
			wantHeaders: map[string]string{"retry-after": "7", "x-unset-append": "kept", "content-type": "application/json"},
			noHeaders:   []string{"x-dropped"},
			wantUpstream: func(t *testing.T, got, _ []echoed) {
				if len(got) != 0 {
					t.Error("a denied request reached the upstream")
				}
			},
			inspect: func(t *testing.T, x *Exchange) {
				if x.Details != "ext_authz_denied" {
					t.Errorf("details %q", x.Details)
				}
			},
		},
		{
			name: "§2 Denied without a status: 403",
			check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied)}}, nil
			},
			wantStatus: 403, wantChecks: 1,
		},
		{
			name: "§2 Error (transport): status_on_error defaults to 403",
			check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return nil, status.Error(codes.Unavailable, "down")
			},
			wantStatus: 403, wantChecks: 1,
			inspect: func(t *testing.T, x *Exchange) {
				if x.Details != "ext_authz_error" || x.Authz[0].Err == nil {
					t.Errorf("details %q err %v", x.Details, x.Authz[0].Err)
				}
			},
		},
		{
			name: "§2 Error: configured status_on_error",
			cfg: func(c *extauthzv3.ExtAuthz) {
				c.StatusOnError = &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}
			},
			check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return nil, status.Error(codes.Internal, "boom")
			},
			wantStatus: 503, wantChecks: 1,
		},
		{
			name: "§2 Error: status_on_error outside 100-511 becomes 403",
			cfg:  func(c *extauthzv3.ExtAuthz) { c.StatusOnError = &typev3.HttpStatus{Code: 599} },
			check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return nil, status.Error(codes.Internal, "boom")
			},
			wantStatus: 403, wantChecks: 1,
		},
		{
			name: "§2 Error: error_response (v1.37) supplies status and body",
			check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return &authv3.CheckResponse{
					Status: &rpcstatus.Status{Code: int32(codes.Unavailable)},
					HttpResponse: &authv3.CheckResponse_ErrorResponse{ErrorResponse: &authv3.DeniedHttpResponse{
						Status: &typev3.HttpStatus{Code: typev3.StatusCode_BadGateway}, Body: "authz backend down",
					}},
				}, nil
			},
			wantStatus: 502, wantBody: "authz backend down", wantChecks: 1,
		},
		{
			name: "§2 Error: failure_mode_allow continues and adds x-envoy-auth-failure-mode-allowed",
			cfg: func(c *extauthzv3.ExtAuthz) {
				c.FailureModeAllow, c.FailureModeAllowHeaderAdd = true, true
			},
			check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return nil, status.Error(codes.Unavailable, "down")
			},
			wantStatus: 200, wantChecks: 1,
			wantUpstream: func(t *testing.T, got, _ []echoed) {
				if got[0].Header.Get(authzFailureHeader) != "true" {
					t.Errorf("upstream headers %v", got[0].Header)
				}
			},
		},
		{
			name: "§2 timeout: grpc_service.timeout expiry is an error",
			cfg:  func(c *extauthzv3.ExtAuthz) { c.GetGrpcService().Timeout = durationMs(30) },
			check: func(ctx context.Context, _ *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				<-ctx.Done() // answer only when Envoy gives up
				return nil, ctx.Err()
			},
			wantStatus: 403, wantChecks: 1,
			inspect: func(t *testing.T, x *Exchange) {
				if status.Code(x.Authz[0].Err) != codes.DeadlineExceeded {
					t.Errorf("err = %v, want DeadlineExceeded", x.Authz[0].Err)
				}
			},
		},
		{
			name: "§2 clear_route_cache: re-routes on a header the OK response set",
			cfg:  func(c *extauthzv3.ExtAuthz) { c.ClearRouteCache = true },
			routes: func(up, other string) *routev3.RouteConfiguration {
				rc := routeAll(up)
				r := &routev3.Route{
					Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}, Headers: []*routev3.HeaderMatcher{{
						Name: "x-route", HeaderMatchSpecifier: &routev3.HeaderMatcher_ExactMatch{ExactMatch: "other"},
					}}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: other}}},
				}
				rc.VirtualHosts[0].Routes = append([]*routev3.Route{r}, rc.VirtualHosts[0].Routes...)
				return rc
			},
			check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return okResp(&authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{hv("x-route", "other", nil)}}), nil
			},
			wantStatus: 200, wantChecks: 1,
			wantUpstream: func(t *testing.T, got, other []echoed) {
				if len(got) != 0 || len(other) != 1 {
					t.Errorf("upstream %d, other %d; want 0, 1", len(got), len(other))
				}
			},
		},
		{
			name: "§2 with_request_body: body buffered into the check, x-envoy-auth-partial-body",
			cfg: func(c *extauthzv3.ExtAuthz) {
				c.WithRequestBody = &extauthzv3.BufferSettings{MaxRequestBytes: 1024}
			},
			check: func(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				h := req.GetAttributes().GetRequest().GetHttp()
				if h.GetBody() != `{"model":"m"}` || h.GetHeaders()[authzPartialHeader] != "false" {
					return nil, status.Errorf(codes.InvalidArgument, "body %q partial %q", h.GetBody(), h.GetHeaders()[authzPartialHeader])
				}
				return okResp(nil), nil
			},
			method: "POST", body: `{"model":"m"}`,
			wantStatus: 200, wantChecks: 1,
			wantUpstream: func(t *testing.T, got, _ []echoed) {
				if got[0].Body != `{"model":"m"}` {
					t.Errorf("upstream body %q", got[0].Body)
				}
			},
		},
		{
			name:   "§2 with_request_body: over max_request_bytes without allow_partial_message is 413",
			cfg:    func(c *extauthzv3.ExtAuthz) { c.WithRequestBody = &extauthzv3.BufferSettings{MaxRequestBytes: 8} },
			check:  func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) { return okResp(nil), nil },
			method: "POST", body: strings.Repeat("x", 100),
			wantStatus: 413, wantChecks: 0,
		},
		{
			name: "§2 with_request_body: allow_partial_message sends the first max_request_bytes, partial=true; the upstream gets all",
			cfg: func(c *extauthzv3.ExtAuthz) {
				c.WithRequestBody = &extauthzv3.BufferSettings{MaxRequestBytes: 8, AllowPartialMessage: true}
			},
			check: func(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				h := req.GetAttributes().GetRequest().GetHttp()
				if h.GetBody() != "xxxxxxxx" || h.GetHeaders()[authzPartialHeader] != "true" {
					return nil, status.Errorf(codes.InvalidArgument, "body %q partial %q", h.GetBody(), h.GetHeaders()[authzPartialHeader])
				}
				return okResp(nil), nil
			},
			method: "POST", body: strings.Repeat("x", 100),
			wantStatus: 200, wantChecks: 1,
			wantUpstream: func(t *testing.T, got, _ []echoed) {
				if len(got[0].Body) != 100 {
					t.Errorf("upstream body %d bytes", len(got[0].Body))
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runAuthzCase(t, tc) })
	}
}

func durationMs(ms int) *durationpb.Duration {
	return durationpb.New(time.Duration(ms) * time.Millisecond)
}

func runAuthzCase(t *testing.T, tc authzCase) {
	up, other := &echoUpstream{}, &echoUpstream{}
	upAddr, otherAddr := startHTTP(t, up), startHTTP(t, other)
	az := &scriptedAuthz{check: tc.check}
	azAddr := startGRPC(t, func(s *grpc.Server) { authv3.RegisterAuthorizationServer(s, az) })
	cfg := &extauthzv3.ExtAuthz{Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: grpcCluster("authz", -1)}, TransportApiVersion: corev3.ApiVersion_V3}
	if tc.cfg != nil {
		tc.cfg(cfg)
	}
	rc := routeAll("upstream")
	if tc.routes != nil {
		rc = tc.routes("upstream", "other")
	}
	b := testBootstrap(t, rc, []*clusterv3.Cluster{
		testCluster(t, "upstream", upAddr, false), testCluster(t, "other", otherAddr, false), testCluster(t, "authz", azAddr, true),
	}, filterOf(t, "authz", cfg))
	e, base := startEmulator(t, b, Options{})

	method := tc.method
	if method == "" {
		method = "GET"
	}
	path := tc.path
	if path == "" {
		path = "/v1/chat/completions"
	}
	var body io.Reader
	if tc.body != "" {
		body = strings.NewReader(tc.body)
	}
	req, _ := http.NewRequest(method, base+path, body)
	for _, h := range tc.headers {
		req.Header.Add(h[0], h[1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := readAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != tc.wantStatus {
		t.Fatalf("status %d, want %d; body %q", resp.StatusCode, tc.wantStatus, got)
	}
	if tc.wantBody != "" && !strings.Contains(got, tc.wantBody) {
		t.Errorf("body %q lacks %q", got, tc.wantBody)
	}
	for k, want := range tc.wantHeaders {
		if v := strings.Join(resp.Header.Values(k), ", "); v != want {
			t.Errorf("response %s = %q, want %q", k, v, want)
		}
	}
	for _, k := range tc.noHeaders {
		if v, ok := resp.Header[http.CanonicalHeaderKey(k)]; ok {
			t.Errorf("response has %s: %q", k, v)
		}
	}
	x := waitExchanges(t, e, 1)[0]
	if len(x.Authz) != tc.wantChecks {
		t.Errorf("%d checks, want %d", len(x.Authz), tc.wantChecks)
	}
	if tc.wantUpstream != nil {
		tc.wantUpstream(t, up.received(), other.received())
	}
	if tc.inspect != nil {
		tc.inspect(t, x)
	}
}
