package envoytest

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filealv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	streamalv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func jsonLogFormat(t testing.TB, fields map[string]any) *corev3.SubstitutionFormatString {
	t.Helper()
	st, err := structpb.NewStruct(fields)
	if err != nil {
		t.Fatal(err)
	}
	return &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: st}}
}

func fileLog(t testing.TB, path string, f *corev3.SubstitutionFormatString) *accesslogv3.AccessLog {
	return &accesslogv3.AccessLog{Name: "envoy.access_loggers.file", ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(t,
		&filealv3.FileAccessLog{Path: path, AccessLogFormat: &filealv3.FileAccessLog_LogFormat{LogFormat: f}})}}
}

// sluiceFields is the format xds/build.go (accessLogFields) ships.
var sluiceFields = map[string]any{
	"start_time": "%START_TIME%", "request_id": "%REQ(X-REQUEST-ID)%", "method": "%REQ(:METHOD)%", "path": "%REQ(:PATH)%",
	"status": "%RESPONSE_CODE%", "flags": "%RESPONSE_FLAGS%", "details": "%RESPONSE_CODE_DETAILS%",
	"upstream_cluster": "%UPSTREAM_CLUSTER%", "attempts": "%UPSTREAM_REQUEST_ATTEMPT_COUNT%", "duration_ms": "%DURATION%",
	"model": "%DYNAMIC_METADATA(sluice:model)%", "input_tokens": "%DYNAMIC_METADATA(sluice:input_tokens)%",
	"estimated": "%DYNAMIC_METADATA(sluice:estimated)%",
}

