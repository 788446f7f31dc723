package policies

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestValidateSecurity(t *testing.T) {
	long := Secret(strings.Repeat("s", MinPrincipalSecretBytes))
	tests := []struct {
		name   string
		change func(c *Config)
		want   []string
	}{
		{"keys, TLS and extension TLS", func(c *Config) {
			c.Security = Security{PrincipalKeys: []PrincipalKey{{Value: long}, {File: "old.key"}}, PrincipalMaxAge: time.Minute,
				TLS: &ServerTLS{CertFile: "tls.crt", KeyFile: "tls.key", ClientCAFile: "ca.crt",
					AllowedClients: Identities{URIs: []string{"spiffe://cluster.local/ns/istio-system/sa/gw"}, DNS: []string{"envoy.internal"}}}}
			c.XDS.ExtensionTLS = &ExtensionTLS{SNI: "sluice.internal", CertFile: "/etc/envoy/c.pem", KeyFile: "/etc/envoy/k.pem", CAFile: "/etc/envoy/ca.pem",
				ServerSANs: Identities{URIs: []string{"spiffe://corp/sluice"}}}
			c.XDS.Proxyless = ProxylessRoutingOnly
		}, nil},
		{"SDS names", func(c *Config) {
			c.XDS.ExtensionTLS = &ExtensionTLS{SDSCertificate: "envoy-cert", SDSValidation: "sluice-ca"}
		}, nil},
		{"principal keys", func(c *Config) {
			c.Security.PrincipalKeys = []PrincipalKey{{}, {Value: "short"}, {Value: long, File: "k"}}
			c.Security.PrincipalMaxAge = 0
		}, []string{
			"security.principal_keys[0]: set exactly one of value (normally ${ENV}) or file",
			"security.principal_keys[1].value: must be at least 32 bytes, got 5 (make one with: openssl rand -base64 32)",
			"security.principal_keys[2]: set exactly one of value (normally ${ENV}) or file",
			"security.principal_max_age: must be between 1s and 1h0m0s, got 0s",
		}},
		{"a day's max age", func(c *Config) { c.Security.PrincipalMaxAge = 24 * time.Hour }, []string{
			"security.principal_max_age: must be between 1s and 1h0m0s, got 24h0m0s",
		}},
		{"server TLS", func(c *Config) {
			c.Security.TLS = &ServerTLS{AllowedClients: Identities{URIs: []string{"no scheme", ""}, DNS: []string{"", "https://x"}}}
		}, []string{
			"security.tls.allowed_clients: requires client_ca_file: client identities are only known from verified client certificates",
			`security.tls.allowed_clients.dns[0]: must be a DNS name such as envoy.example.internal, got ""`,
			`security.tls.allowed_clients.dns[1]: must be a DNS name such as envoy.example.internal, got "https://x"`,
			`security.tls.allowed_clients.uris[0]: must be a URI such as spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account, got "no scheme"`,
			`security.tls.allowed_clients.uris[1]: must be a URI such as spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account, got ""`,
			"security.tls.cert_file: required (Sluice's certificate chain, PEM)",
			"security.tls.key_file: required (the certificate's private key, PEM)",
		}},
		{"extension TLS", func(c *Config) {
			c.XDS.ExtensionTLS = &ExtensionTLS{SNI: "a b", CertFile: "rel.pem", SDSCertificate: "x", CAFile: "ca.pem", SDSValidation: "y"}
		}, []string{
			"xds.extension_tls: set either cert_file and key_file or sds_certificate, not both",
			"xds.extension_tls: set either ca_file or sds_validation, not both",
			"xds.extension_tls.ca_file: must be an absolute path on Envoy's machine, got \"ca.pem\"",
			"xds.extension_tls.cert_file: must be an absolute path on Envoy's machine, got \"rel.pem\"",
			`xds.extension_tls.sni: must be a DNS name, got "a b"`,
		}},
		{"extension TLS with nothing", func(c *Config) { c.XDS.ExtensionTLS = &ExtensionTLS{} }, []string{
			"xds.extension_tls: set cert_file and key_file, or sds_certificate: Envoy needs a client certificate for Sluice's mTLS",
			"xds.extension_tls: set ca_file or sds_validation: Envoy must verify Sluice's certificate",
		}},
		{"a key without its certificate", func(c *Config) {
			c.XDS.ExtensionTLS = &ExtensionTLS{KeyFile: "/k.pem", CAFile: "/ca.pem"}
		}, []string{"xds.extension_tls: cert_file and key_file go together (Envoy's client certificate and its key)"}},
		{"proxyless", func(c *Config) { c.XDS.Proxyless = "on" }, []string{`xds.proxyless: must be off or routing_only, got "on"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.change(c)
			var got []string
			for _, p := range c.Validate() {
				got = append(got, p.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPrincipalKeyFiles: a key file is read relative to the config file,
// its trailing newline dropped; a missing or short one is a problem of
// its path; the secrets keep their order, the first (the one that signs)
// first. internal/app's TestPrincipalKeysOfSnapshot signs with them.
func TestPrincipalKeyFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sluice.yaml")
	first, second := strings.Repeat("a", 40), strings.Repeat("b", 32)
	if err := os.WriteFile(filepath.Join(dir, "old.key"), []byte(second+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "short.key"), []byte("tiny\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := validConfig()
	c.Security.PrincipalKeys = []PrincipalKey{{Value: Secret(first)}, {File: "old.key"}}
	snap, err := Compile(c, file)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range snap.PrincipalSecrets() {
		got = append(got, s.Reveal())
	}
	if diff := cmp.Diff([]string{first, second}, got); diff != "" {
		t.Errorf("PrincipalSecrets (-want +got):\n%s", diff)
	}
	for _, bad := range []struct{ file, want string }{
		{"missing.key", "security.principal_keys[1].file: cannot read the secret: open " + filepath.Join(dir, "missing.key") + ": no such file or directory"},
		{"short.key", "security.principal_keys[1].file: " + filepath.Join(dir, "short.key") + " holds 4 bytes; a secret needs at least 32"},
	} {
		c.Security.PrincipalKeys[1].File = bad.file
		_, err := Compile(c, file)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.file, err, bad.want)
		}
	}
	c.Security.PrincipalKeys = nil
	if snap, err := Compile(c, file); err != nil || snap.PrincipalSecrets() != nil {
		t.Errorf("no keys: %v, %v", snap.PrincipalSecrets(), err)
	}
}
