package policies

import (
	"strings"
	"testing"
	"time"
)

// TestValidateBounds: every bounded setting accepts its bounds and refuses
// the value just past them, so a bound off by one shows.
func TestValidateBounds(t *testing.T) {
	i64 := func(n int64) *int64 { return &n }
	group := func(name string) func(c *Config) {
		return func(c *Config) { c.XDS.NodeGroups = []NodeGroup{{Name: name, Cluster: "edge"}} }
	}
	for _, tt := range []struct {
		name   string
		change func(c *Config)
		path   string // of the problem, "" for none
	}{
		{"admin token of 16", func(c *Config) { c.Admin.Token = Secret(strings.Repeat("t", 16)) }, ""},
		{"admin token of 15", func(c *Config) { c.Admin.Token = Secret(strings.Repeat("t", 15)) }, "admin.token"},
		{"no admin token", func(c *Config) { c.Admin.Token = "" }, ""},
		{"body limit of 1", func(c *Config) { c.Gateway.MaxRequestBodyBytes = 1 }, ""},
		{"body limit of 0", func(c *Config) { c.Gateway.MaxRequestBodyBytes = 0 }, "gateway.max_request_body_bytes"},
		{"body limit at the maximum", func(c *Config) { c.Gateway.MaxRequestBodyBytes = maxBodyLimit }, ""},
		{"body limit past the maximum", func(c *Config) { c.Gateway.MaxRequestBodyBytes = maxBodyLimit + 1 }, "gateway.max_request_body_bytes"},
		{"reservation ttl of 1m", func(c *Config) { c.Gateway.ReservationTTL = time.Minute }, ""},
		{"reservation ttl under 1m", func(c *Config) { c.Gateway.ReservationTTL = time.Minute - time.Second }, "gateway.reservation_ttl"},
		{"no request timeout", func(c *Config) { c.Gateway.RequestTimeout = 0 }, ""},
		{"a negative request timeout", func(c *Config) { c.Gateway.RequestTimeout = -time.Second }, "gateway.request_timeout"},
		{"no stream idle timeout", func(c *Config) { c.Gateway.StreamIdleTimeout = 0 }, ""},
		{"a negative stream idle timeout", func(c *Config) { c.Gateway.StreamIdleTimeout = -time.Second }, "gateway.stream_idle_timeout"},
		{"default output cap of 1", func(c *Config) { c.Gateway.DefaultMaxOutputTokens = 1 }, ""},
		{"default output cap of 0", func(c *Config) { c.Gateway.DefaultMaxOutputTokens = 0 }, "gateway.default_max_output_tokens"},
		{"0 retries", func(c *Config) { c.Providers[0].Retries.Max = i64(0) }, ""},
		{"10 retries", func(c *Config) { c.Providers[0].Retries.Max = i64(10) }, ""},
		{"11 retries", func(c *Config) { c.Providers[0].Retries.Max = i64(11) }, "providers[0].retries.max"},
		{"-1 retries", func(c *Config) { c.Providers[0].Retries.Max = i64(-1) }, "providers[0].retries.max"},
		{"outlier detection off", func(c *Config) { c.Providers[0].OutlierDetection.Consecutive5xx = -1 }, ""},
		{"outlier detection -2", func(c *Config) { c.Providers[0].OutlierDetection.Consecutive5xx = -2 }, "providers[0].outlier_detection.consecutive_5xx"},
		{"node group named well", group("edge-1"), ""},
		{"node group named badly", group("Edge 1"), "xds.node_groups[0].name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.change(c)
			var paths []string
			for _, p := range c.Validate() {
				paths = append(paths, p.Path)
			}
			switch {
			case tt.path == "" && len(paths) > 0:
				t.Errorf("problems at %q, want none", paths)
			case tt.path != "" && (len(paths) != 1 || paths[0] != tt.path):
				t.Errorf("problems at %q, want one at %s", paths, tt.path)
			}
		})
	}
}

// TestSortedByIndex: suggestions are offered in the order the names come
// in the file.
func TestSortedByIndex(t *testing.T) {
	got := sortedByIndex(map[string]int{"c": 2, "a": 0, "d": 3, "b": 1})
	if strings.Join(got, ",") != "a,b,c,d" {
		t.Errorf("sortedByIndex = %q, want a,b,c,d", got)
	}
}

// Equivalent mutants gremlins leaves alive in this package:
//   - load.go, parse: "len(docs[0].Content) > 0" as ">= 0": yaml.v3 gives
//     every document node exactly one content node (TestEmptyDocuments).
//   - load.go, parse: "d.steps <= d.maxSteps" as "<": at the bound the
//     "too large" problem has path "", which covers every check issue, so
//     running check adds nothing (TestDecodeBoundReportsOnlyItself).
//   - decode.go, decodeInt: "err == nil && v.OverflowInt(i)" negated:
//     every integer field is an int64, which a parsed int64 never
//     overflows.
//   - decode.go, mappingPairs: "i+1 < len(n.Content)" as "<=": a mapping
//     node's content has an even length, so i+1 never equals it.
//   - decode.go, locateSyntaxError: "off < len(data)" as "<=": the extra
//     empty line it adds ends where the line before it ends.
//   - problem.go, splitPath: "end < 0" as "<= 0": the path starts with
//     '[' there, so ']' is never at index 0.
//   - watcher.go, poll: "w.seen != nil && sameStat" negated: the file is
//     read again, but its content hash is unchanged, so nothing reloads.
//   - watcher.go, remember: "age >= settleTime" as ">" and
//     "age < -settleTime" as "<=": they differ only when the age is
//     exactly settleTime, which a test cannot arrange without a clock.
