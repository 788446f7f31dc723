package xds

// Envoy versions: what Sluice's config needs of an Envoy release, and how
// a node's release is read. envoy/README.md ("Envoy versions") has the
// table with the evidence for every floor; keep the two together
// (TestFeatureTableDocumented).

import (
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// EnvoyVersion is an Envoy release as a node reports it.
type EnvoyVersion struct {
	Major, Minor, Patch uint32
	// Pre marks a build before the release it names: a version with a
	// build label such as "dev" (Envoy's main branch between releases:
	// 1.37.0-dev is everything merged after 1.36.0, possibly not yet what
	// 1.37.0 has). It orders before the release, as in semantic
	// versioning, so a development build is never credited with a feature
	// merged late in its cycle.
	Pre bool
}

// Less reports whether v is older than o.
func (v EnvoyVersion) Less(o EnvoyVersion) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	if v.Patch != o.Patch {
		return v.Patch < o.Patch
	}
	return v.Pre && !o.Pre
}

func (v EnvoyVersion) String() string {
	s := fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.Pre {
		s += "-dev"
	}
	return s
}

// MinEnvoy is the oldest Envoy release Sluice serves: the first whose
// ext_proc has metadata_options (changelogs/1.30.0.yaml), without which
// the principal ext_authz resolved never reaches ext_proc (forwarding
// namespaces) and the usage never reaches the access log (receiving
// namespaces), so every request would fail closed. An older Envoy loads
// the config — it ignores the unknown field — and then refuses every
// request, so Sluice refuses it instead (Server, refuseTooOld).
var MinEnvoy = EnvoyVersion{Major: 1, Minor: 30}

// Feature is something Sluice's config uses that only some of the Envoy
// releases it serves can run. A node below a feature's floor is served the
// config without it (BuildFor), which is logged once per node and counted
// (sluice_xds_features_withheld_total{feature}).
type Feature int

// Features with a floor above MinEnvoy, oldest floor first.
const (
	// FeatureStatusOnError is ext_proc's status_on_error: without it
	// Envoy answers 500 when Sluice cannot be reached (a gRPC error), and
	// chain.PinExtProcStatus has the listener's local_reply_config set
	// the 503 (and the 504 of a message timeout) instead.
	FeatureStatusOnError Feature = iota
	// FeatureFallback is a fallback model's aggregate cluster with its
	// upstream ext_proc. Without it a fallback model goes to its first
	// provider only, as a single-provider model: chain.ExtProc tells the
	// processor so (chain.FallbackMetadataKey).
	FeatureFallback
	numFeatures
)

// featureTable is each feature's name (the metric label), the oldest
// release that runs it and why. envoy/README.md has the evidence.
var featureTable = [numFeatures]struct {
	name  string
	floor EnvoyVersion
	why   string
}{
	FeatureStatusOnError: {"status_on_error", EnvoyVersion{Major: 1, Minor: 36},
		"ext_proc status_on_error (envoy#41124, 1.36.0): without it an unreachable Sluice answers 500; the local reply mapper sets 503 instead"},
	FeatureFallback: {"fallback", EnvoyVersion{Major: 1, Minor: 37},
		"fallback needs ext_proc as an upstream filter (1.30.0), the upstream host visible to it (envoy#34332, 1.31.0) and the router's fix for an upstream filter stopping in encodeHeaders with retries on 5xx (envoy#41879, 1.37.0); fallback models go to their first provider only"},
}

func (f Feature) String() string {
	if f < 0 || f >= numFeatures {
		return "feature(" + strconv.Itoa(int(f)) + ")"
	}
	return featureTable[f].name
}

// Floor is the oldest Envoy release that runs f.
func (f Feature) Floor() EnvoyVersion { return featureTable[f].floor }

// Features is a set of features.
type Features uint8

// AllFeatures is every feature: what a node of a current (or an unknown)
// release is served.
const AllFeatures = Features(1<<numFeatures - 1)

// Has reports whether fs holds f.
func (fs Features) Has(f Feature) bool { return fs&(1<<f) != 0 }

// List names the features of fs, in floor order.
func (fs Features) List() []string {
	var out []string
	for f := range numFeatures {
		if fs.Has(f) {
			out = append(out, f.String())
		}
	}
	return out
}

// FeaturesOf is what release v can run.
func FeaturesOf(v EnvoyVersion) Features {
	var fs Features
	for f := range numFeatures {
		if !v.Less(f.Floor()) {
			fs |= 1 << f
		}
	}
	return fs
}

