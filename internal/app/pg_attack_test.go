package app

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/testenv/pgtest"
)

// pgAttackConfig is the quickstart's config with its store and ledger at
// the PostgreSQL URL db (written into the YAML as is, quoted) and the
// ledger's mapping extra (e.g. "tls: {ca_file: …}").
func pgAttackConfig(t *testing.T, db, extra string) string {
	t.Helper()
	path := quickstart(t)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	q := strings.ReplaceAll(db, "'", "''")
	out := strings.Replace(string(data), "  sqlite: quickstart.db", "  postgres: {url: '"+q+"'"+extra+"}", 1)
	if out == string(data) {
		t.Fatal("the quickstart's store section moved; update pgAttackConfig")
	}
	out += "\nledger:\n  postgres: {url: '" + q + "'" + extra + "}\n  spool: " + filepath.Join(t.TempDir(), "ledger-spool") + "\n"
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runBounded is run, on a context that ends after d.
func runBounded(t *testing.T, d time.Duration, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var o, e bytes.Buffer
	err = Run(ctx, args, &o, &e, noEnv)
	return o.String(), e.String(), err
}

// leaks reports where in what a command said the secret (or its
// percent-encoding) shows.
func leaks(secret string, said map[string]string) []string {
	var where []string
	for name, s := range said {
		for _, form := range []string{secret, url.QueryEscape(secret), url.PathEscape(secret)} {
			if strings.Contains(s, form) {
				where = append(where, name)
				break
			}
		}
	}
	return where
}

// TestAttackPasswordNeverShown: a regression guard. PostgreSQL URLs that
// parse but that pgx refuses, or that point nowhere, in every place a
// password can go: no command (check-config, migrate, spend, serve)
// shows it, in its output or its error.
func TestAttackPasswordNeverShown(t *testing.T) {
	const pw = "Zq8s3cr3tPW"
	missingCA := filepath.Join(t.TempDir(), "no-such-ca.pem")
	for _, tt := range []struct{ name, db, extra string }{
		{"bad sslmode", "postgres://sluice:" + pw + "@127.0.0.1:1/sluice?sslmode=bogus", ""},
		{"password parameter, bad sslmode", "postgres://sluice@127.0.0.1:1/sluice?password=" + pw + "&sslmode=bogus", ""},
		{"percent-encoded password, bad pool size", "postgres://sluice:" + url.PathEscape(pw+"/+@") + "@127.0.0.1:1/sluice?pool_max_conns=many", ""},
		{"bad connect_timeout", "postgres://sluice:" + pw + "@127.0.0.1:1/sluice?connect_timeout=soon", ""},
		{"sslpassword", "postgres://sluice@127.0.0.1:1/sluice?sslpassword=" + pw + "&sslmode=bogus", ""},
		{"a CA file that does not exist", "postgres://sluice:" + pw + "@127.0.0.1:1/sluice", ", tls: {ca_file: '" + missingCA + "'}"},
		{"nothing listening", "postgres://sluice:" + pw + "@127.0.0.1:1/sluice?connect_timeout=2", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			config := pgAttackConfig(t, tt.db, tt.extra)
			said := map[string]string{}
			for _, args := range [][]string{
				{"check-config", "--config", config},
				{"migrate", "--config", config},
				{"spend", "--config", config},
				{"serve", "--config", config, "--grpc-addr", "127.0.0.1:0", "--xds-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--shutdown-drain", "0"},
			} {
				out, errOut, err := runBounded(t, 20*time.Second, args...)
				said[args[0]+" stdout"], said[args[0]+" stderr"] = out, errOut
				if err != nil {
					said[args[0]+" error"] = err.Error()
				}
			}
			if where := leaks(pw, said); len(where) > 0 {
				for _, w := range where {
					t.Errorf("%s shows the password: %s", w, said[w])
				}
			}
		})
	}
}

// TestAttackPasswordTailNeverShown: a password holding an unencoded '/'
// is refused by validation before any command connects, so serve,
// migrate and spend never print its tail as a database name.
func TestAttackPasswordTailNeverShown(t *testing.T) {
	const tail = "Summer!Xy"
	config := pgAttackConfig(t, "postgres://sluice:2024/"+tail+"@127.0.0.1:1/sluice?connect_timeout=2", "")
	said := map[string]string{}
	for _, args := range [][]string{
		{"check-config", "--config", config},
		{"migrate", "--config", config},
		{"spend", "--config", config},
	} {
		out, errOut, err := runBounded(t, 20*time.Second, args...)
		said[args[0]+" stdout"], said[args[0]+" stderr"] = out, errOut
		if err != nil {
			said[args[0]+" error"] = err.Error()
		}
	}
	for _, w := range leaks(tail, said) {
		t.Errorf("%s shows the password's tail: %s", w, said[w])
	}
}

// TestAttackClientCertificateKeepsServerVerification: the URL asks for
// verify-full against a CA the server's certificate does not chain to
// (an impostor, as far as this client can tell) and the mapping only adds
// a client certificate: migrate refuses the server ("failed to verify
// certificate") rather than connect with the verification dropped.
func TestAttackClientCertificateKeepsServerVerification(t *testing.T) {
	srv, db, dir := tlsPostgres(t, "db.impostor.example") // not the host the URL names
	trusted := filepath.Join(dir, "ca.pem")
	for _, tt := range []struct{ name, params, want string }{
		// The CA is the right one, the name in the server's certificate
		// is not the URL's host: verify-full refuses, verify-ca would not.
		{"verify-full, the URL's CA", "sslmode=verify-full&sslrootcert=" + trusted, "failed to verify certificate"},
		// The system's roots, which do not hold the test CA.
		{"verify-full, the system's roots", "sslmode=verify-full", "failed to verify certificate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := fmt.Sprintf("postgres://%s:pw@127.0.0.1:%d/%s?%s", pgtest.TLSRole, srv.Port, db, tt.params)
			// The control: the URL alone is refused as it should be.
			if _, _, err := run(t, "migrate", "--config", pgAttackConfig(t, u, "")); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("the URL alone: migrate = %v; want refused (%q)", err, tt.want)
			}
			config := pgAttackConfig(t, u, ", tls: {cert_file: "+filepath.Join(dir, "client.pem")+", key_file: "+filepath.Join(dir, "client.key")+"}")
			out, stderr, err := run(t, "migrate", "--config", config)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("URL %s, a server certificate for db.impostor.example, and a client certificate in the mapping: migrate = %q %q %v; want refused (%q)",
					tt.params, out, stderr, err, tt.want)
			}
		})
	}
}
