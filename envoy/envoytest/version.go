package envoytest

// The Envoy release the emulator plays (Options.EnvoyVersion): what its
// node reports over ADS, and the few behaviours that differ between the
// releases Sluice serves (envoy/README.md, "Envoy versions"), so that a
// test can run an old Envoy and a new one against one control plane.
// This package's README.md ("Envoy versions") lists what is emulated.

import (
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// DefaultEnvoyVersion is the release the emulator plays when
// Options.EnvoyVersion is empty: the release of the Envoy API it is built
// with (go.mod: github.com/envoyproxy/go-control-plane/envoy v1.40.0;
// TestDefaultEnvoyVersionIsTheAPIs).
const DefaultEnvoyVersion = "1.40.0"

// envoyVersion is an Envoy release: MAJOR.MINOR.PATCH with an optional
// build label ("1.37.0-dev", a build of main before 1.37.0).
type envoyVersion struct {
	major, minor, patch uint32
	label               string
}

// parseEnvoyVersion reads a version as Envoy's VersionInfo::makeBuildVersion
// reads its own (source/common/version/version.cc):
// "(\d+)\.(\d+)\.(\d+)(-(.*))?".
func parseEnvoyVersion(s string) (envoyVersion, error) {
	num, label, hasLabel := strings.Cut(s, "-")
	parts := strings.Split(num, ".")
	if len(parts) != 3 || hasLabel && label == "" {
		return envoyVersion{}, fmt.Errorf("envoy version %q: want MAJOR.MINOR.PATCH[-LABEL]", s)
	}
	var n [3]uint32
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 32)
		if err != nil || p == "" || p[0] == '+' {
			return envoyVersion{}, fmt.Errorf("envoy version %q: want MAJOR.MINOR.PATCH[-LABEL]", s)
		}
		n[i] = uint32(v)
	}
	return envoyVersion{major: n[0], minor: n[1], patch: n[2], label: label}, nil
}

func (v envoyVersion) String() string {
	s := fmt.Sprintf("%d.%d.%d", v.major, v.minor, v.patch)
	if v.label != "" {
		s += "-" + v.label
	}
	return s
}

// has reports whether v is release major.minor.0 or later. A build with a
// label other than "contrib" (the contrib image's) is a build before its
// release, so 1.36.0-dev does not have what 1.36.0 brought.
func (v envoyVersion) has(major, minor uint32) bool {
	if v.major != major {
		return v.major > major
	}
	if v.minor != minor {
		return v.minor > minor
	}
	pre := strings.TrimSuffix(strings.TrimSuffix(v.label, "contrib"), "-") != ""
	return v.patch > 0 || !pre
}

// buildVersion is what Envoy reports as its node's
// user_agent_build_version: VersionInfo::buildVersion(), the version
// number and metadata build.label (when there is one), build.type,
// ssl.version, revision.sha and revision.status
// (VersionInfo::makeBuildVersion). Envoy's node carries this, not the
// user_agent_version string: the two are one oneof, and server.cc fills
// the build version.
func (v envoyVersion) buildVersion() *corev3.BuildVersion {
	fields := map[string]any{
		"build.type":      "RELEASE",
		"ssl.version":     "BoringSSL",
		"revision.sha":    "envoytest",
		"revision.status": "Emulated",
	}
	if v.label != "" {
		fields["build.label"] = v.label
	}
	md, _ := structpb.NewStruct(fields) // strings only: cannot fail
	return &corev3.BuildVersion{
		Version:  &typev3.SemanticVersion{MajorNumber: v.major, MinorNumber: v.minor, Patch: v.patch},
		Metadata: md,
	}
}

// EnvoyVersion is the Envoy release the emulator plays.
func (e *Emulator) EnvoyVersion() string { return e.version.String() }

// Releases of the behaviours that differ between the releases Sluice
// serves (envoy/README.md, "Envoy versions").
const (
	// ext_proc is an upstream HTTP filter since 1.30.0
	// (changelogs/1.30.0.yaml: "made the ExternalProcessor work as an
	// upstream filter"; envoy#33273). Before, the ext_proc factory is not
	// registered for envoy.filters.http.upstream.
	extProcUpstreamMinor = 30
	// ext_proc answers a message timeout with 504 since 1.31.0
	// (changelogs/1.31.0.yaml: "Timeout errors in external processor now
	// returns 504 Gateway Timeout … previously … 500").
	extProcTimeout504Minor = 31
	// ext_proc has status_on_error since 1.36.0 (changelogs/1.36.0.yaml,
	// envoy#41124); before, onGrpcError answers a hard-coded 500.
	extProcStatusOnErrorMinor = 36
)

// checkUpstreamFilterRelease refuses, as the emulated release refuses, an
// upstream HTTP filter it has no upstream factory for: before 1.30 ext_proc
// is a downstream filter only, and the cluster's filter chain fails to
// build (Config::Utility::getAndCheckFactory for
// UpstreamHttpFilterConfigFactory: "Didn't find a registered implementation
// for …"), so Envoy rejects the cluster.
func (e *Emulator) checkUpstreamFilterRelease(name, typeName string) error {
	if typeName == typeExtProc && !e.version.has(1, extProcUpstreamMinor) {
		return fmt.Errorf("Didn't find a registered implementation for '%s' with type URL: '%s' (Envoy %s: ext_proc is an upstream filter since 1.30.0)", name, typeName, e.version)
	}
	return nil
}

// extProcTimeoutStatus is the status of ext_proc's message-timeout reply
// in the emulated release (Filter::onMessageTimeout).
func (e *Emulator) extProcTimeoutStatus() int {
	if e.version.has(1, extProcTimeout504Minor) {
		return 504
	}
	return 500
}

// extProcStatusOnError is status_on_error as the emulated release reads
// it: an Envoy before 1.36 does not know the field, ignores it — unknown
// fields of xDS resources are accepted with a warning, not rejected
// (ProtobufMessage::ValidationVisitor for dynamic config) — and answers
// 500 (ok false).
func (e *Emulator) extProcStatusOnError(s *typev3.HttpStatus) (code int, ok bool) {
	if !e.version.has(1, extProcStatusOnErrorMinor) {
		if s != nil {
			e.log.Warn("unknown field ignored: ext_proc status_on_error (Envoy before 1.36.0 does not have it; a gRPC error answers 500)", "envoy_version", e.version.String())
		}
		return 0, false
	}
	return int(s.GetCode()), true
}
