package xds

import (
	"testing"

	fixedheapv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/fixed_heap/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
)

// TestBootstrapOverloadManager: with a heap limit the bootstrap carries
// Envoy's edge overload manager — fixed_heap at that size, shrink_heap at
// 95%, stop_accepting_requests at 98% — and it survives YAML and
// validation as Envoy reads it; without one there is none.
func TestBootstrapOverloadManager(t *testing.T) {
	b, err := Bootstrap(BootstrapOptions{XDSAddress: "127.0.0.1:18000"})
	if err != nil {
		t.Fatal(err)
	}
	if b.GetOverloadManager() != nil {
		t.Error("an overload manager without a heap limit")
	}
	b, err = Bootstrap(BootstrapOptions{XDSAddress: "127.0.0.1:18000", MaxHeapBytes: 2 << 30})
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
	om := b.GetOverloadManager()
	if len(om.GetResourceMonitors()) != 1 || om.GetResourceMonitors()[0].GetName() != "envoy.resource_monitors.fixed_heap" {
		t.Fatalf("monitors %v", om.GetResourceMonitors())
	}
	fh := &fixedheapv3.FixedHeapConfig{}
	if err := om.GetResourceMonitors()[0].GetTypedConfig().UnmarshalTo(fh); err != nil || fh.GetMaxHeapSizeBytes() != 2<<30 {
		t.Errorf("fixed_heap %v %v", fh, err)
	}
	want := map[string]float64{"envoy.overload_actions.shrink_heap": 0.95, "envoy.overload_actions.stop_accepting_requests": 0.98}
	for _, a := range om.GetActions() {
		if len(a.GetTriggers()) != 1 || a.GetTriggers()[0].GetName() != "envoy.resource_monitors.fixed_heap" || a.GetTriggers()[0].GetThreshold().GetValue() != want[a.GetName()] {
			t.Errorf("action %v", a)
		}
		delete(want, a.GetName())
	}
	if len(want) != 0 {
		t.Errorf("actions missing: %v", want)
	}
}
