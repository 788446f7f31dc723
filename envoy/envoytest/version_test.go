package envoytest

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestDefaultEnvoyVersionIsTheAPIs: the release the emulator plays by
// default is the one whose API it is built with.
func TestDefaultEnvoyVersionIsTheAPIs(t *testing.T) {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/envoyproxy/go-control-plane/envoy v(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod does not require github.com/envoyproxy/go-control-plane/envoy")
	}
	if string(m[1]) != DefaultEnvoyVersion {
		t.Errorf("DefaultEnvoyVersion = %s, but the Envoy API module is v%s", DefaultEnvoyVersion, m[1])
	}
}

func TestParseEnvoyVersion(t *testing.T) {
	for _, tc := range []struct {
		in         string
		ok         bool
		has136     bool // has(1, 36)
		normalized string
	}{
		{"1.36.0", true, true, "1.36.0"},
		{"1.36.4", true, true, "1.36.4"},
		{"1.36.0-dev", true, false, "1.36.0-dev"},
		{"1.36.1-dev", true, true, "1.36.1-dev"},
		{"1.36.0-contrib", true, true, "1.36.0-contrib"},
		{"1.36.0-dev-contrib", true, false, "1.36.0-dev-contrib"},
		{"1.35.9", true, false, "1.35.9"},
		{"2.0.0", true, true, "2.0.0"},
		{"1.36", false, false, ""},
		{"v1.36.0", false, false, ""},
		{"1.36.0-", false, false, ""},
		{"1.+36.0", false, false, ""},
		{"1.36.99999999999", false, false, ""},
		{"", false, false, ""},
	} {
		v, err := parseEnvoyVersion(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("parseEnvoyVersion(%q) error %v, want ok %v", tc.in, err, tc.ok)
			continue
		}
		if tc.ok && (v.has(1, 36) != tc.has136 || v.String() != tc.normalized) {
			t.Errorf("parseEnvoyVersion(%q) = %s, has 1.36 %v; want %s, %v", tc.in, v, v.has(1, 36), tc.normalized, tc.has136)
		}
	}
	if _, err := New(testBootstrap(t, routeTo("p", nil), []*clusterv3.Cluster{testCluster(t, "p", "127.0.0.1:1", false)}), Options{EnvoyVersion: "one.two"}); err == nil || !strings.Contains(err.Error(), "EnvoyVersion") {
		t.Errorf("New with a bad EnvoyVersion: %v, want an error naming it", err)
	}
}

// TestEnvoyVersionReported: over ADS the node carries the emulated
// release as user_agent_build_version (with the build label in its
// metadata), user_agent_name envoy; a bootstrap's own
// user_agent_build_version and user_agent_name are kept, and its
// user_agent_version string replaced — what Envoy's server.cc does.
func TestEnvoyVersionReported(t *testing.T) {
	opts := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opts) })
	for _, tc := range []struct {
		name     string
		version  string                  // Options.EnvoyVersion
		node     func(n *corev3.Node)    // changes to the bootstrap's node
		wantName string                  // user_agent_name
		want     *typev3.SemanticVersion // user_agent_build_version.version
		label    string
	}{
		{"default", "", nil, "envoy", &typev3.SemanticVersion{MajorNumber: 1, MinorNumber: 40}, ""},
		{"an old release", "1.30.2", nil, "envoy", &typev3.SemanticVersion{MajorNumber: 1, MinorNumber: 30, Patch: 2}, ""},
		{"a development build", "1.37.0-dev", nil, "envoy", &typev3.SemanticVersion{MajorNumber: 1, MinorNumber: 37}, "dev"},
		{"the bootstrap's build version", "1.36.0", func(n *corev3.Node) {
			n.UserAgentName = "edge-proxy"
			n.UserAgentVersionType = &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: &corev3.BuildVersion{Version: &typev3.SemanticVersion{MajorNumber: 9, MinorNumber: 9, Patch: 9}}}
		}, "edge-proxy", &typev3.SemanticVersion{MajorNumber: 9, MinorNumber: 9, Patch: 9}, ""},
		{"a version string replaced", "1.36.0", func(n *corev3.Node) {
			n.UserAgentVersionType = &corev3.Node_UserAgentVersion{UserAgentVersion: "whatever"}
		}, "envoy", &typev3.SemanticVersion{MajorNumber: 1, MinorNumber: 36}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := startControlPlane(t)
			b, err := ADSBootstrap(cp.addr, adsNode, "sluice-test")
			if err != nil {
				t.Fatal(err)
			}
			if tc.node != nil {
				tc.node(b.GetNode())
			}
			e, err := New(b, Options{EnvoyVersion: tc.version})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			n := cp.waitRequests(t, "the first request", func(rs []seenRequest) bool { return len(rs) > 0 })[0].req.GetNode()
			bv := n.GetUserAgentBuildVersion()
			sv := bv.GetVersion()
			if n.GetUserAgentName() != tc.wantName || sv.GetMajorNumber() != tc.want.GetMajorNumber() || sv.GetMinorNumber() != tc.want.GetMinorNumber() || sv.GetPatch() != tc.want.GetPatch() {
				t.Errorf("node reports %q %v, want %q %v", n.GetUserAgentName(), sv, tc.wantName, tc.want)
			}
			if got := bv.GetMetadata().GetFields()["build.label"].GetStringValue(); got != tc.label {
				t.Errorf("build.label %q, want %q", got, tc.label)
			}
			if n.GetUserAgentVersion() != "" {
				t.Errorf("user_agent_version %q sent: Envoy sends the build version only", n.GetUserAgentVersion())
			}
			want := tc.version
			if want == "" {
				want = DefaultEnvoyVersion
			}
			if e.EnvoyVersion() != want {
				t.Errorf("EnvoyVersion() = %s, want %s", e.EnvoyVersion(), want)
			}
		})
	}
}

