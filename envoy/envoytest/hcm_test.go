package envoytest

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	overloadv3 "github.com/envoyproxy/go-control-plane/envoy/config/overload/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	fixedheapv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/fixed_heap/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rawHTTP sends raw bytes on a new connection and reads one response. It
// also reports whether the server closed the connection after it.
func rawHTTP(t *testing.T, base, raw string) (*http.Response, string, bool) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	// After the response, a closed connection reads EOF at once; an open
	// one times out.
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err = br.ReadByte()
	return resp, string(body), err == io.EOF
}

// okUpstream answers 200 "ok", recording the request headers it got.
func okUpstream(t *testing.T, got chan<- http.Header) string {
	return startHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if got != nil {
			select {
			case got <- r.Header.Clone():
			default:
			}
		}
		io.WriteString(w, "ok")
	}))
}

func lastExchange(t *testing.T, e *Emulator, n int) *Exchange {
	t.Helper()
	xs := waitExchanges(t, e, n)
	return xs[n-1]
}

// TestHTTP1Codec: what Envoy's HTTP/1 codec refuses of a request Go's
// server accepts — a method it does not know, a byte outside the URL's
// characters, a header block or a header count over the connection
// manager's limits — is a local reply with the codec's status, its reason
// phrase as the body and the codec's details (sendProtocolError), before
// the stream has request headers: local_reply_config applies, but no
// mapper that matches on :path; the connection closes after it. Then the
// connection manager's own: HTTP/1.0 gets 426 (unless accept_http_10),
// an upgrade 403, and an h2c upgrade is served as a plain request.
func TestHTTP1Codec(t *testing.T) {
	got := make(chan http.Header, 1)
	up := okUpstream(t, got)
	lr := &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{
		// Never matches a codec reply: no request headers.
		{Filter: &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{AndFilter: &accesslogv3.AndFilter{Filters: []*accesslogv3.AccessLogFilter{
			celFilter(t, "response.code_details.startsWith('http1.')"), pathRegexFilter("/.*"),
		}}}}, BodyFormatOverride: textBody(`{"path":true}`, "application/json")},
		{Filter: celFilter(t, "response.code_details == 'http1.headers_too_large' && response.code == 431"), BodyFormatOverride: textBody(`{"too":"large"}`, "application/json")},
	}}
	newEmu := func(fn func(*hcmv3.HttpConnectionManager)) string {
		b := withHCM(t, testBootstrap(t, routeAll("up"), []*clusterv3.Cluster{testCluster(t, "up", up, false)}), 0, func(h *hcmv3.HttpConnectionManager) {
			h.LocalReplyConfig = lr
			if fn != nil {
				fn(h)
			}
		})
		_, base := startEmulator(t, b, Options{})
		return base
	}
	base := newEmu(nil)
	headers := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "X-H%d: v\r\n", i)
		}
		return b.String()
	}
	for _, c := range []struct {
		name, raw   string
		status      int
		body, ctype string
		closes      bool
	}{
		{"a lower-case method", "get /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 400, "Bad Request", "text/plain", true},
		{"an unknown method", "FETCH /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 400, "Bad Request", "text/plain", true},
		{"a known first letter, unknown method", "POSTX /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 400, "Bad Request", "text/plain", true},
		{"a byte past '~' in the path", "GET /v1/m\xc3\xb6dels HTTP/1.1\r\nHost: x\r\n\r\n", 400, "Bad Request", "text/plain", true},
		{"headers over max_request_headers_kb", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 61*1024) + "\r\n\r\n", 431, `{"too":"large"}`, "application/json", true},
		{"more headers than max_headers_count", "GET / HTTP/1.1\r\nHost: x\r\n" + headers(100) + "\r\n", 431, "Request Header Fields Too Large", "text/plain", true},
		{"as many headers as max_headers_count", "GET / HTTP/1.1\r\nHost: x\r\n" + headers(99) + "\r\n", 200, "ok", "", false},
		{"HTTP/1.0", "GET / HTTP/1.0\r\nHost: x\r\n\r\n", 426, "", "", true},
		{"a WebSocket upgrade", "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", 403, "", "", true},
		{"an h2c upgrade, served as a plain request", "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n", 200, "ok", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body, closed := rawHTTP(t, base, c.raw)
			if resp.StatusCode != c.status || body != c.body || !strings.HasPrefix(resp.Header.Get("Content-Type"), c.ctype) || closed != c.closes {
				t.Errorf("%d %q %q closed=%v, want %d %q %q closed=%v", resp.StatusCode, resp.Header.Get("Content-Type"), body, closed, c.status, c.ctype, c.body, c.closes)
			}
		})
	}
	select {
	case h := <-got:
		if h.Get("Upgrade") != "" || h.Get("Http2-Settings") != "" || h.Get("Connection") != "" {
			t.Errorf("the h2c upgrade reached the upstream: %v", h)
		}
	default:
		t.Error("the upstream saw no request")
	}

	t.Run("details", func(t *testing.T) {
		e, base := startEmulator(t, withHCM(t, testBootstrap(t, routeAll("up"), []*clusterv3.Cluster{testCluster(t, "up", up, false)}), 0, func(*hcmv3.HttpConnectionManager) {}), Options{})
		for i, c := range []struct{ raw, details, flags string }{
			{"get / HTTP/1.1\r\nHost: x\r\n\r\n", "http1.codec_error", "DPE"},
			{"GET / HTTP/1.1\r\nHost: x\r\n" + headers(101) + "\r\n", "http1.too_many_headers", "DPE"},
			{"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 61*1024) + "\r\n\r\n", "http1.headers_too_large", "DPE"},
			{"GET / HTTP/1.0\r\n\r\n", "low_version", ""},
			{"GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n", "upgrade_failed", ""},
		} {
			rawHTTP(t, base, c.raw)
			x := lastExchange(t, e, i+1)
			if x.Details != c.details || x.ResponseFlags != c.flags {
				t.Errorf("%q: details %q flags %q, want %q %q", c.raw[:20], x.Details, x.ResponseFlags, c.details, c.flags)
			}
		}
	})

	t.Run("accept_http_10 and allow_custom_methods", func(t *testing.T) {
		base := newEmu(func(h *hcmv3.HttpConnectionManager) {
			h.HttpProtocolOptions = &corev3.Http1ProtocolOptions{AcceptHttp_10: true, AllowCustomMethods: true}
		})
		for _, raw := range []string{"GET / HTTP/1.0\r\nHost: x\r\n\r\n", "FETCH / HTTP/1.1\r\nHost: x\r\n\r\n"} {
			if resp, body, _ := rawHTTP(t, base, raw); resp.StatusCode != 200 || body != "ok" {
				t.Errorf("%q: %d %q", raw[:10], resp.StatusCode, body)
			}
		}
	})
}

// TestHTTP2HeaderOverflow: over HTTP/2 a header block past the limits is a
// stream reset (ConnectionImpl::saveHeader), no reply, details
// http2.too_many_headers.
func TestHTTP2HeaderOverflow(t *testing.T) {
	up := okUpstream(t, nil)
	e, base := startEmulator(t, testBootstrap(t, routeAll("up"), []*clusterv3.Cluster{testCluster(t, "up", up, false)}), Options{})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, TLSClientConfig: &tls.Config{}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	req, _ := http.NewRequest("GET", base+"/", nil)
	req.Header.Set("x-big", strings.Repeat("a", 61*1024))
	resp, err := client.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got %d, want a stream reset", resp.StatusCode)
	}
	x := lastExchange(t, e, 1)
	if !x.Reset || x.Details != "http2.too_many_headers" || x.ResponseFlags != "DPE" {
		t.Errorf("reset %v details %q flags %q", x.Reset, x.Details, x.ResponseFlags)
	}
	// Within the limits it is served.
	req, _ = http.NewRequest("GET", base+"/", nil)
	req.Header.Set("x-big", strings.Repeat("a", 50*1024))
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("within the limits: %d", resp.StatusCode)
	}
}

