package xds

import (
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// releasesPolicy has a plain model and a fallback model over two EDS
// providers.
const releasesPolicy = `
listen: {grpc: "127.0.0.1:9001", envoy: "127.0.0.1:10000"}
providers:
  - {name: pool, kind: openai-compatible, base_url: "http://pool.test:8000", endpoints: ["10.0.0.1:8000"]}
  - {name: spare, kind: openai-compatible, base_url: "http://spare.test:8000", endpoints: ["10.0.0.2:8000"]}
models:
  - {name: llama, provider: pool}
  - {name: llama-ha, providers: [{name: pool}, {name: spare}]}
xds: {access_log: "off"}
`

// releaseNode is an Envoy node reporting release v (as Envoy does, in
// user_agent_build_version).
func releaseNode(t testing.TB, id, v string) *corev3.Node {
	t.Helper()
	ev, ok := ParseEnvoyVersion(v)
	if !ok {
		t.Fatalf("bad version %q", v)
	}
	label := ""
	if ev.Pre {
		label = "dev"
	}
	n := buildVersion(ev.Major, ev.Minor, ev.Patch, label)
	n.Id, n.Cluster = id, "edge"
	return n
}

// servedTo is what a node of group 0 running release v is served, by type
// URL.
func (ts *testXDS) servedTo(t testing.TB, v string) map[string]string {
	t.Helper()
	ev, _ := ParseEnvoyVersion(v)
	short, err := ts.ServedTo(0, FlavourEnvoy, FeaturesOf(ev))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, typ := range typeOrder {
		out[typ] = short[ShortType(typ)]
	}
	return out
}

// clusterNames are the clusters of a CDS response.
func clusterNames(t testing.TB, got map[string]*discoverygrpc.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range got[resourcev3.ClusterType].GetResources() {
		c := &clusterv3.Cluster{}
		if err := a.UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c.GetName())
	}
	slices.Sort(out)
	return out
}

