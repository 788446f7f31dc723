package policies

import (
	"testing"
	"time"
)

// TestProviderDefaults: a provider's unset Envoy settings take their
// defaults and set ones are kept; its base URL's path is the prefix of
// every path sent to it.
func TestProviderDefaults(t *testing.T) {
	doc := `
providers:
  - {name: bare, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}
  - name: tuned
    kind: openai-compatible
    base_url: "http://127.0.0.1:8001/api/v1/"
    connect_timeout: 1s
    idle_timeout: 2s
    retries: {max: 0, on: [reset]}
    outlier_detection: {consecutive_5xx: 3, base_ejection_time: 10s}
models:
  - {name: m, provider: bare}
`
	cfg, err := Parse([]byte(doc), "sluice.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := Compile(cfg, "sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type settings struct {
		connect, idle time.Duration
		retries       int64
		on            string
		c5xx          int64
		ejection      time.Duration
		prefix        string
	}
	for name, want := range map[string]settings{
		"bare":  {DefaultConnectTimeout, DefaultIdleTimeout, DefaultRetries, "connect-failure", DefaultConsecutive5xx, DefaultBaseEjectionTime, ""},
		"tuned": {time.Second, 2 * time.Second, 0, "reset", 3, 10 * time.Second, "/api/v1"},
	} {
		p, ok := snap.Provider(name)
		if !ok {
			t.Fatalf("provider %s missing", name)
		}
		got := settings{p.ConnectTimeout, p.IdleTimeout, *p.Retries.Max, p.Retries.On[0], p.OutlierDetection.Consecutive5xx, p.OutlierDetection.BaseEjectionTime, snap.PathPrefix(name)}
		if got != want {
			t.Errorf("provider %s: %+v, want %+v", name, got, want)
		}
	}
}