// envoyLevels are the distinct feature sets of the releases Sluice serves,
// newest first: the Envoy variants a group's snapshots are built for
// (variants). A handful, whatever the number of releases in a fleet.
var envoyLevels = func() []Features {
	levels := []Features{AllFeatures}
	floors := []EnvoyVersion{MinEnvoy}
	for f := range numFeatures {
		floors = append(floors, f.Floor())
	}
	for _, v := range floors {
		fs := FeaturesOf(v)
		seen := false
		for _, l := range levels {
			seen = seen || l == fs
		}
		if !seen {
			levels = append(levels, fs)
		}
	}
	return levels
}()

// maxVersionLen bounds a version string read from the network; a real
// one is a dozen bytes.
const maxVersionLen = 64

// ParseEnvoyVersion reads a version string as Envoy writes its own
// (VersionInfo::makeBuildVersion, source/common/version/version.cc:
// MAJOR.MINOR.PATCH with an optional "-label"), also accepting a leading
// "v" and a missing patch ("1.31" is 1.31.0). A label makes it a pre-release
// (Pre), except "contrib", which marks a release built with the contrib
// extensions ("1.31.2-contrib"; "dev-contrib" is still a pre-release). It
// reports false for anything else: an empty, over-long or non-numeric
// version, or a number past 999,999,999.
func ParseEnvoyVersion(s string) (EnvoyVersion, bool) {
	if len(s) > maxVersionLen {
		return EnvoyVersion{}, false
	}
	s = strings.TrimPrefix(strings.TrimPrefix(s, "v"), "V")
	num, label, hasLabel := strings.Cut(s, "-")
	parts := strings.Split(num, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return EnvoyVersion{}, false
	}
	var n [3]uint32
	for i, p := range parts {
		v, ok := parseComponent(p)
		if !ok {
			return EnvoyVersion{}, false
		}
		n[i] = v
	}
	if hasLabel && label == "" {
		return EnvoyVersion{}, false
	}
	return EnvoyVersion{Major: n[0], Minor: n[1], Patch: n[2], Pre: preRelease(label)}, true
}

// parseComponent reads one decimal number of at most nine digits (so that
// it fits a uint32 and a SemanticVersion field), no sign, no spaces.
func parseComponent(p string) (uint32, bool) {
	if p == "" || len(p) > 9 {
		return 0, false
	}
	var v uint32
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint32(c-'0')
	}
	return v, true
}

// preRelease reports whether a build label marks a build before its
// release: any label but "contrib", with a "-contrib" suffix set aside
// (the contrib image's labels: "contrib", "dev-contrib").
func preRelease(label string) bool {
	label = strings.TrimSuffix(label, "contrib")
	label = strings.TrimSuffix(label, "-")
	return label != ""
}

// NodeVersion is the Envoy release a node reports: its
// user_agent_build_version, which Envoy always sends (the bootstrap's, else
// its own, VersionInfo::buildVersion(): source/server/server.cc), with the
// "build.label" of its metadata; else its user_agent_version string, which
// other clients send (ParseEnvoyVersion). It reports false when neither
// gives a version: an all-zero build version is no version.
func NodeVersion(n *corev3.Node) (EnvoyVersion, bool) {
	if bv := n.GetUserAgentBuildVersion(); bv.GetVersion() != nil {
		sv := bv.GetVersion()
		v := EnvoyVersion{Major: sv.GetMajorNumber(), Minor: sv.GetMinorNumber(), Patch: sv.GetPatch()}
		if v == (EnvoyVersion{}) {
			return EnvoyVersion{}, false
		}
		label := bv.GetMetadata().GetFields()["build.label"].GetStringValue()
		v.Pre = preRelease(label)
		return v, true
	}
	if s := n.GetUserAgentVersion(); s != "" {
		return ParseEnvoyVersion(s)
	}
	return EnvoyVersion{}, false
}

// versionLabel is a node's reported version for logs, quoted as sent when
// it could not be read (and cut short: it comes from the network), "" when
// it sent none.
func versionLabel(n *corev3.Node) string {
	if v, ok := NodeVersion(n); ok {
		return v.String()
	}
	s := n.GetUserAgentVersion()
	if s == "" {
		return ""
	}
	if len(s) > maxVersionLen {
		s = s[:maxVersionLen] + "…"
	}
	return strconv.Quote(s)
}
