// Package pgtest starts throwaway PostgreSQL servers for tests: initdb
// into a temporary directory, the server on 127.0.0.1 at a free port,
// trust authentication, gone when the test binary ends (Main). Each test
// gets a database of its own on the process's one server (Database).
//
// Where PostgreSQL is not installed a test is skipped, saying what to
// install — unless SLUICE_REQUIRE_POSTGRES is set (CI sets it, through
// make test), where it fails instead: fleet tests never skip in CI.
//
// Under root, PostgreSQL (which refuses to run as root) runs as the
// unprivileged user "postgres" Debian's package creates, via runuser.
// The server runs with fsync off: tests check what Sluice asks of the
// database (synchronous_commit, transactions), not the disk under it.
//
// It must not be imported by product code.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/testenv"
)

// RequireEnv, when set to anything but "" or "0", turns a missing
// PostgreSQL from a skip into a failure.
const RequireEnv = "SLUICE_REQUIRE_POSTGRES"

// Server is a running PostgreSQL server.
type Server struct {
	Port int
	dir  string // holds data/ and the log
	bin  string // the directory of initdb, pg_ctl, postgres
	as   []string
	opts string // the server's options (pg_ctl -o)
}

var (
	mu      sync.Mutex
	shared  *Server
	started error // why the shared server could not start
	dbs     atomic.Int64
)

// Main runs the tests of m and stops the shared server, if a test started
// one. A package whose tests use Database calls it from TestMain, or
// calls Stop after m.Run itself.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop stops the shared server, if a test started one.
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	if shared != nil {
		shared.Stop()
		shared = nil
	}
}

// Database creates a new, empty database on the process's shared server
// (started by the first call) and returns its connection URL. It skips
// t, or fails it under RequireEnv, where PostgreSQL is not installed.
func Database(t testing.TB) string {
	t.Helper()
	return sharedServer(t).Database(t)
}

// Own starts a server of t's own, stopped when t ends: for a test that
// stops and starts it (Halt, Restart). It skips t, or fails it under
// RequireEnv, where PostgreSQL is not installed.
func Own(t testing.TB) *Server {
	t.Helper()
	return OwnWith(t, Options{})
}

