package policies

import (
	"net/url"
	"strings"
	"testing"
)

// pgAttackSnapshot compiles base plus yaml, with ${DB} standing for db,
// and returns the ledger's connection string parsed.
func pgAttackSnapshot(t *testing.T, db, yaml string) url.Values {
	t.Helper()
	lookup := func(string) (string, bool) { return db, true }
	cfg, err := Parse([]byte(base+yaml), "/etc/sluice/sluice.yaml", lookup)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := CompileWithoutProviderKeys(cfg, "/etc/sluice/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(snap.StorePostgres())
	if err != nil {
		t.Fatalf("StorePostgres does not parse: %v", err)
	}
	return u.Query()
}

// TestAttackClientCertificateKeepsTheURLsVerification: the URL asks for
// sslmode=verify-full (or verify-ca with its own sslrootcert) and the
// mapping only adds a client certificate: the URL's verification stays
// (pgx's require would skip the server's certificate check, or its host
// name); only an absent, disable, allow or prefer sslmode is raised to
// require.
func TestAttackClientCertificateKeepsTheURLsVerification(t *testing.T) {
	for _, tt := range []struct{ name, db, want string }{
		{"verify-full, system roots", "postgres://u:pw@db.example:5432/x?sslmode=verify-full", "verify-full"},
		{"verify-full, the URL's CA", "postgres://u:pw@db.example:5432/x?sslmode=verify-full&sslrootcert=/etc/ssl/pg-ca.pem", "verify-full"},
		{"verify-ca, the URL's CA", "postgres://u:pw@db.example:5432/x?sslmode=verify-ca&sslrootcert=/etc/ssl/pg-ca.pem", "verify-ca"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := pgAttackSnapshot(t, tt.db, "store: {postgres: {url: '${DB}', tls: {cert_file: c.pem, key_file: c.key}}}\n")
			if got := q.Get("sslmode"); got != tt.want {
				t.Errorf("URL %s with a client certificate in the mapping: sslmode=%s; want %s (the URL's verification kept; require does not verify the server)",
					tt.db, got, tt.want)
			}
		})
	}
}

// TestAttackMappingTLSWinsOverURL: a regression guard. Whatever the URL
// says to weaken TLS (sslmode=disable, in any spelling the URL decoder
// accepts, or twice), a ca_file in the mapping makes it verify-full, with
// the mapping's CA.
func TestAttackMappingTLSWinsOverURL(t *testing.T) {
	for _, db := range []string{
		"postgres://u:pw@db:5432/x?sslmode=disable",
		"postgres://u:pw@db:5432/x?ssl%6Dode=disable",
		"postgres://u:pw@db:5432/x?sslmode=disable&sslmode=allow",
		"postgres://u:pw@db:5432/x?sslmode=prefer&sslrootcert=/tmp/evil.pem",
	} {
		q := pgAttackSnapshot(t, db, "store: {postgres: {url: '${DB}', tls: {ca_file: ca.pem}}}\n")
		if q["sslmode"] == nil || len(q["sslmode"]) != 1 || q.Get("sslmode") != "verify-full" || q.Get("sslrootcert") != "/etc/sluice/ca.pem" {
			t.Errorf("URL %s with ca_file: parameters %v; want one sslmode=verify-full and the mapping's sslrootcert", db, q)
		}
	}
}

// TestAttackUnencodedSlashInPasswordRefusedRefused: a password with a '/' that
// was not percent-encoded (postgres://sluice:2024/Summer!@db:5432/sluice)
// cuts the URL's authority short, and the driver would send, and print in
// its errors, the password's tail as the database's name: validation
// refuses such a URL (a database part holding '@'), saying to
// percent-encode the password, without showing it.
func TestAttackUnencodedSlashInPasswordRefusedRefused(t *testing.T) {
	lookup := func(string) (string, bool) { return "postgres://sluice:2024/Summer!@db.example:5432/sluice", true }
	cfg, err := Parse([]byte(base+"store: {postgres: '${DB}'}\n"), "/etc/sluice/sluice.yaml", lookup)
	if err == nil {
		t.Fatalf("a URL whose password's '/' was not percent-encoded is accepted (store.postgres set: %v); want it refused: its tail would be sent, and shown, as the database name",
			cfg.Store.Postgres.set())
	}
	if strings.Contains(err.Error(), "Summer") {
		t.Errorf("the refusal shows the password: %v", err)
	}
}
