package pgtest

import (
	"errors"
	"fmt"
	"github.com/sluicegw/sluice/internal/testenv"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Bouncer is a PgBouncer in front of a Server, in transaction pooling
// mode: each transaction (each statement outside one) may run on another
// server connection, so nothing that lives in a session — prepared
// statements, session settings, advisory locks held past a transaction,
// LISTEN — survives from one to the next.
type Bouncer struct {
	Port int
}

// errNoBouncer wraps a PgBouncer that is not installed.
var errNoBouncer = fmt.Errorf("%w: PgBouncer is not installed (pgbouncer not on PATH nor in /usr/sbin; apt-get install -y pgbouncer)", errMissing)

// StartBouncer starts a PgBouncer in front of s for the test's life:
// every database of s, every role trusted (as s trusts them), transaction
// pooling, and the startup parameters pgx may send that PgBouncer cannot
// track ignored. It skips t, or fails it under RequireEnv, where PgBouncer
// is not installed.
func StartBouncer(t testing.TB, s *Server) *Bouncer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			missing(t, errNoBouncer)
		}
		bin = "/usr/sbin/pgbouncer"
	}
	// Not t.TempDir(): its parent is private to this user, and under
	// root PgBouncer runs as another.
	dir, err := os.MkdirTemp("", "sluice-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if len(s.as) > 0 {
		// PgBouncer refuses to run as root too: the postgres user runs it.
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	users := filepath.Join(dir, "users.txt")
	if err := os.WriteFile(users, []byte(`"postgres" ""`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for range 5 {
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ini := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
ignore_startup_parameters = extra_float_digits,statement_timeout
logfile = %s
pidfile = %s
`, s.Port, port, users, filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
		conf := filepath.Join(dir, "pgbouncer.ini")
		if err := os.WriteFile(conf, []byte(ini), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, conf)
		cmd.Dir = dir
		if len(s.as) > 0 {
			// Its own process, as the postgres user (runuser would stand
			// between it and Kill).
			cred, err := postgresCredential()
			if err != nil {
				t.Fatal(err)
			}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		out, err := os.Create(filepath.Join(dir, "stderr"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		err = cmd.Start()
		out.Close()
		if err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if err := waitListening(port, exited); err != nil {
			_ = cmd.Process.Kill()
			<-exited
			stderr, _ := os.ReadFile(filepath.Join(dir, "stderr"))
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			lastErr = fmt.Errorf("pgbouncer: %v\n%s%s", err, stderr, log)
			continue
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
		return &Bouncer{Port: port}
	}
	t.Fatalf("pgtest: %v", lastErr)
	return nil
}

// waitListening returns once something accepts connections on port, or
// the process exits, or a minute passes.
func waitListening(port int, exited <-chan error) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v", err)
		default:
		}
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		// PgBouncer opens its port within milliseconds of starting: a
		// short pause between dials, bounded by the deadline.
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("not listening after a minute")
}

// URL is the connection URL of database db through b, as the postgres
// role. pgx's default of prepared statements cached per connection does
// not survive transaction pooling: the URL asks for the extended protocol
// without named statements (default_query_exec_mode=exec), as a user
// behind PgBouncer must.
func (b *Bouncer) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&default_query_exec_mode=exec", b.Port, db)
}

// postgresCredential is the postgres user's, for a process started
// under root.
func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