// TestEnvoyReleasesSideBySide: one server, Envoys of three releases in
// one group. A current one gets the fallback cluster; a 1.36 one the
// config without it, which is logged once and counted, and reported in
// its status; a node that reports no version it can read gets every
// feature, with a warning. Each acknowledges exactly the versions of its
// own variant.
func TestEnvoyReleasesSideBySide(t *testing.T) {
	checkLeaks(t)
	ts := startXDS(t)
	ts.update(t, releasesPolicy)
	cc := dial(t, ts.addr)
	full := ts.served(t, FlavourEnvoy)
	if old := ts.servedTo(t, "1.36.2"); old[resourcev3.ClusterType] == full[resourcev3.ClusterType] || old[resourcev3.RouteType] == full[resourcev3.RouteType] {
		t.Fatalf("a 1.36 node is served the same clusters or routes as a current one: %v", old)
	}
	for _, tc := range []struct {
		node, release string
		fallback      bool
		withheld      []string
	}{
		{"new", "1.40.0", true, nil},
		{"old", "1.36.2", false, []string{"fallback"}},
		{"dev", "1.37.0-dev", false, []string{"fallback"}},
		{"unversioned", "", true, nil},
	} {
		node := envoyNode(tc.node, "edge")
		want := full
		if tc.release != "" {
			node = releaseNode(t, tc.node, tc.release)
			want = ts.servedTo(t, tc.release)
		}
		c := newSotwClient(t, cc, node, envoyNames("pool", "spare"))
		got := c.syncAll(want)
		names := clusterNames(t, got)
		if has := slices.Contains(names, "sluice.fallback.llama-ha"); has != tc.fallback || slices.Contains(names, "spare.fallback") != tc.fallback {
			t.Errorf("%s: clusters %v; want the fallback clusters %v", tc.node, names, tc.fallback)
		}
		n := ts.waitNode(t, tc.node, "ACK", func(n NodeStatus) bool { return ackedAll(n, want) })
		if !slices.Equal(n.Withheld, tc.withheld) {
			t.Errorf("%s: status withheld %v, want %v", tc.node, n.Withheld, tc.withheld)
		}
		if n.EnvoyVersion != tc.release {
			t.Errorf("%s: status envoy version %q, want %q", tc.node, n.EnvoyVersion, tc.release)
		}
	}
	if got := metricValue(t, ts.m.featuresWithheld.WithLabelValues("fallback")); got != 2 {
		t.Errorf("sluice_xds_features_withheld_total{feature=fallback} = %v, want 2 (old, dev)", got)
	}
	if got := metricValue(t, ts.m.featuresWithheld.WithLabelValues("status_on_error")); got != 0 {
		t.Errorf("sluice_xds_features_withheld_total{feature=status_on_error} = %v, want 0", got)
	}
	logs := ts.logs.String()
	for _, want := range []string{
		`msg="xDS node's Envoy is too old for a feature: served the config without it" component=xds node=old cluster=edge envoy_version=1.36.2 feature=fallback min_envoy_version=1.37.0`,
		`node=dev cluster=edge envoy_version=1.37.0-dev feature=fallback`,
		`msg="xDS node reports no Envoy version it can read: served every feature`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	// A config change re-serves every node (Update gives each its snapshot
	// before it returns); the warnings are not repeated.
	ts.update(t, strings.Replace(releasesPolicy, `"10.0.0.2:8000"`, `"10.0.0.3:8000"`, 1))
	if got := strings.Count(ts.logs.String(), "node=old cluster=edge envoy_version=1.36.2 feature=fallback"); got != 1 {
		t.Errorf("the old node was warned %d times, want once", got)
	}
}

// only is want restricted to types.
func only(want map[string]string, types ...string) map[string]string {
	out := map[string]string{}
	for _, typ := range types {
		out[typ] = want[typ]
	}
	return out
}

// until reads and ACKs responses until the client holds the versions
// want (by type URL).
func (c *sotwClient) until(want map[string]string) {
	c.t.Helper()
	got := map[string]*discoverygrpc.DiscoveryResponse{}
	for !versionsAre(got, want) {
		r := c.next()
		got[r.GetTypeUrl()] = r
		c.ack(r)
	}
}

// TestEnvoyReleaseWithheldOnlyWhenUsed: an old Envoy is warned about
// fallback only once the policy has a fallback model; about
// status_on_error always (every listener has ext_proc).
func TestEnvoyReleaseWithheldOnlyWhenUsed(t *testing.T) {
	checkLeaks(t)
	ts := startXDS(t)
	plain := strings.Replace(releasesPolicy, "  - {name: llama-ha, providers: [{name: pool}, {name: spare}]}\n", "", 1)
	ts.update(t, plain)
	c := newSotwClient(t, dial(t, ts.addr), releaseNode(t, "ancient-ish", "1.30.1"), envoyNames("pool", "spare"))
	c.syncAll(ts.servedTo(t, "1.30.1"))
	if got := metricValue(t, ts.m.featuresWithheld.WithLabelValues("status_on_error")); got != 1 {
		t.Errorf("status_on_error withheld %v times, want 1", got)
	}
	if got := metricValue(t, ts.m.featuresWithheld.WithLabelValues("fallback")); got != 0 {
		t.Errorf("fallback withheld %v times with no fallback model, want 0", got)
	}
	// The old node's config does not change (it gets no fallback model
	// anyway): nothing is pushed, but the new policy uses fallback.
	ts.update(t, releasesPolicy)
	if got := metricValue(t, ts.m.featuresWithheld.WithLabelValues("fallback")); got != 1 {
		t.Errorf("fallback withheld %v times once a fallback model came, want 1", got)
	}
}

// TestEnvoyTooOldRefused: an Envoy older than MinEnvoy is refused at its
// first request — the stream ends with FailedPrecondition naming its
// release and the oldest one served — before it is registered or served
// anything; the refusal is counted and logged at warn, once per node id
// however often it reconnects. A proxyless gRPC client's own version
// number, however low, is not held against Envoy's floor.
func TestEnvoyTooOldRefused(t *testing.T) {
	checkLeaks(t)
	ts := startXDS(t)
	ts.update(t, releasesPolicy)
	cc := dial(t, ts.addr)
	for i := range 3 {
		c := newSotwClient(t, cc, releaseNode(t, "ancient", "1.20.0"), envoyNames("pool", "spare"))
		c.subscribe(resourcev3.ClusterType)
		err := c.streamErr()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "Envoy 1.20.0 is older than 1.30.0") {
			t.Fatalf("attempt %d: stream ended with %v, want FailedPrecondition naming 1.20.0 and 1.30.0", i, err)
		}
	}
	if _, ok := ts.node("ancient"); ok {
		t.Error("the refused node is registered")
	}
	if got := metricValue(t, ts.m.nodesRefused.WithLabelValues("envoy_too_old")); got != 3 {
		t.Errorf("sluice_xds_nodes_refused_total{reason=envoy_too_old} = %v, want 3", got)
	}
	const line = `msg="xDS node refused: its Envoy is older than the oldest release Sluice serves; it is served nothing" component=xds node=ancient cluster=edge envoy_version=1.20.0 min_envoy_version=1.30.0`
	if got := strings.Count(ts.logs.String(), line); got != 1 {
		t.Errorf("refusal logged %d times at warn, want once:\n%s", got, ts.logs)
	}

	grpcNode := &corev3.Node{Id: "grpc-1", Cluster: "edge", UserAgentName: "gRPC Go", UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: "1.2.0"}}
	g := newSotwClient(t, cc, grpcNode, nil)
	g.syncAll(only(ts.served(t, FlavourGRPC), resourcev3.ListenerType), resourcev3.ListenerType)
	if n := ts.waitNode(t, "grpc-1", "connect", func(NodeStatus) bool { return true }); n.Flavour != FlavourGRPC || n.EnvoyVersion != "" || len(n.Withheld) != 0 {
		t.Errorf("gRPC client status %+v", n)
	}
}