// TestEnvoyVersionUpstreamExtProc: before 1.30 ext_proc is no upstream
// filter, and a cluster naming it in its upstream HTTP filters is refused
// as Envoy refuses it; from 1.30.0 it loads.
func TestEnvoyVersionUpstreamExtProc(t *testing.T) {
	boot := func() *clusterv3.Cluster {
		p := testCluster(t, "p", "127.0.0.1:1", false)
		setUpstreamFilters(t, p, true, filterOf(t, "envoy.filters.http.ext_proc", upstreamExtProc("proc", "provider-p")))
		return p
	}
	for _, tc := range []struct {
		version string
		refused bool
	}{
		{"1.29.12", true},
		{"1.30.0-dev", true},
		{"1.30.0", false},
		{DefaultEnvoyVersion, false},
	} {
		b := testBootstrap(t, routeTo("p", nil), []*clusterv3.Cluster{boot(), testCluster(t, "proc", "127.0.0.1:2", true)})
		e, err := New(b, Options{EnvoyVersion: tc.version})
		if tc.refused {
			if err == nil || !strings.Contains(err.Error(), "Didn't find a registered implementation for 'envoy.filters.http.ext_proc'") {
				t.Errorf("Envoy %s: New = %v, want the upstream ext_proc refused", tc.version, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Envoy %s: New: %v", tc.version, err)
			continue
		}
		closeClusters(e.cfg.Load())
	}
}

// TestEnvoyVersionExtProcFailures: ext_proc's failure replies as each
// release answers them — status_on_error honoured from 1.36.0 (before, an
// unknown field: 500), the message timeout 504 from 1.31.0 (before, 500) —
// end to end: a listener whose ext_proc server cannot be reached, and one
// whose server never answers.
func TestEnvoyVersionExtProcFailures(t *testing.T) {
	silent := &procServer{}
	silent.setScript(func(c *procConn) error { return c.drain() }) // reads, never answers
	silentAddr := startGRPC(t, func(s *grpc.Server) { extprocsvc.RegisterExternalProcessorServer(s, silent) })
	upstream := backendAddr(t)
	for _, tc := range []struct {
		version              string
		wantError, wantTimer int
	}{
		{"1.30.4", 500, 500},
		{"1.31.0", 500, 504},
		{"1.35.7", 500, 504},
		{"1.36.0-dev", 500, 504},
		{"1.36.0", 503, 504},
		{DefaultEnvoyVersion, 503, 504},
	} {
		t.Run(tc.version, func(t *testing.T) {
			for _, c := range []struct {
				what string
				addr string
				want int
			}{
				{"unreachable", closedAddr(t), tc.wantError},
				{"message timeout", silentAddr, tc.wantTimer},
			} {
				cfg := &extprocv3.ExternalProcessor{
					GrpcService:    grpcCluster("proc", -1),
					StatusOnError:  &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
					MessageTimeout: durationpb.New(50 * time.Millisecond),
				}
				b := testBootstrap(t, routeAll("p"), []*clusterv3.Cluster{testCluster(t, "p", upstream, false), testCluster(t, "proc", c.addr, true)},
					filterOf(t, epFilterName, cfg))
				_, url := startEmulator(t, b, Options{EnvoyVersion: tc.version})
				resp, err := http.Get(url + "/")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != c.want {
					t.Errorf("%s: %d, want %d", c.what, resp.StatusCode, c.want)
				}
			}
		})
	}
}

// backendAddr is an upstream answering 200 to everything.
func backendAddr(t *testing.T) string {
	return startHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
}
