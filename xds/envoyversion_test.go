package xds

import (
	"os"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/chain"
)

func TestParseEnvoyVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want EnvoyVersion
		ok   bool
	}{
		{"1.31.2", EnvoyVersion{1, 31, 2, false}, true},
		{"v1.31.2", EnvoyVersion{1, 31, 2, false}, true},
		{"V1.31.2", EnvoyVersion{1, 31, 2, false}, true},
		{"1.31", EnvoyVersion{1, 31, 0, false}, true},
		{"1.37.0-dev", EnvoyVersion{1, 37, 0, true}, true},
		{"1.31.2-contrib", EnvoyVersion{1, 31, 2, false}, true},
		{"1.37.0-dev-contrib", EnvoyVersion{1, 37, 0, true}, true},
		{"1.2.3-foo-bar", EnvoyVersion{1, 2, 3, true}, true},
		{"0.0.0", EnvoyVersion{}, true},
		{"999999999.999999999.999999999", EnvoyVersion{999999999, 999999999, 999999999, false}, true},
		{"1000000000.0.0", EnvoyVersion{}, false},
		{"4294967296.0.0", EnvoyVersion{}, false},
		{"-1.30.0", EnvoyVersion{}, false},
		{"1.-30.0", EnvoyVersion{}, false},
		{"+1.30.0", EnvoyVersion{}, false},
		{"1.30.0-", EnvoyVersion{}, false},
		{"1", EnvoyVersion{}, false},
		{"1.2.3.4", EnvoyVersion{}, false},
		{"1..3", EnvoyVersion{}, false},
		{" 1.30.0", EnvoyVersion{}, false},
		{"1.30.0 ", EnvoyVersion{}, false},
		{"1.3O.0", EnvoyVersion{}, false},
		{"1.30.0\x00", EnvoyVersion{}, false},
		{"١.٣٠.٠", EnvoyVersion{}, false}, // Arabic-Indic digits are not digits here
		{"", EnvoyVersion{}, false},
		{"envoytest", EnvoyVersion{}, false},
		{"1.30.0-" + strings.Repeat("x", maxVersionLen), EnvoyVersion{}, false},
	} {
		got, ok := ParseEnvoyVersion(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseEnvoyVersion(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzParseEnvoyVersion: whatever a node sends, parsing does not panic;
// what it accepts prints as a version that parses back to itself, with
// numbers that fit a SemanticVersion.
func FuzzParseEnvoyVersion(f *testing.F) {
	for _, s := range []string{"1.31.2", "v1.40.0", "1.37.0-dev", "1.31.2-contrib", "1.2", "", "x.y.z", "99999999999.1.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := ParseEnvoyVersion(s)
		if !ok {
			if v != (EnvoyVersion{}) {
				t.Errorf("ParseEnvoyVersion(%q) refused but returned %+v", s, v)
			}
			return
		}
		if len(s) > maxVersionLen || v.Major > 999999999 || v.Minor > 999999999 || v.Patch > 999999999 {
			t.Errorf("ParseEnvoyVersion(%q) = %+v accepted", s, v)
		}
		back, ok := ParseEnvoyVersion(v.String())
		if !ok || back != v {
			t.Errorf("%q → %+v → %q → %+v, %v", s, v, v.String(), back, ok)
		}
		if v.Less(v) {
			t.Errorf("%+v is less than itself", v)
		}
	})
}

func buildVersion(major, minor, patch uint32, label string) *corev3.Node {
	bv := &corev3.BuildVersion{Version: &typev3.SemanticVersion{MajorNumber: major, MinorNumber: minor, Patch: patch}}
	if label != "" {
		bv.Metadata, _ = structpb.NewStruct(map[string]any{"build.label": label, "build.type": "RELEASE"})
	}
	return &corev3.Node{Id: "n", UserAgentName: "envoy", UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: bv}}
}

func TestNodeVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		node *corev3.Node
		want EnvoyVersion
		ok   bool
	}{
		{"build version", buildVersion(1, 36, 2, ""), EnvoyVersion{1, 36, 2, false}, true},
		{"development build", buildVersion(1, 37, 0, "dev"), EnvoyVersion{1, 37, 0, true}, true},
		{"contrib build", buildVersion(1, 36, 2, "contrib"), EnvoyVersion{1, 36, 2, false}, true},
		{"huge numbers", buildVersion(4294967295, 4294967295, 4294967295, ""), EnvoyVersion{4294967295, 4294967295, 4294967295, false}, true},
		{"all-zero build version", buildVersion(0, 0, 0, ""), EnvoyVersion{}, false},
		{"build version without a version", &corev3.Node{UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: &corev3.BuildVersion{}}}, EnvoyVersion{}, false},
		{"version string", &corev3.Node{UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: "v1.31.2"}}, EnvoyVersion{1, 31, 2, false}, true},
		{"garbage string", &corev3.Node{UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: "latest"}}, EnvoyVersion{}, false},
		{"nothing", &corev3.Node{Id: "n"}, EnvoyVersion{}, false},
		{"nil node", nil, EnvoyVersion{}, false},
	} {
		got, ok := NodeVersion(tc.node)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: NodeVersion = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	long := &corev3.Node{UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: strings.Repeat("9", 1000)}}
	if l := versionLabel(long); len(l) > maxVersionLen+8 {
		t.Errorf("versionLabel of a 1000-byte version is %d bytes", len(l))
	}
}

