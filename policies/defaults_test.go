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
    usage: {total_excess: ignore}
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
		totalExcess   string
	}
	for name, want := range map[string]settings{
		"bare":  {DefaultConnectTimeout, DefaultIdleTimeout, DefaultRetries, "connect-failure", DefaultConsecutive5xx, DefaultBaseEjectionTime, "", TotalExcessOutput},
		"tuned": {time.Second, 2 * time.Second, 0, "reset", 3, 10 * time.Second, "/api/v1", TotalExcessIgnore},
	} {
		p, ok := snap.Provider(name)
		if !ok {
			t.Fatalf("provider %s missing", name)
		}
		got := settings{p.ConnectTimeout, p.IdleTimeout, *p.Retries.Max, p.Retries.On[0], p.OutlierDetection.Consecutive5xx, p.OutlierDetection.BaseEjectionTime, snap.PathPrefix(name),
			p.Usage.TotalExcess}
		if got != want {
			t.Errorf("provider %s: %+v, want %+v", name, got, want)
		}
	}
}

// TestProviderUsageTotalExcess: usage.total_excess is output, ignore or
// unset (output); anything else is a problem at its path, with the value
// it probably meant.
func TestProviderUsageTotalExcess(t *testing.T) {
	for value, want := range map[string]string{
		"output": "", "ignore": "", `""`: "",
		"ouput":  `providers[0].usage.total_excess: must be output or ignore, got "ouput" (did you mean "output"?)`,
		"Output": `providers[0].usage.total_excess: must be output or ignore, got "Output" (did you mean "output"?)`,
		"drop":   `providers[0].usage.total_excess: must be output or ignore, got "drop"`,
	} {
		doc := "providers:\n  - {name: p, kind: openai-compatible, base_url: \"http://127.0.0.1:1\", usage: {total_excess: " + value + "}}\n" +
			"models: [{name: m, provider: p}]\n"
		_, err := Parse([]byte(doc), "f.yaml", nil)
		var msgs []string
		if ps, ok := err.(Problems); ok {
			for _, p := range ps {
				msgs = append(msgs, p.Path+": "+p.Msg)
			}
		} else if err != nil {
			t.Fatalf("%s: %v", value, err)
		}
		switch {
		case want == "" && len(msgs) > 0:
			t.Errorf("%s: problems %q, want none", value, msgs)
		case want != "" && (len(msgs) != 1 || msgs[0] != want):
			t.Errorf("%s: problems %q, want %q", value, msgs, want)
		}
	}
}

// TestCAFileSettings: xds.upstream_ca_file defaults to the Debian/Ubuntu
// bundle; a provider's ca_file and a node group's upstream_ca_file are
// kept when set and left unset (nil, "inherit") otherwise.
func TestCAFileSettings(t *testing.T) {
	doc := `
providers:
  - {name: public, kind: openai-compatible, base_url: "https://llm.example"}
  - {name: corp, kind: openai-compatible, base_url: "https://llm.corp.example", ca_file: /etc/sluice/corp-ca.pem}
models:
  - {name: m, provider: public}
xds:
  node_groups:
    - {name: rhel, cluster: "rhel-*", upstream_ca_file: /etc/pki/tls/certs/ca-bundle.crt}
    - {name: plain, cluster: "plain-*"}
`
	cfg, err := Parse([]byte(doc), "sluice.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := Compile(cfg, "sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.XDS().UpstreamCAFile; got != "/etc/ssl/certs/ca-certificates.crt" {
		t.Errorf("xds.upstream_ca_file = %q, want the default %q", got, "/etc/ssl/certs/ca-certificates.crt")
	}
	public, _ := snap.Provider("public")
	corp, _ := snap.Provider("corp")
	if public.CAFile != nil || corp.CAFile == nil || *corp.CAFile != "/etc/sluice/corp-ca.pem" {
		t.Errorf("ca_file: public %v, corp %v", public.CAFile, corp.CAFile)
	}
	groups := snap.XDS().NodeGroups
	if groups[0].UpstreamCAFile == nil || *groups[0].UpstreamCAFile != "/etc/pki/tls/certs/ca-bundle.crt" || groups[1].UpstreamCAFile != nil {
		t.Errorf("node group upstream_ca_file: %v, %v", groups[0].UpstreamCAFile, groups[1].UpstreamCAFile)
	}
}
