package policies

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"time"
)

// Postgres is a PostgreSQL connection: in YAML, a URL alone
// (`postgres: "${DATABASE_URL}"`), or a mapping of the URL and what the
// fleet tunes beside it.
type Postgres struct {
	// URL is a postgres:// or postgresql:// URL; libpq's parameters
	// (sslmode, application_name, …) may go in its query.
	URL Secret `yaml:"url"`
	// MaxConns bounds each pool's connections (the pool_max_conns
	// parameter); 0: pgx's default, the larger of 4 and the CPUs.
	MaxConns int64 `yaml:"max_conns"`
	// StatementTimeout ends a statement that runs longer (PostgreSQL's
	// statement_timeout, sent when each connection starts); 0: the
	// server's. Migrations run without it.
	StatementTimeout time.Duration `yaml:"statement_timeout"`
	// TLS verifies the server and presents a client certificate.
	TLS PostgresTLS `yaml:"tls"`
}

// PostgresTLS is TLS to PostgreSQL: libpq's sslmode, sslrootcert,
// sslcert and sslkey. A relative path is resolved against the directory
// of the config file.
type PostgresTLS struct {
	// Mode is sslmode: disable, require, verify-ca or verify-full. Empty:
	// verify-full when CAFile is set; with only a client certificate, the
	// URL's mode if it verifies the server, else require; else what the
	// URL says (libpq's default, prefer,
	// which falls back to plaintext, without it).
	Mode     string `yaml:"mode"`
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// set reports whether p names a database.
func (p Postgres) set() bool { return p.URL != "" }

// maxPostgresConns bounds max_conns: PostgreSQL's own default
// max_connections is 100, and a pool is per replica.
const maxPostgresConns = 10_000

// validate checks p at path (store.postgres, ledger.postgres); it never
// shows the URL, which may hold a password.
func (p Postgres) validate(v *validator, path string) {
	if !postgresURL(p.URL.Reveal()) {
		v.add(path, "want a PostgreSQL URL, postgres://user:password@host:5432/database, its password percent-encoded (the value is not shown: it may hold a password)")
	}
	if p.MaxConns < 0 || p.MaxConns > maxPostgresConns {
		v.add(path+".max_conns", "must be between 0 (the driver's default) and %d, got %d", maxPostgresConns, p.MaxConns)
	}
	if p.StatementTimeout < 0 || (p.StatementTimeout > 0 && p.StatementTimeout < time.Millisecond) {
		v.add(path+".statement_timeout", "must be 0 (the server's) or at least 1ms, got %v", p.StatementTimeout)
	}
	switch p.TLS.Mode {
	case "", "disable", "require", "verify-ca", "verify-full":
	default:
		v.add(path+".tls.mode", "must be disable, require, verify-ca or verify-full, got %q", p.TLS.Mode)
	}
	if (p.TLS.CertFile == "") != (p.TLS.KeyFile == "") {
		v.add(path+".tls", "cert_file and key_file go together (the client certificate and its key)")
	}
	if p.TLS.Mode == "disable" && (p.TLS.CAFile != "" || p.TLS.CertFile != "") {
		v.add(path+".tls", "mode disable with certificate files: drop the files, or choose verify-full")
	}
}

// connString is p as the one connection string the backends take: the
// URL with p's settings as its parameters (they win over the URL's own),
// its file paths resolved against the directory of the config file.
func (p Postgres) connString(file string) (string, error) {
	if !p.set() {
		return "", nil
	}
	u, err := url.Parse(p.URL.Reveal())
	if err != nil {
		return "", fmt.Errorf("not a URL") // the URL may hold a password: not shown
	}
	q := u.Query()
	if p.MaxConns > 0 {
		q.Set("pool_max_conns", strconv.FormatInt(p.MaxConns, 10))
	}
	if p.StatementTimeout > 0 {
		q.Set("statement_timeout", strconv.FormatInt(p.StatementTimeout.Milliseconds(), 10))
	}
	resolve := func(name string) string {
		if name == "" || filepath.IsAbs(name) {
			return name
		}
		return filepath.Join(filepath.Dir(file), name)
	}
	mode := p.TLS.Mode
	switch {
	case mode != "":
	case p.TLS.CAFile != "":
		mode = "verify-full"
	case p.TLS.CertFile != "":
		// A client certificate is presented over TLS only: never the
		// URL's default (prefer), which falls back to plaintext. What
		// the URL verifies (verify-ca, verify-full) stays.
		switch q.Get("sslmode") {
		case "", "disable", "allow", "prefer":
			mode = "require"
		}
	}
	for k, v := range map[string]string{"sslmode": mode, "sslrootcert": resolve(p.TLS.CAFile),
		"sslcert": resolve(p.TLS.CertFile), "sslkey": resolve(p.TLS.KeyFile)} {
		if v != "" {
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}