func TestFeaturesOf(t *testing.T) {
	soe := Features(1 << FeatureStatusOnError)
	for _, tc := range []struct {
		v    string
		want Features
	}{
		{"1.30.0", 0},
		{"1.35.9", 0},
		{"1.36.0-dev", 0},
		{"1.36.0", soe},
		{"1.36.9", soe},
		{"1.37.0-dev", soe},
		{"1.37.0", AllFeatures},
		{"1.40.0", AllFeatures},
		{"2.0.0", AllFeatures},
	} {
		v, ok := ParseEnvoyVersion(tc.v)
		if !ok {
			t.Fatalf("ParseEnvoyVersion(%q) failed", tc.v)
		}
		if got := FeaturesOf(v); got != tc.want {
			t.Errorf("FeaturesOf(%s) = %v, want %v", tc.v, got.List(), tc.want.List())
		}
	}
	if !slices.Equal(envoyLevels, []Features{AllFeatures, 0, soe}) {
		t.Errorf("envoyLevels = %v, want every feature, none, status_on_error", envoyLevels)
	}
	// A group's snapshots: Envoy and gRPC with every feature (at the
	// flavours' own indexes), then one per older Envoy level.
	if len(variants) != 4 || variants[FlavourEnvoy] != (variant{FlavourEnvoy, AllFeatures}) || variants[FlavourGRPC] != (variant{FlavourGRPC, AllFeatures}) {
		t.Errorf("variants = %v", variants)
	}
	for _, l := range envoyLevels {
		if v := variants[variantOf(FlavourEnvoy, l)]; v.flavour != FlavourEnvoy || v.features != l {
			t.Errorf("variantOf(envoy, %v) = %v", l.List(), v)
		}
	}
	if MinEnvoy.Less(EnvoyVersion{1, 30, 0, false}) || (EnvoyVersion{1, 30, 0, false}).Less(MinEnvoy) {
		t.Errorf("MinEnvoy = %s", MinEnvoy)
	}
}

// TestFeatureTableDocumented: envoy/README.md's table names the oldest
// release served and every feature with its floor.
func TestFeatureTableDocumented(t *testing.T) {
	b, err := os.ReadFile("../envoy/README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ") // line breaks as spaces
	if !strings.Contains(doc, "oldest release Sluice serves is **"+MinEnvoy.String()+"**") {
		t.Errorf("envoy/README.md does not state the oldest release served, %s", MinEnvoy)
	}
	for f := range numFeatures {
		row := "| `" + f.String() + "` | **" + f.Floor().String() + "** |"
		if !strings.Contains(doc, row) {
			t.Errorf("envoy/README.md has no row starting %q", row)
		}
	}
}