// TestStreamTimeouts: the connection manager's stream idle timeout and
// request timeout (onIdleTimeout, onRequestTimeout): 408 while the client
// has not sent the whole request, 504 once it has; a route's idle_timeout
// replaces the listener's stream_idle_timeout (refreshIdleTimeout), 0
// turning it off; the request timer stops once the router has the whole
// request.
func TestStreamTimeouts(t *testing.T) {
	slow := slowUpstream(t)
	late := startHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(300 * time.Millisecond)
		io.WriteString(w, "late")
	}))
	route := func(idle *durationpb.Duration) *routev3.RouteConfiguration {
		rc := routeAll("up")
		ra := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
		ra.Timeout = durationpb.New(0)
		ra.IdleTimeout = idle
		return rc
	}
	for _, c := range []struct {
		name        string
		upstream    string
		routeIdle   *durationpb.Duration
		hcm         func(*hcmv3.HttpConnectionManager)
		partial     bool // send half the body, then nothing
		status      int
		body        string
		details     string
		flags       string
		connClosing bool
	}{
		{name: "the listener's idle timeout, request incomplete: 408", upstream: slow, partial: true,
			hcm:    func(h *hcmv3.HttpConnectionManager) { h.StreamIdleTimeout = durationpb.New(100 * time.Millisecond) },
			status: 408, body: "stream timeout", details: "stream_idle_timeout", flags: "SI", connClosing: true},
		{name: "the listener's idle timeout, request complete: 504", upstream: slow,
			hcm:    func(h *hcmv3.HttpConnectionManager) { h.StreamIdleTimeout = durationpb.New(100 * time.Millisecond) },
			status: 504, body: "stream timeout", details: "stream_idle_timeout", flags: "SI"},
		{name: "the route's idle_timeout replaces the listener's", upstream: slow, routeIdle: durationpb.New(100 * time.Millisecond),
			hcm:    func(h *hcmv3.HttpConnectionManager) { h.StreamIdleTimeout = durationpb.New(time.Hour) },
			status: 504, body: "stream timeout", details: "stream_idle_timeout", flags: "SI"},
		{name: "a route idle_timeout of 0 turns it off", upstream: late, routeIdle: durationpb.New(0),
			hcm:    func(h *hcmv3.HttpConnectionManager) { h.StreamIdleTimeout = durationpb.New(100 * time.Millisecond) },
			status: 200, body: "late", details: "via_upstream"},
		{name: "request_timeout, request incomplete: 408", upstream: slow, partial: true,
			hcm:    func(h *hcmv3.HttpConnectionManager) { h.RequestTimeout = durationpb.New(100 * time.Millisecond) },
			status: 408, body: "request timeout", details: "request_overall_timeout", connClosing: true},
		{name: "request_timeout stops once the router has the request", upstream: late,
			hcm:    func(h *hcmv3.HttpConnectionManager) { h.RequestTimeout = durationpb.New(100 * time.Millisecond) },
			status: 200, body: "late", details: "via_upstream"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := withHCM(t, testBootstrap(t, route(c.routeIdle), []*clusterv3.Cluster{testCluster(t, "up", c.upstream, false)}), 0, c.hcm)
			e, base := startEmulator(t, b, Options{})
			raw := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n"
			if c.partial {
				raw += "ab"
			} else {
				raw += "abcd"
			}
			resp, body, _ := rawHTTP(t, base, raw)
			if resp.StatusCode != c.status || body != c.body {
				t.Errorf("%d %q, want %d %q", resp.StatusCode, body, c.status, c.body)
			}
			if got := resp.Close; got != c.connClosing {
				t.Errorf("connection: close %v, want %v", got, c.connClosing)
			}
			x := lastExchange(t, e, 1)
			if x.Details != c.details || x.ResponseFlags != c.flags {
				t.Errorf("details %q flags %q, want %q %q", x.Details, x.ResponseFlags, c.details, c.flags)
			}
		})
	}
}

