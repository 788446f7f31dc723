package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/xds"
)

// accessLogProviderKey is the provider credential; no log line may carry it.
const accessLogProviderKey = "sk-accesslog-provider-credential"

// accessLogPolicy: one metered model, unknown paths passed to its
// provider, the listener's access log in a file (the second %s).
const accessLogPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
gateway: {unknown_paths: pass, pass_to: {openai: p1}}
providers:
  - {name: p1, kind: openai, base_url: "http://%s", api_key: ` + accessLogProviderKey + `}
models:
  - {name: m1, provider: p1}
pricing:
  m1: {input: 150000, output: 600000}
teams: [{name: t}]
xds: {access_log: "%s"}
`

// Variable parts of a line: START_TIME (AccessLogDateTimeFormatter's UTC
// milliseconds) and DURATION (whole milliseconds, a number).
var (
	accessLogStart    = regexp.MustCompile(`"start_time":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"`)
	accessLogDuration = regexp.MustCompile(`"duration_ms":\d+,`)
)

// TestAccessLogEndToEnd: the JSON line Sluice's listener writes to the
// file xds.access_log names — through the emulator, and a real Envoy
// where one is on PATH — for a metered request, a stream, a request
// denied for a bad key and one passed to pass_to, exactly: usage where
// Sluice metered (and equal to the ledger's record), null where it did
// not, numbers as numbers, and no key material nor signature.
func TestAccessLogEndToEnd(t *testing.T) {
	_, addr := mockProvider(t, mockllm.Options{})
	logPath := filepath.Join(t.TempDir(), "access.log")
	s := startSluice(t, fmt.Sprintf(accessLogPolicy, addr, logPath))
	keyID, key := s.createKey(t, "t")
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-" + strings.ReplaceAll(t.Name(), "/", "-"), XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	chat := `{"model":"m1","messages":[{"role":"user","content":"hi"}]}`
	eachProxy(t, b, func(t *testing.T, p proxy) {
		if err := os.Truncate(logPath, 0); err != nil {
			t.Fatal(err)
		}
		metered := func(rid string) string {
			r := s.awaitRecord(t, rid)
			return fmt.Sprintf(`{"attempts":1,"caller_key_id":%q,"caller_team":"t","cost_micros":%d,"details":"via_upstream","duration_ms":D,"estimated":%t,"flags":"-",`+
				`"input_tokens":%d,"key_id":%q,"method":"POST","model":"m1","outcome":"ok","output_tokens":%d,"path":"/v1/chat/completions",`+
				`"provider":"p1","request_id":%q,"start_time":T,"status":200,"team":"t","upstream_cluster":"p1"}`,
				keyID, money.FromPico(r.CostPico).MicrosUp(), r.Estimated, r.Tokens[tokens.Input], keyID, r.Tokens[tokens.Output], rid)
		}
		unmetered := func(status int, details, flags, path, cluster string, attempts int, caller string) func(string) string {
			return func(rid string) string {
				return fmt.Sprintf(`{"attempts":%d,"caller_key_id":%s,"caller_team":%s,"cost_micros":null,"details":%q,"duration_ms":D,"estimated":null,"flags":%q,`+
					`"input_tokens":null,"key_id":null,"method":"POST","model":null,"outcome":null,"output_tokens":null,"path":%q,`+
					`"provider":null,"request_id":%q,"start_time":T,"status":%d,"team":null,"upstream_cluster":%s}`,
					attempts, caller, map[bool]string{true: "null", false: `"t"`}[caller == "null"], details, flags, path, rid, status, cluster)
			}
		}
		cases := []struct {
			name   string
			call   call
			key    string
			status int
			want   func(rid string) string
		}{
			{"metered", call{path: "/v1/chat/completions", body: chat}, key, 200, metered},
			{"stream", call{path: "/v1/chat/completions", body: `{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"}]}`}, key, 200, metered},
			// ext_authz's denial: UAEX, no router (no attempt), and the
			// route resolved before Sluice chose a provider names no
			// cluster.
			{"denied", call{path: "/v1/chat/completions", body: chat}, "sk-sluice-not-a-key", 401,
				unmetered(401, "ext_authz_denied", "UAEX", "/v1/chat/completions", "null", 0, "null")},
			// Passed to p1 untouched; the mock answers 404.
			{"passed", call{path: "/v1/files", body: `{}`}, key, 404,
				unmetered(404, "via_upstream", "-", "/v1/files", `"p1"`, 1, strconv.Quote(keyID))},
		}
		for _, c := range cases {
			if st, _, body := c.call.do(t, p.url, c.key); st != c.status {
				t.Fatalf("%s: %d %s, want %d", c.name, st, body, c.status)
			}
		}

		// Envoy flushes its log file every second; poll for the lines.
		deadline := time.Now().Add(10 * time.Second)
		var data []byte
		for bytes.Count(data, []byte("\n")) < len(cases) {
			if time.Now().After(deadline) {
				t.Fatalf("access log has %q, want %d lines", data, len(cases))
			}
			time.Sleep(20 * time.Millisecond)
			data, _ = os.ReadFile(logPath)
		}
		got := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
		if len(got) != len(cases) {
			t.Fatalf("access log has %d lines, want %d:\n%s", len(got), len(cases), data)
		}
		for i, line := range got {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Errorf("%s: not JSON: %v\n%s", cases[i].name, err, line)
				continue
			}
			// The request id is Envoy's (x-request-id at the end of the
			// stream); the ledger's record of a metered request carries
			// the same one.
			rid, _ := m["request_id"].(string)
			if rid == "" {
				t.Errorf("%s: no request_id: %s", cases[i].name, line)
				continue
			}
			norm := accessLogStart.ReplaceAllString(line, `"start_time":T`)
			norm = accessLogDuration.ReplaceAllString(norm, `"duration_ms":D,`)
			if want := cases[i].want(rid); norm != want {
				t.Errorf("%s line:\n got %s\nwant %s", cases[i].name, norm, want)
			}
		}
		// No credential, no key, no signature.
		for _, bad := range []string{"sk-", key, accessLogProviderKey, `"v1.`, `"sig"`, `"fallback_sig"`, "authorization"} {
			if bytes.Contains(data, []byte(bad)) {
				t.Errorf("access log carries %q:\n%s", bad, data)
			}
		}
	})
}