// TestBuildForFeatures: what an Envoy too old for a feature is served.
// Without fallback: no fallback member or aggregate cluster, no fallback
// route, and ext_proc's stream marked so that the processor routes a
// fallback model to its first provider. Without status_on_error: no
// status_on_error in ext_proc, and the local reply mappers of ext_proc's
// failures set 503 and 504. Every such config validates.
func TestBuildForFeatures(t *testing.T) {
	p := compile(t, testPolicy)
	g := Groups(p)[0]
	for _, tc := range []struct {
		release       string
		fallback, soe bool
		pinnedMappers int
	}{
		{"1.30.0", false, false, 4},
		{"1.36.0", false, true, 0},
		{"1.37.0", true, true, 0},
	} {
		v, _ := ParseEnvoyVersion(tc.release)
		r, err := BuildFor(p, g, FlavourEnvoy, FeaturesOf(v))
		if err != nil {
			t.Fatalf("%s: %v", tc.release, err)
		}
		if _, _, err := Snapshot(r); err != nil {
			t.Fatalf("%s: Snapshot: %v", tc.release, err)
		}
		var fallbackClusters []string
		for _, c := range r.Clusters {
			if strings.HasPrefix(c.GetName(), "sluice.fallback.") || strings.HasSuffix(c.GetName(), FallbackSuffix) {
				fallbackClusters = append(fallbackClusters, c.GetName())
			}
		}
		var fallbackRoutes []string
		for _, rt := range r.Routes[0].GetVirtualHosts()[0].GetRoutes() {
			if strings.HasPrefix(rt.GetName(), "sluice.fallback.") {
				fallbackRoutes = append(fallbackRoutes, rt.GetName())
			}
		}
		if got := len(fallbackClusters) > 0 && len(fallbackRoutes) > 0; got != tc.fallback || (len(fallbackClusters) > 0) != (len(fallbackRoutes) > 0) {
			t.Errorf("%s: fallback clusters %v, routes %v; want fallback %v", tc.release, fallbackClusters, fallbackRoutes, tc.fallback)
		}
		hcm := &hcmv3.HttpConnectionManager{}
		if err := r.Listeners[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
			t.Fatal(err)
		}
		ep := &extprocv3.ExternalProcessor{}
		for _, f := range hcm.GetHttpFilters() {
			if f.GetName() == chain.ExtProcFilterName {
				if err := f.GetTypedConfig().UnmarshalTo(ep); err != nil {
					t.Fatal(err)
				}
			}
		}
		if (ep.GetStatusOnError() != nil) != tc.soe {
			t.Errorf("%s: ext_proc status_on_error %v, want present %v", tc.release, ep.GetStatusOnError(), tc.soe)
		}
		marked := false
		for _, h := range ep.GetGrpcService().GetInitialMetadata() {
			marked = marked || h.GetKey() == chain.FallbackMetadataKey
		}
		if marked == tc.fallback {
			t.Errorf("%s: ext_proc stream marked fallback-withheld %v, want %v", tc.release, marked, !tc.fallback)
		}
		pinned := 0
		for _, m := range hcm.GetLocalReplyConfig().GetMappers() {
			if m.GetStatusCode() != nil {
				pinned++
			}
		}
		if pinned != tc.pinnedMappers {
			t.Errorf("%s: %d local reply mappers set a status, want %d", tc.release, pinned, tc.pinnedMappers)
		}
	}
	// Build is BuildFor with every feature.
	full, err := Build(p, g, FlavourEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	all, err := BuildFor(p, g, FlavourEnvoy, AllFeatures)
	if err != nil {
		t.Fatal(err)
	}
	_, v1, _ := Snapshot(full)
	_, v2, _ := Snapshot(all)
	if v1 != v2 {
		t.Error("Build differs from BuildFor(AllFeatures)")
	}
}
