package envoytest

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func celFilter(t testing.TB, expr string) *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ExtensionFilter{ExtensionFilter: &accesslogv3.ExtensionFilter{
		Name: celFilterName, ConfigType: &accesslogv3.ExtensionFilter_TypedConfig{TypedConfig: mustAny(t, &celv3.ExpressionFilter{Expression: expr})},
	}}}
}

func pathRegexFilter(re string) *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_HeaderFilter{HeaderFilter: &accesslogv3.HeaderFilter{
		Header: &routev3.HeaderMatcher{Name: ":path", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}},
		}}},
	}}}
}

func textBody(s, ct string) *corev3.SubstitutionFormatString {
	return &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_TextFormat{TextFormat: s}, ContentType: ct}
}

// testLocalReply maps Envoy's 413 (Anthropic's body on /v1/messages…,
// else OpenAI's), any upstream reset (no content_type: text/plain) and
// the route timeout.
func testLocalReply(t testing.TB) *hcmv3.LocalReplyConfig {
	return &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{
		{Filter: &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{AndFilter: &accesslogv3.AndFilter{Filters: []*accesslogv3.AccessLogFilter{
			celFilter(t, "response.code_details == 'request_payload_too_large'"), pathRegexFilter(`/v1/messages([/?].*)?`),
		}}}}, BodyFormatOverride: textBody(`{"type":"error"}`, "application/json")},
		{Filter: celFilter(t, "response.code_details == 'request_payload_too_large'"), BodyFormatOverride: textBody(`{"error":"413"}`, "application/json")},
		{Filter: celFilter(t, "response.code_details.startsWith('upstream_reset_before_response_started')"), BodyFormatOverride: textBody("reset", "")},
		{Filter: celFilter(t, "response.code_details == 'upstream_response_timeout'"), BodyFormatOverride: textBody(`{"error":"504"}`, "application/json")},
	}}
}

// withHCM changes the connection manager of b's listener with fn, and
// sets the listener's buffer limit when limit > 0.
func withHCM(t testing.TB, b *bootstrapv3.Bootstrap, limit uint32, fn func(*hcmv3.HttpConnectionManager)) *bootstrapv3.Bootstrap {
	t.Helper()
	l := b.GetStaticResources().GetListeners()[0]
	f := l.GetFilterChains()[0].GetFilters()[0]
	hcm := &hcmv3.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	fn(hcm)
	f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, hcm)}
	if limit > 0 {
		l.PerConnectionBufferLimitBytes = wrapperspb.UInt32(limit)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLocalReplyConfig: the mappers rewrite exactly the local replies
// whose details they name — Envoy's own (the buffer's 413, the router's
// 503 and 504) and an ext_proc ImmediateResponse that happens to carry
// such details, since Envoy sends those through the same rewrite — and
// leave every other reply (ext_proc's own, a direct response) and every
// upstream response as they were.
func TestLocalReplyConfig(t *testing.T) {
	dead := closedAddr(t)
	slow := slowUpstream(t)
	up := startHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "upstream")
	}))
	proc := &procServer{}
	proc.setScript(func(c *procConn) error {
		return c.replyAll(func(req *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingResponse {
			for _, h := range req.GetRequestHeaders().GetHeaders().GetHeaders() {
				if h.GetKey() == "x-test-deny" {
					return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocsvc.ImmediateResponse{
						Status:  &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests},
						Headers: &extprocsvc.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "content-type", RawValue: []byte("application/json")}}}},
						Body:    []byte(`{"mine":true}`),
						Details: string(h.GetRawValue()),
					}}}
				}
			}
			return nil
		})
	})
	procAddr := startGRPC(t, func(s *grpc.Server) { extprocsvc.RegisterExternalProcessorServer(s, proc) })
	route := func(prefix, cluster string, timeout time.Duration) *routev3.Route {
		return &routev3.Route{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}, Timeout: durationpb.New(timeout)}}}
	}
	rc := &routev3.RouteConfiguration{Name: "r", VirtualHosts: []*routev3.VirtualHost{{
		Name: "all", Domains: []string{"*"},
		Routes: []*routev3.Route{
			route("/dead", "dead", 0),
			route("/slow", "slow", 50*time.Millisecond),
			{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/direct"}},
				Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 404, Body: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "plain"}}}}},
			route("/", "up", 0),
		},
	}}}
	ep := &extprocv3.ExternalProcessor{
		GrpcService:    grpcCluster("proc", -1),
		ProcessingMode: &extprocv3.ProcessingMode{RequestBodyMode: extprocv3.ProcessingMode_BUFFERED, ResponseHeaderMode: extprocv3.ProcessingMode_SKIP},
	}
	b := testBootstrap(t, rc, []*clusterv3.Cluster{
		testCluster(t, "dead", dead, false), testCluster(t, "slow", slow, false), testCluster(t, "up", up, false), testCluster(t, "proc", procAddr, true),
	}, filterOf(t, "envoy.filters.http.ext_proc", ep))
	b = withHCM(t, b, 1024, func(h *hcmv3.HttpConnectionManager) { h.LocalReplyConfig = testLocalReply(t) })
	_, base := startEmulator(t, b, Options{})

	big := strings.Repeat("a", 2048)
	for _, tc := range []struct {
		name, path, body, deny string
		status                 int
		wantBody, wantType     string
	}{
		{"buffer 413, OpenAI path", "/v1/chat/completions", big, "", 413, `{"error":"413"}`, "application/json"},
		{"buffer 413, Anthropic path with a query", "/v1/messages?beta=true", big, "", 413, `{"type":"error"}`, "application/json"},
		{"buffer 413, the regex matches the whole path", "/v1/messagesX", big, "", 413, `{"error":"413"}`, "application/json"},
		{"connect failure, prefix match, default content type", "/dead", "x", "", 503, "reset", "text/plain"},
		{"route timeout", "/slow", "x", "", 504, `{"error":"504"}`, "application/json"},
		{"ext_proc's own reply untouched", "/", "x", "sluice_rate_limited", 429, `{"mine":true}`, "application/json"},
		{"ext_proc reply with Envoy's details is rewritten too", "/", "x", "upstream_response_timeout", 429, `{"error":"504"}`, "application/json"},
		{"direct response untouched", "/direct", "x", "", 404, "plain", "text/plain"},
		{"under the buffer: the upstream's response", "/", strings.Repeat("a", 1000), "", 200, "upstream", "text/plain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("POST", base+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.deny != "" {
				req.Header.Set("x-test-deny", tc.deny)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := readAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status || body != tc.wantBody || resp.Header.Get("Content-Type") != tc.wantType {
				t.Errorf("%d %q %q, want %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body, tc.status, tc.wantType, tc.wantBody)
			}
			if cl := resp.Header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(body)) {
				t.Errorf("content-length %s for %d bytes", cl, len(body))
			}
		})
	}
}

