package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckConfigSecurityWarnings: check-config warns of a config
// without principal keys, and of a gRPC or xDS listener off loopback
// without mTLS; not of one on loopback, nor of one with mTLS.
func TestCheckConfigSecurityWarnings(t *testing.T) {
	dir := t.TempDir()
	base := `providers: [{name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}]
models: [{name: m, provider: local}]
pricing: {m: {input: 1, output: 1}}
`
	for _, tc := range []struct {
		name, extra string
		want        []string // substrings of warnings, in order
	}{
		{"loopback, no keys", "", []string{"security.principal_keys is not set"}},
		{"keys, loopback", "security: {principal_keys: [{value: test-principal-key-0123456789abcdef}]}\n", nil},
		{"all interfaces without mTLS", "listen: {grpc: \"0.0.0.0:9001\", xds: \"[::]:18000\"}\nsecurity: {principal_keys: [{value: test-principal-key-0123456789abcdef}]}\n",
			[]string{"listen.grpc is 0.0.0.0:9001, off loopback, without mTLS", "listen.xds is [::]:18000, off loopback, without mTLS"}},
		{"TLS without client certificates", "listen: {grpc: \"10.0.0.5:9001\"}\nsecurity: {principal_keys: [{value: test-principal-key-0123456789abcdef}], tls: {cert_file: a.pem, key_file: a-key.pem}}\n",
			[]string{"listen.grpc is 10.0.0.5:9001, off loopback, without mTLS"}},
		{"mTLS", "listen: {grpc: \"0.0.0.0:9001\", xds: \"0.0.0.0:18000\"}\nsecurity: {principal_keys: [{value: test-principal-key-0123456789abcdef}], tls: {cert_file: a.pem, key_file: a-key.pem, client_ca_file: ca.pem}}\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(config, []byte(base+tc.extra), 0o600); err != nil {
				t.Fatal(err)
			}
			_, stderr, err := run(t, "check-config", config)
			if err != nil {
				t.Fatalf("check-config: %v\n%s", err, stderr)
			}
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
				if strings.HasPrefix(l, "warning: ") && (strings.Contains(l, "principal_keys") || strings.Contains(l, "off loopback")) {
					got = append(got, l)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("warnings %q, want %q", got, tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %d: %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
}

// TestEnvoyBootstrapExtensionTLS: with --config, the bootstrap's xDS
// cluster speaks xds.extension_tls (Envoy's client certificate, Sluice's
// CA and identity), and says so when it names secrets the bootstrap must
// define.
func TestEnvoyBootstrapExtensionTLS(t *testing.T) {
	dir := t.TempDir()
	base := `providers: [{name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}]
models: [{name: m, provider: local}]
listen: {xds: "sluice.internal:18000"}
`
	for _, tc := range []struct {
		name, tls string
		want      []string
	}{
		{"files", `{sni: sluice.internal, cert_file: /etc/envoy/c.pem, key_file: /etc/envoy/k.pem, ca_file: /etc/envoy/ca.pem, server_sans: {uris: ["spiffe://corp/sluice"]}}`,
			[]string{"envoy.transport_sockets.tls", "sni: sluice.internal", "filename: /etc/envoy/c.pem", "filename: /etc/envoy/k.pem", "filename: /etc/envoy/ca.pem", "exact: spiffe://corp/sluice", "- h2"}},
		{"secrets", `{sds_certificate: envoy-cert, sds_validation: sluice-ca}`,
			[]string{"name: envoy-cert", "name: sluice-ca", "define them\n# under static_resources.secrets"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config := filepath.Join(dir, tc.name+".yaml")
			if err := os.WriteFile(config, []byte(base+"xds: {extension_tls: "+tc.tls+"}\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			out, stderr, err := run(t, "envoy", "bootstrap", "--config", config)
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("bootstrap lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