// TestClusterNotFoundAfterUpdate: a stream routes with the route table it
// started with, but the router looks the cluster up when it gets the
// request (router.cc, Filter::decodeHeaders): a configuration put in force
// meanwhile without that cluster makes it 503 cluster_not_found, flag NC.
func TestClusterNotFoundAfterUpdate(t *testing.T) {
	up := okUpstream(t, nil)
	release := make(chan struct{})
	checking := make(chan struct{}, 1)
	az := &scriptedAuthz{check: func(ctx context.Context, _ *authv3.CheckRequest) (*authv3.CheckResponse, error) {
		checking <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return okResp(nil), nil
	}}
	azAddr := startGRPC(t, func(s *grpc.Server) { authv3.RegisterAuthorizationServer(s, az) })
	authz := filterOf(t, "authz", &extauthzv3.ExtAuthz{Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: grpcCluster("authz", 5*time.Second)}, TransportApiVersion: corev3.ApiVersion_V3})
	before := testBootstrap(t, routeAll("up"), []*clusterv3.Cluster{testCluster(t, "up", up, false), testCluster(t, "authz", azAddr, true)}, authz)
	after := testBootstrap(t, routeAll("other"), []*clusterv3.Cluster{testCluster(t, "other", up, false), testCluster(t, "authz", azAddr, true)}, authz)
	e, base := startEmulator(t, before, Options{})

	type result struct {
		status int
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.Get(base + "/v1/models")
		if err != nil {
			done <- result{err: err}
			return
		}
		resp.Body.Close()
		done <- result{status: resp.StatusCode}
	}()
	<-checking // the stream has its configuration, and its route to "up"
	cfg, err := e.buildConfig(after)
	if err != nil {
		t.Fatal(err)
	}
	old := e.cfg.Swap(cfg)
	t.Cleanup(func() {
		for _, c := range old.clusters {
			c.close()
		}
	})
	close(release)
	r := <-done
	if r.err != nil || r.status != 503 {
		t.Fatalf("%d %v, want 503", r.status, r.err)
	}
	x := lastExchange(t, e, 1)
	if x.Details != "cluster_not_found" || x.ResponseFlags != "NC" || x.Cluster != "up" {
		t.Errorf("details %q flags %q cluster %q", x.Details, x.ResponseFlags, x.Cluster)
	}
	// A new stream routes with the new table.
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("after the update: %d", resp.StatusCode)
	}
}

