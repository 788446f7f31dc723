package app

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/testenv/pgtest"
	"github.com/sluicegw/sluice/internal/testtls"
)

// TestPostgresTLS: a PostgreSQL that takes its Sluice role over TLS only,
// with a client certificate (pg_hba.conf "cert"). A config whose postgres
// mappings name the CA, the certificate and its key verifies the server
// (verify-full) and presents the certificate: migrate and the keys
// commands work. Another CA, no client certificate, or no TLS are each
// refused, and no error shows the URL's password.
func TestPostgresTLS(t *testing.T) {
	srv, db, dir := tlsPostgres(t, "127.0.0.1")
	write := func(name string, data []byte) string { return writeIn(t, dir, name, data) }
	write("other-ca.pem", testtls.NewCA(t, "another CA").PEM())
	url := fmt.Sprintf("postgres://%s:SECRET-pw@127.0.0.1:%d/%s", pgtest.TLSRole, srv.Port, db)
	config := func(tls string) string {
		t.Helper()
		data, err := os.ReadFile(quickstart(t))
		if err != nil {
			t.Fatal(err)
		}
		pg := fmt.Sprintf("\n  postgres:\n    url: %q\n    tls: %s\n", url, tls)
		out := strings.Replace(string(data), "\n  sqlite: quickstart.db", pg, 1)
		out += "\nledger:" + pg + "  spool: " + filepath.Join(t.TempDir(), "spool") + "\n"
		// Relative file names: resolved beside the config file.
		return write(fmt.Sprintf("sluice-%d.yaml", len(tls)), []byte(out))
	}

	good := config("{ca_file: ca.pem, cert_file: client.pem, key_file: client.key}")
	if out, stderr, err := run(t, "migrate", "--config", good); err != nil || !strings.Contains(out, "ledger: schema version 0 → ") {
		t.Fatalf("migrate over TLS: %q %q %v", out, stderr, err)
	}
	if out, _, err := run(t, "keys", "create", "--config", good, "--team", "demo", "--name", "tls"); err != nil || !secretRE.MatchString(out) {
		t.Fatalf("keys create over TLS: %q, %v", out, err)
	}

	for _, bad := range []struct{ name, tls, want string }{
		{"another CA", "{ca_file: other-ca.pem, cert_file: client.pem, key_file: client.key}", "certificate signed by unknown authority"},
		{"no client certificate", "{ca_file: ca.pem}", "connection requires a valid client certificate"},
		{"no TLS", "{mode: disable}", "pg_hba.conf rejects connection"},
	} {
		_, stderr, err := run(t, "migrate", "--config", config(bad.tls))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: migrate = %v; want refused (%q)", bad.name, err, bad.want)
		}
		if err != nil && (strings.Contains(err.Error(), "SECRET-pw") || strings.Contains(stderr, "SECRET-pw")) {
			t.Errorf("%s: the password leaked: %v %s", bad.name, err, stderr)
		}
	}
}

// tlsPostgres starts a PostgreSQL of t's own that holds pgtest.TLSRole to
// TLS with a client certificate, its certificate issued for serverName
// by a CA of the test's, and a database that role owns. It writes into a
// directory of t's the CA (ca.pem) and the role's certificate and key
// (client.pem, client.key), and returns the server, the database's name
// and the directory.
func tlsPostgres(t *testing.T, serverName string) (*pgtest.Server, string, string) {
	t.Helper()
	ca := testtls.NewCA(t, "postgres CA")
	server := ca.Issue(t, serverName)
	client := ca.IssueWith(t, func(c *x509.Certificate) {
		c.Subject.CommonName = pgtest.TLSRole
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	})
	srv := pgtest.OwnWith(t, pgtest.Options{TLS: &pgtest.TLS{Cert: testtls.CertPEM(server), Key: testtls.KeyPEM(t, server), ClientCA: ca.PEM()}})
	srv.Exec(t, "CREATE ROLE "+pgtest.TLSRole+" LOGIN")
	db := srv.NewDatabase(t, pgtest.TLSRole)
	dir := t.TempDir()
	writeIn(t, dir, "ca.pem", ca.PEM())
	writeIn(t, dir, "client.pem", testtls.CertPEM(client))
	writeIn(t, dir, "client.key", testtls.KeyPEM(t, client))
	return srv, db, dir
}

// writeIn writes data to name in dir, mode 0600, and returns its path.
func writeIn(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
