package xds

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
)

var update = flag.Bool("update", false, "rewrite envoy/bootstrap.yaml from Bootstrap's defaults")

// shippedBootstrap is the bootstrap checked in for users of a real Envoy.
const shippedBootstrap = "../envoy/bootstrap.yaml"

// parseBootstrapYAML reads a bootstrap as Envoy does: YAML → JSON → proto,
// unknown fields refused, every @type resolved (xds/extensions.go links
// them), then deep validation.
func parseBootstrapYAML(t *testing.T, data []byte) *bootstrapv3.Bootstrap {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil {
		t.Fatalf("unmarshal bootstrap: %v", err)
	}
	if err := Validate(b); err != nil {
		t.Fatalf("bootstrap does not validate: %v", err)
	}
	return b
}

func TestBootstrap(t *testing.T) {
	b, err := Bootstrap(BootstrapOptions{XDSAddress: "127.0.0.1:18000"})
	if err != nil {
		t.Fatal(err)
	}
	y, err := BootstrapYAML(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b, parseBootstrapYAML(t, y), protocmp.Transform()); diff != "" {
		t.Errorf("YAML round trip (-want +got):\n%s", diff)
	}
	if got := b.GetAdmin().GetAddress().GetSocketAddress().GetAddress(); got != "127.0.0.1" {
		t.Errorf("admin listens on %q, want loopback only", got)
	}
	if b.GetDynamicResources().GetAdsConfig().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != XDSCluster {
		t.Error("ADS does not use the xDS cluster")
	}

	shipped := append([]byte("# The bootstrap for a real Envoy next to `make run`'s Sluice (xDS on\n# 127.0.0.1:18000), as `sluice envoy bootstrap` prints it. Regenerate with\n# go test ./xds -run TestBootstrap -update\n"), y...)
	if *update {
		if err := os.WriteFile(shippedBootstrap, shipped, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(shippedBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, shipped) {
		t.Errorf("%s is not what Bootstrap generates; run go test ./xds -run TestBootstrap -update", shippedBootstrap)
	}
	parseBootstrapYAML(t, got)

	if _, err := Bootstrap(BootstrapOptions{XDSAddress: "sluice.internal:18000"}); err != nil {
		t.Errorf("a DNS name: %v", err)
	}
	for _, bad := range []string{"0.0.0.0:18000", "nope", ""} {
		if _, err := Bootstrap(BootstrapOptions{XDSAddress: bad}); err == nil || !strings.Contains(err.Error(), "xds address") {
			t.Errorf("Bootstrap(%q) error = %v", bad, err)
		}
	}
}