func overloadBootstrap(t *testing.T, up string, om *overloadv3.OverloadManager) *bootstrapv3.Bootstrap {
	t.Helper()
	b := testBootstrap(t, routeAll("up"), []*clusterv3.Cluster{testCluster(t, "up", up, false)})
	b.OverloadManager = om
	return b
}

func fixedHeap(t *testing.T) *overloadv3.ResourceMonitor {
	return &overloadv3.ResourceMonitor{Name: FixedHeapMonitor, ConfigType: &overloadv3.ResourceMonitor_TypedConfig{
		TypedConfig: mustAny(t, &fixedheapv3.FixedHeapConfig{MaxHeapSizeBytes: 1 << 30}),
	}}
}

func threshold(monitor string, v float64) *overloadv3.Trigger {
	return &overloadv3.Trigger{Name: monitor, TriggerOneof: &overloadv3.Trigger_Threshold{Threshold: &overloadv3.ThresholdTrigger{Value: v}}}
}

// TestOverloadManager: stop_accepting_requests, once the pressure of a
// monitor reaches its trigger, answers every new request 503 "envoy
// overloaded" (details overload) before any filter; below it requests are
// served again. What the emulator does not implement, or Envoy refuses,
// fails New.
func TestOverloadManager(t *testing.T) {
	up := okUpstream(t, nil)
	om := &overloadv3.OverloadManager{
		RefreshInterval:  durationpb.New(250 * time.Millisecond),
		ResourceMonitors: []*overloadv3.ResourceMonitor{fixedHeap(t)},
		Actions: []*overloadv3.OverloadAction{
			{Name: "envoy.overload_actions.shrink_heap", Triggers: []*overloadv3.Trigger{threshold(FixedHeapMonitor, 0.95)}},
			{Name: StopAcceptingRequests, Triggers: []*overloadv3.Trigger{threshold(FixedHeapMonitor, 0.98)}},
		},
	}
	e, base := startEmulator(t, overloadBootstrap(t, up, om), Options{})
	get := func() (int, string) {
		resp, err := http.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		pressure float64
		status   int
		body     string
	}{{0.97, 200, "ok"}, {0.98, 503, "envoy overloaded"}, {1, 503, "envoy overloaded"}, {0.5, 200, "ok"}} {
		if err := e.SetResourcePressure(FixedHeapMonitor, c.pressure); err != nil {
			t.Fatal(err)
		}
		if st, body := get(); st != c.status || body != c.body {
			t.Errorf("pressure %v: %d %q, want %d %q", c.pressure, st, body, c.status, c.body)
		}
	}
	for _, x := range waitExchanges(t, e, 4) {
		if want := map[int]string{200: "via_upstream", 503: "overload"}[x.Status]; x.Details != want {
			t.Errorf("%d: details %q, want %q", x.Status, x.Details, want)
		}
	}
	if err := e.SetResourcePressure("envoy.resource_monitors.other", 1); err == nil {
		t.Error("a pressure for a monitor the bootstrap lacks was accepted")
	}

	// A scaled trigger: linear between its thresholds.
	tr := olTrigger{scaled: true, scaling: 0.8, saturation: 0.9}
	for p, want := range map[float64]float64{0.5: 0, 0.8: 0, 0.85: 0.5, 0.9: 1, 1: 1} {
		if got := tr.state(p); got < want-1e-9 || got > want+1e-9 {
			t.Errorf("scaled trigger at %v: %v, want %v", p, got, want)
		}
	}

	for _, c := range []struct {
		name string
		om   func() *overloadv3.OverloadManager
		want string
	}{
		{"another monitor", func() *overloadv3.OverloadManager {
			return &overloadv3.OverloadManager{ResourceMonitors: []*overloadv3.ResourceMonitor{{Name: "envoy.resource_monitors.downstream_connections"}}}
		}, "is not supported by the emulator"},
		{"another action", func() *overloadv3.OverloadManager {
			return &overloadv3.OverloadManager{ResourceMonitors: []*overloadv3.ResourceMonitor{fixedHeap(t)},
				Actions: []*overloadv3.OverloadAction{{Name: "envoy.overload_actions.disable_http_keepalive"}}}
		}, "is not supported by the emulator"},
		{"a trigger naming no monitor", func() *overloadv3.OverloadManager {
			return &overloadv3.OverloadManager{Actions: []*overloadv3.OverloadAction{{Name: StopAcceptingRequests, Triggers: []*overloadv3.Trigger{threshold(FixedHeapMonitor, 0.9)}}}}
		}, "Unknown trigger resource envoy.resource_monitors.fixed_heap for overload action"},
		{"a duplicate monitor", func() *overloadv3.OverloadManager {
			return &overloadv3.OverloadManager{ResourceMonitors: []*overloadv3.ResourceMonitor{fixedHeap(t), fixedHeap(t)}}
		}, "Duplicate resource monitor"},
		{"scaling above saturation", func() *overloadv3.OverloadManager {
			return &overloadv3.OverloadManager{ResourceMonitors: []*overloadv3.ResourceMonitor{fixedHeap(t)}, Actions: []*overloadv3.OverloadAction{{Name: StopAcceptingRequests,
				Triggers: []*overloadv3.Trigger{{Name: FixedHeapMonitor, TriggerOneof: &overloadv3.Trigger_Scaled{Scaled: &overloadv3.ScaledTrigger{ScalingThreshold: 0.9, SaturationThreshold: 0.8}}}}}}}
		}, "scaling_threshold must be less than saturation_threshold"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := New(overloadBootstrap(t, up, c.om()), Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestHCMRefusals: the connection manager settings the emulator does not
// implement fail New, naming the field.
func TestHCMRefusals(t *testing.T) {
	up := okUpstream(t, nil)
	for _, c := range []struct {
		name string
		fn   func(*hcmv3.HttpConnectionManager)
		want string
	}{
		{"request_headers_timeout", func(h *hcmv3.HttpConnectionManager) { h.RequestHeadersTimeout = durationpb.New(time.Second) }, "request_headers_timeout"},
		{"upgrade_configs", func(h *hcmv3.HttpConnectionManager) {
			h.UpgradeConfigs = []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket", Enabled: wrapperspb.Bool(true)}}
		}, "upgrade_configs"},
		{"max_stream_duration", func(h *hcmv3.HttpConnectionManager) {
			h.CommonHttpProtocolOptions = &corev3.HttpProtocolOptions{MaxStreamDuration: durationpb.New(time.Second)}
		}, "max_stream_duration"},
		{"headers_with_underscores_action", func(h *hcmv3.HttpConnectionManager) {
			h.CommonHttpProtocolOptions = &corev3.HttpProtocolOptions{HeadersWithUnderscoresAction: corev3.HttpProtocolOptions_REJECT_REQUEST}
		}, "headers_with_underscores_action"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := withHCM(t, testBootstrap(t, routeAll("up"), []*clusterv3.Cluster{testCluster(t, "up", up, false)}), 0, c.fn)
			if _, err := New(b, Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v, want an error naming %s", err, c.want)
			}
		})
	}
}

// TestRequestTimeoutWhileFiltersHold: a request the client has sent
// whole, but that a filter still holds when request_timeout expires, gets
// 504 "request timeout" (Utility::maybeRequestTimeoutCode: the remote
// side is complete); the upstream is never called.
func TestRequestTimeoutWhileFiltersHold(t *testing.T) {
	called := make(chan http.Header, 1)
	up := okUpstream(t, called)
	az := &scriptedAuthz{check: func(ctx context.Context, _ *authv3.CheckRequest) (*authv3.CheckResponse, error) {
		<-ctx.Done() // longer than request_timeout
		return nil, ctx.Err()
	}}
	azAddr := startGRPC(t, func(s *grpc.Server) { authv3.RegisterAuthorizationServer(s, az) })
	authz := filterOf(t, "authz", &extauthzv3.ExtAuthz{Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: grpcCluster("authz", 5*time.Second)}, TransportApiVersion: corev3.ApiVersion_V3})
	b := withHCM(t, testBootstrap(t, routeAll("up"), []*clusterv3.Cluster{testCluster(t, "up", up, false), testCluster(t, "authz", azAddr, true)}, authz), 0,
		func(h *hcmv3.HttpConnectionManager) { h.RequestTimeout = durationpb.New(100 * time.Millisecond) })
	e, base := startEmulator(t, b, Options{})
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := readAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 504 || body != "request timeout" {
		t.Errorf("%d %q, want 504 %q", resp.StatusCode, body, "request timeout")
	}
	if x := lastExchange(t, e, 1); x.Details != "request_overall_timeout" {
		t.Errorf("details %q", x.Details)
	}
	select {
	case <-called:
		t.Error("the upstream was called")
	default:
	}
}