// TestEnvoyReleaseSharedNodeID: two Envoys of different releases sharing
// a node id (a rollback, or every replica on the bootstrap's default id)
// each keep the config of their own release. The newer one is never
// pushed the older one's — a CDS without the fallback clusters its
// routes still name would break its fallback models until the routes
// followed — and a config change reaches each at its own level.
func TestEnvoyReleaseSharedNodeID(t *testing.T) {
	checkLeaks(t)
	ts := startXDS(t)
	ts.update(t, releasesPolicy)
	cc := dial(t, ts.addr)
	full := ts.served(t, FlavourEnvoy)
	newer := newSotwClient(t, cc, releaseNode(t, "edge-1", "1.40.0"), envoyNames("pool", "spare"))
	newer.syncAll(full)
	older := newSotwClient(t, cc, releaseNode(t, "edge-1", "1.36.0"), envoyNames("pool", "spare"))
	old := ts.servedTo(t, "1.36.0")
	older.syncAll(old)

	byRelease := map[string]NodeStatus{}
	for _, n := range ts.Nodes() {
		if n.ID == "edge-1" {
			byRelease[n.EnvoyVersion] = n
		}
	}
	if n := byRelease["1.40.0"]; n.Streams != 1 || len(n.Withheld) != 0 {
		t.Errorf("the 1.40 Envoy: %+v; want its own entry, every feature", n)
	}
	if n := byRelease["1.36.0"]; n.Streams != 1 || !slices.Equal(n.Withheld, []string{"fallback"}) {
		t.Errorf("the 1.36 Envoy: %+v; want its own entry without fallback", n)
	}

	// A config change reaches each at its own level (a downgraded newer
	// Envoy would never hold the full config's versions).
	ts.update(t, strings.Replace(releasesPolicy, `10.0.0.2:8000`, `10.0.0.3:8000`, 1))
	full2, old2 := ts.served(t, FlavourEnvoy), ts.servedTo(t, "1.36.0")
	newer.until(changed(t, full, full2))
	older.until(changed(t, old, old2))

	older.stream.CloseSend()
	older.streamErr()
	ts.waitNode(t, "edge-1", "the old stream gone", func(n NodeStatus) bool { return n.Streams == 1 && len(n.Withheld) == 0 && n.EnvoyVersion == "1.40.0" })
}

// changed is the versions of to whose type's version differs in from;
// it fails the test when none does.
func changed(t testing.TB, from, to map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for typ, v := range to {
		if from[typ] != v {
			out[typ] = v
		}
	}
	if len(out) == 0 {
		t.Fatal("the new config changed no resource type")
	}
	return out
}
