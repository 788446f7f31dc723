package policies

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPostgresMapping: postgres may be a URL alone or a mapping; the
// snapshot's connection string carries the mapping's settings as the
// URL's parameters (over the URL's own), its files resolved beside the
// config file.
func TestPostgresMapping(t *testing.T) {
	lookup := func(string) (string, bool) {
		return "postgres://u:pw@db:5432/x?sslmode=disable&application_name=sluice", true
	}
	tests := []struct {
		name, yaml string
		want       url.Values
	}{
		{"a URL alone", "store: {postgres: '${DB}'}\n", url.Values{"sslmode": {"disable"}, "application_name": {"sluice"}}},
		{"the mapping", `store:
  postgres:
    url: ${DB}
    max_conns: 20
    statement_timeout: 5s
    tls: {ca_file: ca.pem, cert_file: /etc/pg/client.pem, key_file: client.key}
`, url.Values{"sslmode": {"verify-full"}, "application_name": {"sluice"}, "pool_max_conns": {"20"}, "statement_timeout": {"5000"},
			"sslrootcert": {"/etc/sluice/ca.pem"}, "sslcert": {"/etc/pg/client.pem"}, "sslkey": {"/etc/sluice/client.key"}}},
		{"a client certificate alone: TLS required", "store: {postgres: {url: '${DB}', tls: {cert_file: c.pem, key_file: c.key}}}\n",
			url.Values{"sslmode": {"require"}, "application_name": {"sluice"}, "sslcert": {"/etc/sluice/c.pem"}, "sslkey": {"/etc/sluice/c.key"}}},
		{"a mode of its own", "store: {postgres: {url: '${DB}', tls: {mode: require}}}\n", url.Values{"sslmode": {"require"}, "application_name": {"sluice"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(base+tt.yaml), "/etc/sluice/sluice.yaml", lookup)
			if err != nil {
				t.Fatal(err)
			}
			snap, err := CompileWithoutProviderKeys(cfg, "/etc/sluice/sluice.yaml")
			if err != nil {
				t.Fatal(err)
			}
			u, err := url.Parse(snap.StorePostgres())
			if err != nil || u.Host != "db:5432" || u.User.String() != "u:pw" || u.Path != "/x" {
				t.Fatalf("StorePostgres = %q, %v", snap.StorePostgres(), err)
			}
			if diff := cmp.Diff(tt.want, u.Query()); diff != "" {
				t.Errorf("parameters (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPostgresProblems: each setting out of range is named, the URL never
// shown.
func TestPostgresProblems(t *testing.T) {
	lookup := func(string) (string, bool) { return "postgres://u:SECRET@db/x", true }
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"everything wrong", `ledger:
  postgres:
    url: ${DB}
    max_conns: -1
    statement_timeout: 500us
    tls: {mode: prefer, cert_file: c.pem}
`, []string{
			"f.yaml:12:16: ledger.postgres.max_conns: must be between 0 (the driver's default) and 10000, got -1",
			"f.yaml:13:24: ledger.postgres.statement_timeout: must be 0 (the server's) or at least 1ms, got 500µs",
			"f.yaml:14:5: ledger.postgres.tls: cert_file and key_file go together (the client certificate and its key)",
			"f.yaml:14:17: ledger.postgres.tls.mode: must be disable, require, verify-ca or verify-full, got \"prefer\"",
		}},
		{"disable with files", "store: {postgres: {url: '${DB}', tls: {mode: disable, ca_file: ca.pem}}}\n", []string{
			"f.yaml:9:34: store.postgres.tls: mode disable with certificate files: drop the files, or choose verify-full",
		}},
		{"not a URL", "store: {postgres: {url: 'host=db password=SECRET'}}\n", []string{
			"f.yaml:9:9: store.postgres: want a PostgreSQL URL, postgres://user:password@host:5432/database, its password percent-encoded (the value is not shown: it may hold a password)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(base+tt.yaml), "f.yaml", lookup)
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