// TestLocalReplyConfigRefused: every part of local_reply_config the
// emulator does not implement fails the configuration, naming the field.
func TestLocalReplyConfigRefused(t *testing.T) {
	up := startHTTP(t, http.NotFoundHandler())
	ok := func() *hcmv3.ResponseMapper {
		return &hcmv3.ResponseMapper{Filter: celFilter(t, "response.code_details == 'x'"), BodyFormatOverride: textBody("b", "")}
	}
	for _, tc := range []struct {
		name string
		cfg  func() *hcmv3.LocalReplyConfig
		want string
	}{
		{"body_format", func() *hcmv3.LocalReplyConfig {
			return &hcmv3.LocalReplyConfig{BodyFormat: textBody("x", "")}
		}, "local_reply_config.body_format is not supported"},
		{"status_code", func() *hcmv3.LocalReplyConfig {
			m := ok()
			m.StatusCode = wrapperspb.UInt32(500)
			return &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{m}}
		}, "mappers[0]: status_code, body and headers_to_add"},
		{"headers_to_add", func() *hcmv3.LocalReplyConfig {
			m := ok()
			m.HeadersToAdd = []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "a", Value: "b"}}}
			return &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{ok(), m}}
		}, "mappers[1]: status_code, body and headers_to_add"},
		{"no body_format_override", func() *hcmv3.LocalReplyConfig {
			m := ok()
			m.BodyFormatOverride = nil
			return &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{m}}
		}, "needs body_format_override"},
		{"json_format", func() *hcmv3.LocalReplyConfig {
			m := ok()
			m.BodyFormatOverride = &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_JsonFormat{}}
			return &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{m}}
		}, "only text_format"},
		{"a command operator", func() *hcmv3.LocalReplyConfig {
			m := ok()
			m.BodyFormatOverride = textBody("%LOCAL_REPLY_BODY%", "")
			return &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{m}}
		}, "command operators"},
		{"status_code_filter", func() *hcmv3.LocalReplyConfig {
			m := ok()
			m.Filter = &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_StatusCodeFilter{StatusCodeFilter: &accesslogv3.StatusCodeFilter{
				Comparison: &accesslogv3.ComparisonFilter{Value: &corev3.RuntimeUInt32{RuntimeKey: "k", DefaultValue: 413}}}}}
			return &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{m}}
		}, "StatusCodeFilter is not supported"},
		{"another CEL expression", func() *hcmv3.LocalReplyConfig {
			m := ok()
			m.Filter = celFilter(t, "response.code >= 400")
			return &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{m}}
		}, `CEL expression "response.code >= 400"`},
		{"an inverted header_filter in an and_filter", func() *hcmv3.LocalReplyConfig {
			m := ok()
			hf := pathRegexFilter("/x")
			hf.GetHeaderFilter().GetHeader().InvertMatch = true
			m.Filter = &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{AndFilter: &accesslogv3.AndFilter{
				Filters: []*accesslogv3.AccessLogFilter{celFilter(t, "response.code_details == 'x'"), hf}}}}
			return &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{m}}
		}, "and_filter.filters[1]: header_filter: invert_match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := withHCM(t, testBootstrap(t, routeAll("up"), []*clusterv3.Cluster{testCluster(t, "up", up, false)}), 0,
				func(h *hcmv3.HttpConnectionManager) { h.LocalReplyConfig = tc.cfg() })
			if _, err := New(b, Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestLocalReplyRewrite is the rewrite's content-type rules on their own
// (Utility::sendLocalReply).
func TestLocalReplyRewrite(t *testing.T) {
	c, err := newLocalReplyConfig(testLocalReply(t))
	if err != nil {
		t.Fatal(err)
	}
	var none *localReplyConfig
	for _, tc := range []struct {
		name       string
		c          *localReplyConfig
		ct, body   string
		details    string
		wantCT     string
		wantBody   string
		wantLength string
	}{
		{"no config, body without type: text/plain", none, "", "hello", "d", "text/plain", "hello", "5"},
		{"no config, the filter's type kept", none, "application/json", "{}", "d", "application/json", "{}", "2"},
		{"no config, empty body loses its type", none, "application/json", "", "d", "", "", ""},
		{"no match: unchanged", c, "application/json", "{}", "sluice_x", "application/json", "{}", "2"},
		{"a match replaces the filter's type", c, "text/html", "x", "upstream_response_timeout", "application/json", `{"error":"504"}`, "15"},
		{"a match on an empty body", c, "", "", "upstream_reset_before_response_started{x}", "text/plain", "reset", "5"},
	} {
		h := NewHeaders(":status", "500")
		if tc.ct != "" {
			h.Set("content-type", tc.ct)
		}
		got := tc.c.rewrite(NewHeaders(":path", "/"), h, 500, []byte(tc.body), tc.details)
		if string(got) != tc.wantBody || h.Value("content-type") != tc.wantCT || h.Value("content-length") != tc.wantLength {
			t.Errorf("%s: %q type %q length %q, want %q %q %q", tc.name, got, h.Value("content-type"), h.Value("content-length"), tc.wantBody, tc.wantCT, tc.wantLength)
		}
	}
}

// TestLocalReplyStatusMatch: a CEL filter may also compare response.code,
// the reply's status, which LocalReplyImpl::rewrite sets before it tries
// the mappers — so a 408 and a 504 with the same details get different
// bodies — and one with another comparison is refused.
func TestLocalReplyStatusMatch(t *testing.T) {
	c, err := newLocalReplyConfig(&hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{
		{Filter: celFilter(t, "response.code_details == 'stream_idle_timeout' && response.code == 408"), BodyFormatOverride: textBody("408", "")},
		{Filter: celFilter(t, "response.code_details.startsWith('stream_idle') && response.code == 504"), BodyFormatOverride: textBody("504", "")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		status int
		want   string
	}{{408, "408"}, {504, "504"}, {500, "stream timeout"}} {
		if got := c.rewrite(NewHeaders(":path", "/"), &Headers{}, tc.status, []byte("stream timeout"), "stream_idle_timeout"); string(got) != tc.want {
			t.Errorf("status %d: %q, want %q", tc.status, got, tc.want)
		}
	}
	for _, x := range []string{
		"response.code_details == 'x' && response.code >= 400",
		"response.code_details == 'x' && response.code == 0408",
		"response.code == 408",
	} {
		if _, err := newLocalReplyConfig(&hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{
			{Filter: celFilter(t, x), BodyFormatOverride: textBody("b", "")},
		}}); err == nil || !strings.Contains(err.Error(), "CEL expression") {
			t.Errorf("%q: %v, want it refused", x, err)
		}
	}
}
