package policies

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestAdmissionRedis: admission.redis may be a URL alone or a mapping;
// the snapshot applies the timeout's default and resolves the TLS files
// beside the config file; without it, counters are per replica and the
// failure mode is closed.
func TestAdmissionRedis(t *testing.T) {
	lookup := func(string) (string, bool) { return "rediss://u:pw@redis:6380/0", true }
	for _, tt := range []struct {
		yaml string
		want Redis
		mode string
	}{
		{"", Redis{}, FailClosed},
		{"admission: {redis: '${R}'}\n", Redis{URL: "rediss://u:pw@redis:6380/0", Timeout: DefaultRedisTimeout}, FailClosed},
		{"admission: {failure_mode: open, redis: {url: '${R}', cluster: true, timeout: 20ms, tls: {ca_file: ca.pem, cert_file: /c.pem, key_file: k.pem}}}\n",
			Redis{URL: "rediss://u:pw@redis:6380/0", Cluster: true, Timeout: 20 * time.Millisecond,
				TLS: RedisTLS{CAFile: "/etc/sluice/ca.pem", CertFile: "/c.pem", KeyFile: "/etc/sluice/k.pem"}}, FailOpen},
	} {
		cfg, err := Parse([]byte(base+tt.yaml), "/etc/sluice/sluice.yaml", lookup)
		if err != nil {
			t.Fatalf("%q: %v", tt.yaml, err)
		}
		snap, err := CompileWithoutProviderKeys(cfg, "/etc/sluice/sluice.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, snap.AdmissionRedis()); diff != "" || snap.FailureMode() != tt.mode {
			t.Errorf("%q: redis (-want +got):\n%s; failure mode %q, want %q", tt.yaml, diff, snap.FailureMode(), tt.mode)
		}
	}
}

// TestAdmissionProblems: every bad setting is named with its place; the
// URL, which may hold a password, never is.
func TestAdmissionProblems(t *testing.T) {
	lookup := func(string) (string, bool) { return "redis://u:SECRET@redis:6379/0", true }
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"everything wrong", `admission:
  failure_mode: ajar
  redis:
    url: ${R}
    timeout: 11s
    tls: {cert_file: c.pem}
`, []string{
			"f.yaml:10:17: admission.failure_mode: must be closed or open, got \"ajar\"",
			"f.yaml:12:10: admission.redis.url: want a Redis URL, redis://user:password@host:6379/0 (rediss:// for TLS), its password percent-encoded (the value is not shown: it may hold a password)",
			"f.yaml:13:14: admission.redis.timeout: must be between 1ms and 10s (0: 50ms), got 11s",
			"f.yaml:14:5: admission.redis.tls: cert_file and key_file go together (the client certificate and its key)",
		}},
		{"not a URL", "admission: {redis: 'redis-host:6379'}\n", []string{
			"f.yaml:9:20: admission.redis.url: want a Redis URL, redis://user:password@host:6379/0 (rediss:// for TLS), its password percent-encoded (the value is not shown: it may hold a password)",
		}},
		{"settings without a URL", "admission: {redis: {cluster: true}}\n", []string{
			"f.yaml:9:13: admission.redis: url is required with its other settings",
		}},
		{"failure modes in limits", `orgs:
  - name: o
    limits: {failure_mode: open, models: {llama3: {failure_mode: closed}}}
teams:
  - name: t
    org: o
    limits: {failure_mode: shut}
`, []string{
			"f.yaml:11:66: orgs[0].limits.models.llama3.failure_mode: not per model: a key's, team's or org's limits declare it",
			"f.yaml:15:28: teams[0].limits.failure_mode: must be closed or open, got \"shut\"",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := tt.yaml
			if tt.name == "everything wrong" {
				y = strings.Replace(y, "url: ${R}", "url: 'redis-host:6379'", 1)
			}
			_, err := Parse([]byte(base+y), "f.yaml", lookup)
			var ps Problems
			if !errors.As(err, &ps) {
				t.Fatalf("Parse = %v, want Problems", err)
			}
			var got []string
			for _, p := range ps {
				got = append(got, p.String())
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("the URL leaked: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s\ngot:\n%s", diff, strings.Join(got, "\n"))
			}
		})
	}
}
