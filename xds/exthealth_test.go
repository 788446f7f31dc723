package xds

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// TestExtensionClusterHealth: the sluice.extension cluster checks each
// replica with gRPC health at xds.extension_health_check's interval (also
// without traffic), ejects one that fails five calls in a row (at most
// half of them), and pings its connections — in every node group.
func TestExtensionClusterHealth(t *testing.T) {
	p := compile(t, extensionPolicy("")+`  extension_health_check: {interval: 3s, timeout: 500ms, unhealthy_threshold: 4, healthy_threshold: 3}
`)
	for _, g := range Groups(p) {
		r, err := Build(p, g, FlavourEnvoy)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := Snapshot(r); err != nil {
			t.Fatalf("group %q: Snapshot: %v", g.Name, err)
		}
		c := sluiceClusterOf(t, r)
		if len(c.GetHealthChecks()) != 1 {
			t.Fatalf("group %q: health checks %v", g.Name, c.GetHealthChecks())
		}
		hc := c.GetHealthChecks()[0]
		if hc.GetGrpcHealthCheck() == nil || hc.GetGrpcHealthCheck().GetServiceName() != "" {
			t.Errorf("group %q: checker %v, want gRPC health of the whole server", g.Name, hc.GetHealthChecker())
		}
		if hc.GetInterval().AsDuration() != 3*time.Second || hc.GetNoTrafficInterval().AsDuration() != 3*time.Second ||
			hc.GetTimeout().AsDuration() != 500*time.Millisecond ||
			hc.GetUnhealthyThreshold().GetValue() != 4 || hc.GetHealthyThreshold().GetValue() != 3 {
			t.Errorf("group %q: health check %v", g.Name, hc)
		}
		od := c.GetOutlierDetection()
		if od.GetConsecutive_5Xx().GetValue() != 5 || od.GetMaxEjectionPercent().GetValue() != 50 {
			t.Errorf("group %q: outlier detection %v", g.Name, od)
		}
		opts := &upstreamhttpv3.HttpProtocolOptions{}
		if err := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsName].UnmarshalTo(opts); err != nil {
			t.Fatal(err)
		}
		var ka *corev3.KeepaliveSettings = opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions().GetConnectionKeepalive()
		if ka.GetInterval().AsDuration() != ExtensionKeepaliveInterval || ka.GetTimeout().AsDuration() != ExtensionKeepaliveTimeout {
			t.Errorf("group %q: keepalive %v", g.Name, ka)
		}
	}
}