// OwnWith is Own with opts.
func OwnWith(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := StartWith(opts)
	if err != nil {
		missing(t, err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Halt stops the server at once, as a crash would (pg_ctl stop -m
// immediate), keeping its files for Restart.
func (s *Server) Halt() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := s.run(ctx, "pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "immediate", "-w", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	return nil
}

// Restart starts a halted server again on its port; it returns once the
// server accepts connections (crash recovery done).
func (s *Server) Restart() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := s.run(ctx, "pg_ctl", "-D", filepath.Join(s.dir, "data"), "-l", filepath.Join(s.dir, "log"), "-o", s.opts, "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		return fmt.Errorf("pg_ctl start: %v\n%s\nserver log:\n%s", err, out, log)
	}
	return nil
}

// Database creates a new, empty database on s and returns its URL.
func (s *Server) Database(t testing.TB) string {
	t.Helper()
	return s.URL(s.NewDatabase(t, ""))
}

// NewDatabase creates a new, empty database on s, owned by owner (""
// for the superuser), and returns its name.
func (s *Server) NewDatabase(t testing.TB, owner string) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbs.Add(1))
	sql := "CREATE DATABASE " + name
	if owner != "" {
		sql += " OWNER " + owner
	}
	s.Exec(t, sql)
	return name
}

// URL is the connection URL of database db on s.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

func sharedServer(t testing.TB) *Server {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if shared == nil && started == nil {
		shared, started = Start()
	}
	if started != nil {
		missing(t, started)
	}
	return shared
}

// errMissing wraps a PostgreSQL that is not installed.
var errMissing = errors.New("PostgreSQL is not installed (initdb not found on PATH nor in /usr/lib/postgresql/*/bin; install Debian's postgresql package: apt-get install -y postgresql)")

func missing(t testing.TB, err error) {
	t.Helper()
	if v := os.Getenv(RequireEnv); errors.Is(err, errMissing) && (v == "" || v == "0") {
		t.Skip("pgtest: " + err.Error())
	}
	t.Fatalf("pgtest: %v", err)
}

// Options are a server's settings beyond the defaults.
type Options struct {
	// TLS, if set, makes the server take TLS connections with these PEM
	// files (its certificate and key, and the CA its clients'
	// certificates must chain to) and hold the role TLSRole to them: over
	// TLS only, with a client certificate whose common name is the
	// role's name (pg_hba.conf "cert"); other roles keep trust.
	TLS *TLS
	// Durable keeps PostgreSQL's fsync and full-page writes on (the
	// tests' servers run without them): for benchmarks whose figure is
	// what a commit costs on this disk.
	Durable bool
}

// TLS is a server's certificate, key and client CA, PEM.
type TLS struct {
	Cert, Key, ClientCA []byte
}

// TLSRole is the role a server started with Options.TLS holds to TLS
// and a client certificate.
const TLSRole = "sluice_tls"

// Start starts a new server. The caller stops it (Stop).
func Start() (*Server, error) { return StartWith(Options{}) }

// StartWith starts a new server with opts. The caller stops it (Stop).
func StartWith(opts Options) (*Server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root, PostgreSQL needs the unprivileged user postgres (from Debian's postgresql package): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
		s.as = []string{"runuser", "-u", "postgres", "--"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data := filepath.Join(dir, "data")
	if out, err := s.run(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--locale=C"); err != nil {
		s.remove()
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	var tlsOpts string
	if opts.TLS != nil {
		if tlsOpts, err = s.writeTLS(data, opts.TLS); err != nil {
			s.remove()
			return nil, err
		}
	}
	// A free port, taken by the server in the next moment: another
	// process may take it first, so a start that fails is tried again.
	var lastErr error
	for range 5 {
		port, err := testenv.FreePort()
		if err != nil {
			s.remove()
			return nil, err
		}
		s.Port = port
		durability := " -c fsync=off -c full_page_writes=off"
		if opts.Durable {
			durability = ""
		}
		s.opts = fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=''%s -c max_connections=200%s", port, durability, tlsOpts)
		// pg_ctl -w waits until the server accepts connections (it reads
		// the server's own readiness from postmaster.pid), at most -t.
		out, err := s.run(ctx, filepath.Join(bin, "pg_ctl"), "-D", data, "-l", filepath.Join(dir, "log"), "-o", s.opts, "-w", "-t", "60", "start")
		if err == nil {
			return s, nil
		}
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		lastErr = fmt.Errorf("pg_ctl start: %v\n%s\nserver log:\n%s", err, out, log)
		if !strings.Contains(string(log), "could not bind") && !strings.Contains(string(log), "already in use") {
			break
		}
	}
	s.remove()
	return nil, lastErr
}

// writeTLS writes t's files into the data directory and pg_hba.conf's
// rules for TLSRole, and returns the server's options that use them.
func (s *Server) writeTLS(data string, t *TLS) (string, error) {
	files := []struct {
		name string
		pem  []byte
	}{{"server.crt", t.Cert}, {"server.key", t.Key}, {"client-ca.crt", t.ClientCA}}
	for _, f := range files {
		if err := s.writeFile(filepath.Join(data, f.name), f.pem); err != nil {
			return "", err
		}
	}
	hba := "hostssl all " + TLSRole + " 127.0.0.1/32 cert\n" +
		"host all " + TLSRole + " 127.0.0.1/32 reject\n" +
		"host all all 127.0.0.1/32 trust\n"
	if err := s.writeFile(filepath.Join(data, "pg_hba.conf"), []byte(hba)); err != nil {
		return "", err
	}
	return " -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key -c ssl_ca_file=client-ca.crt", nil
}

// writeFile writes a file of the server's, mode 0600, owned by the
// server's user.
func (s *Server) writeFile(name string, data []byte) error {
	if err := os.WriteFile(name, data, 0o600); err != nil {
		return err
	}
	if len(s.as) == 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(name, uid, gid)
}

// Exec runs sql on s's postgres database as the superuser (psql).
func (s *Server) Exec(t testing.TB, sql string) {
	t.Helper()
	if out, err := s.run(context.Background(), "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port),
		"-U", "postgres", "-d", "postgres", "-c", sql); err != nil {
		t.Fatalf("pgtest: %s: %v\n%s", sql, err, out)
	}
}

// Stop stops the server at once (no checkpoint) and removes its files.
func (s *Server) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.run(ctx, filepath.Join(s.bin, "pg_ctl"), "-D", filepath.Join(s.dir, "data"), "-m", "immediate", "-w", "stop")
	s.remove()
}

func (s *Server) remove() { os.RemoveAll(s.dir) }

// run runs a PostgreSQL program, as the postgres user under root.
func (s *Server) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if !filepath.IsAbs(name) {
		name = filepath.Join(s.bin, name)
	}
	argv := append(append(append([]string(nil), s.as...), name), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = s.dir
	return cmd.CombinedOutput()
}

// findBin is the directory of initdb: on PATH, else Debian's versioned
// directory.
func findBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return "", errMissing
}
