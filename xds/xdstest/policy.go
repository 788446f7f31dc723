package xdstest

import "fmt"

// FanOutPolicy is the sluice.yaml the fan-out test and benchmark push to a
// fleet: three EDS providers. Between versions every xDS type changes:
// p0's connect timeout (clusters), p1's endpoint (assignments), p2's idle
// timeout (routes) and the access log (listener).
func FanOutPolicy(version int) string {
	return fmt.Sprintf(`
listen: {grpc: "127.0.0.1:9001", envoy: "127.0.0.1:10000"}
providers:
  - {name: p0, kind: openai-compatible, base_url: "http://p0.test:8000", endpoints: ["10.0.0.1:8000", "10.0.0.2:8000"], connect_timeout: %ds}
  - {name: p1, kind: openai-compatible, base_url: "http://p1.test:8000", endpoints: ["10.0.1.%d:8000"]}
  - {name: p2, kind: openai-compatible, base_url: "http://p2.test:8000", endpoints: ["10.0.2.1:8000"], idle_timeout: %dm}
models:
  - {name: m0, provider: p0}
  - {name: m1, provider: p1}
  - {name: m2, provider: p2}
xds: {access_log: "/tmp/sluice-access-%d.log"}
`, version, version, version, version)
}

// FanOutEDSNames are the assignments an Envoy subscribes to for
// FanOutPolicy.
var FanOutEDSNames = []string{"p0", "p1", "p2"}