// TestAccessLogFormat: the JSON line of Envoy's JsonFormatterImpl for
// finished streams — keys sorted, typed single operators, null for what
// is missing, "-" for no flags and inside mixed strings.
func TestAccessLogFormat(t *testing.T) {
	start := time.Date(2018, 4, 3, 23, 6, 9, 123999999, time.UTC)
	cfg := &config{clusters: map[string]*cluster{"c1": {name: "c1", statName: "c1"}, "c2": {name: "c2", statName: "c2-stats"}}}
	fields := map[string]any{"literal": "plain <&>", "n": 2, "mixed": "%REQ(:METHOD)% %REQ(X-NONE)% 100%%",
		"nested": map[string]any{"b": "%RESPONSE_CODE%", "a": []any{"%DURATION%", true}}}
	for k, v := range sluiceFields {
		fields[k] = v
	}
	f, err := newJSONFormat(jsonLogFormat(t, fields))
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := structpb.NewStruct(map[string]any{"model": "gpt\"x\n", "input_tokens": 12, "estimated": false})
	for _, tc := range []struct {
		name string
		s    *stream
		want string
	}{{
		name: "metered",
		s: &stream{cfg: cfg, start: start, reqHeaders: NewHeaders(":method", "POST", ":path", "/v1/chat", "x-request-id", "r1", "x-request-id", "r2"),
			rec: &Exchange{Status: 200, Details: "via_upstream", Cluster: "c2", Duration: 1999 * time.Microsecond,
				Attempts: []*UpstreamAttempt{{}, {}}, Metadata: map[string]*structpb.Struct{"sluice": meta}}},
		want: `{"attempts":2,"details":"via_upstream","duration_ms":1,"estimated":false,"flags":"-","input_tokens":12,"literal":"plain <&>",` +
			`"method":"POST","mixed":"POST - 100%","model":"gpt\"x\n","n":2,"nested":{"a":[1,true],"b":200},"path":"/v1/chat","request_id":"r1",` +
			`"start_time":"2018-04-03T23:06:09.123Z","status":200,"upstream_cluster":"c2-stats"}` + "\n",
	}, {
		name: "nothing known",
		s:    &stream{cfg: cfg, start: start, reqHeaders: NewHeaders(":method", "GET", ":path", "/x"), rec: &Exchange{ResponseFlags: "UF,URX"}},
		want: `{"attempts":0,"details":null,"duration_ms":0,"estimated":null,"flags":"UF,URX","input_tokens":null,"literal":"plain <&>",` +
			`"method":"GET","mixed":"GET - 100%","model":null,"n":2,"nested":{"a":[0,true],"b":0},"path":"/x","request_id":null,` +
			`"start_time":"2018-04-03T23:06:09.123Z","status":0,"upstream_cluster":null}` + "\n",
	}, {
		// The connection manager resolved the route (refreshCachedRoute
		// sets the cluster info) though no router ran: an ext_authz denial.
		name: "route resolved, no router",
		s: &stream{cfg: cfg, start: start, reqHeaders: NewHeaders(":method", "GET", ":path", "/x"), routeValid: true, route: &matchedRoute{cluster: "c1"},
			rec: &Exchange{Status: 401, Details: "ext_authz_denied", ResponseFlags: "UAEX"}},
		want: `{"attempts":0,"details":"ext_authz_denied","duration_ms":0,"estimated":null,"flags":"UAEX","input_tokens":null,"literal":"plain <&>",` +
			`"method":"GET","mixed":"GET - 100%","model":null,"n":2,"nested":{"a":[0,true],"b":401},"path":"/x","request_id":null,` +
			`"start_time":"2018-04-03T23:06:09.123Z","status":401,"upstream_cluster":"c1"}` + "\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := f.line(tc.s); got != tc.want {
				t.Errorf("line:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestAccessLogRefused: what the emulator does not implement fails the
// configuration, named.
func TestAccessLogRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.log")
	for _, tc := range []struct {
		name string
		al   *accesslogv3.AccessLog
		hcm  func(*hcmv3.HttpConnectionManager)
		want string
	}{
		{name: "unknown operator", al: fileLog(t, path, jsonLogFormat(t, map[string]any{"x": "%UPSTREAM_HOST%"})), want: "%UPSTREAM_HOST%"},
		{name: "bad syntax", al: fileLog(t, path, jsonLogFormat(t, map[string]any{"x": "%req%"})), want: "Couldn't find valid command"},
		{name: "start time format", al: fileLog(t, path, jsonLogFormat(t, map[string]any{"x": "%START_TIME(%s)%"})), want: "START_TIME"},
		{name: "param on command-only", al: fileLog(t, path, jsonLogFormat(t, map[string]any{"x": "%DURATION(X)%"})), want: "DURATION does not take"},
		{name: "text format", al: fileLog(t, path, &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_TextFormat{TextFormat: "x"}}), want: "json_format"},
		{name: "omit empty", al: fileLog(t, path, &corev3.SubstitutionFormatString{OmitEmptyValues: true, Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: &structpb.Struct{}}}), want: "omit_empty_values"},
		{name: "deprecated format field", al: &accesslogv3.AccessLog{Name: "f", ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(t, &filealv3.FileAccessLog{Path: path})}}, want: "log_format"},
		{name: "other logger", al: &accesslogv3.AccessLog{Name: "s", ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(t, &streamalv3.StderrAccessLog{})}}, want: "StderrAccessLog"},
		{name: "filter", al: func() *accesslogv3.AccessLog {
			a := fileLog(t, path, jsonLogFormat(t, map[string]any{"x": "%DURATION%"}))
			a.Filter = pathRegexFilter("x")
			return a
		}(), want: "filter"},
		{name: "unopenable path", al: fileLog(t, filepath.Join(dir, "no", "such", "dir"), jsonLogFormat(t, map[string]any{"x": "%DURATION%"})), want: "unable to open file"},
		{name: "flush options", hcm: func(h *hcmv3.HttpConnectionManager) {
			h.AccessLogOptions = &hcmv3.HttpConnectionManager_HcmAccessLogOptions{FlushAccessLogOnNewRequest: true}
		}, want: "access_log_options"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := withHCM(t, testBootstrap(t, routeAll("up"), []*clusterv3.Cluster{testCluster(t, "up", "127.0.0.1:1", false)}), 0, func(h *hcmv3.HttpConnectionManager) {
				if tc.al != nil {
					h.AccessLog = append(h.AccessLog, tc.al)
				}
				if tc.hcm != nil {
					tc.hcm(h)
				}
			})
			_, err := New(b, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestAccessLogFile: the listener's file access log is written as the
// stream ends, appended to what the file held (Write|Create|Append).
func TestAccessLogFile(t *testing.T) {
	up := startHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	path := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(path, []byte("earlier\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := withHCM(t, testBootstrap(t, routeAll("up"), []*clusterv3.Cluster{testCluster(t, "up", up, false)}), 0, func(h *hcmv3.HttpConnectionManager) {
		h.AccessLog = []*accesslogv3.AccessLog{fileLog(t, path, jsonLogFormat(t, map[string]any{
			"status": "%RESPONSE_CODE%", "cluster": "%UPSTREAM_CLUSTER%", "attempts": "%UPSTREAM_REQUEST_ATTEMPT_COUNT%", "path": "%REQ(:PATH)%"}))}
		h.GenerateRequestId = wrapperspb.Bool(false)
	})
	e, base := startEmulator(t, b, Options{})
	resp, err := http.Get(base + "/a?b=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitExchanges(t, e, 1)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "earlier\n" + `{"attempts":1,"cluster":"up","path":"/a?b=1","status":201}` + "\n"; string(got) != want {
		t.Errorf("file:\n got %q\nwant %q", got, want)
	}
}
