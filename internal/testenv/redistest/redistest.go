// Package redistest starts throwaway Redis servers for tests: a
// redis-server on 127.0.0.1 at a free port, nothing persisted, its files
// in a temporary directory, stopped when the test ends — one server
// (Start, Own) or a Redis Cluster of three masters (StartCluster,
// OwnCluster). A server is ready when it says so ("Ready to accept
// connections" on its log), a cluster when every node reports
// cluster_state:ok and agrees on the slots: no test sleeps for a server.
//
// Where redis-server is not installed a test is skipped, saying what to
// install — unless SLUICE_REQUIRE_REDIS is set (make test sets it), where
// it fails instead: fleet tests never skip in CI.
//
// It must not be imported by product code.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/testenv"
)

// RequireEnv, when set to anything but "" or "0", turns a missing Redis
// from a skip into a failure.
const RequireEnv = "SLUICE_REQUIRE_REDIS"

// errMissing wraps a Redis that is not installed.
var errMissing = errors.New("Redis is not installed (redis-server not found on PATH; install Debian's redis-server package: apt-get install -y redis-server)")

// Server is a running redis-server.
type Server struct {
	Port int
	// ClusterPort is the cluster bus's port, 0 outside a cluster.
	ClusterPort int
	dir         string
	args        []string
	mu          sync.Mutex
	cmd         *exec.Cmd
	done        chan struct{} // closed when cmd exits
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// Own starts a server of t's own, stopped when t ends. It skips t, or
// fails it under RequireEnv, where Redis is not installed.
func Own(t testing.TB) *Server {
	t.Helper()
	s, err := Start()
	if err != nil {
		missing(t, err)
	}
	t.Cleanup(s.Stop)
	return s
}

func missing(t testing.TB, err error) {
	t.Helper()
	if v := os.Getenv(RequireEnv); errors.Is(err, errMissing) && (v == "" || v == "0") {
		t.Skip("redistest: " + err.Error())
	}
	t.Fatalf("redistest: %v", err)
}

// Start starts a new server. The caller stops it (Stop).
func Start() (*Server, error) { return start(false, nil) }

// TLS is a server's certificate and key and the CA its clients'
// certificates must chain to, PEM.
type TLS struct {
	Cert, Key, ClientCA []byte
}

// OwnTLS starts a server of t's own that takes TLS connections only, on
// Port, with these files, and requires a client certificate. Do cannot
// reach it (it speaks plain RESP).
func OwnTLS(t testing.TB, tl TLS) *Server {
	t.Helper()
	s, err := start(false, &tl)
	if err != nil {
		missing(t, err)
	}
	t.Cleanup(s.Stop)
	return s
}

func start(cluster bool, tl *TLS) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errMissing
	}
	dir, err := os.MkdirTemp("", "sluice-redis-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir}
	var tlsArgs []string
	if tl != nil {
		files := []struct {
			flag, name string
			pem        []byte
		}{{"--tls-cert-file", "server.crt", tl.Cert}, {"--tls-key-file", "server.key", tl.Key}, {"--tls-ca-cert-file", "client-ca.crt", tl.ClientCA}}
		for _, f := range files {
			name := filepath.Join(dir, f.name)
			if err := os.WriteFile(name, f.pem, 0o600); err != nil {
				os.RemoveAll(dir)
				return nil, err
			}
			tlsArgs = append(tlsArgs, f.flag, name)
		}
		tlsArgs = append(tlsArgs, "--tls-auth-clients", "yes")
	}
	// A free port, taken by the server in the next moment: another
	// process may take it first, so a start that fails to bind is tried
	// again on another.
	var lastErr error
	for range 5 {
		if s.Port, err = testenv.FreePort(); err != nil {
			break
		}
		s.args = []string{bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(s.Port),
			"--save", "", "--appendonly", "no", "--dir", dir, "--protected-mode", "yes",
			"--logfile", "", "--loglevel", "notice", "--daemonize", "no"}
		if tl != nil {
			s.args = append(append(s.args, "--port", "0", "--tls-port", strconv.Itoa(s.Port)), tlsArgs...)
		}
		if cluster {
			if s.ClusterPort, err = testenv.FreePort(); err != nil {
				break
			}
			s.args = append(s.args, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(s.ClusterPort),
				"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "5000")
		}
		if lastErr = s.run(); lastErr == nil {
			return s, nil
		}
		if !strings.Contains(lastErr.Error(), "Address already in use") {
			break
		}
	}
	os.RemoveAll(dir)
	if lastErr == nil {
		lastErr = err
	}
	return nil, lastErr
}

// run starts the server process and returns once it is ready.
func (s *Server) run() error {
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Dir = s.dir
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	ready := make(chan error, 1)
	go func() {
		// The log, read to its end: until the server is ready, for the
		// answer; then so that the server never blocks on a full pipe.
		var seen strings.Builder
		sc := bufio.NewScanner(out)
		told := false
		for sc.Scan() {
			line := sc.Text()
			if !told {
				seen.WriteString(line + "\n")
				if strings.Contains(line, "Ready to accept connections") {
					ready <- nil
					told = true
				}
			}
		}
		io.Copy(io.Discard, out)
		err := cmd.Wait()
		if !told {
			ready <- fmt.Errorf("redis-server on port %d exited before it was ready (%v):\n%s", s.Port, err, seen.String())
		}
		close(done)
	}()
	select {
	case err := <-ready:
		if err != nil {
			<-done
			return err
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("redis-server on port %d: not ready within a minute", s.Port)
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

// Halt kills the server at once (SIGKILL), as a crash would; what it
// held is lost (nothing is persisted). Restart starts it again.
func (s *Server) Halt() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-done
}

// Restart starts a halted server again, empty, on its port, and returns
// once it is ready.
func (s *Server) Restart() error {
	return s.run()
}

// Stop kills the server and removes its files.
func (s *Server) Stop() {
	s.Halt()
	os.RemoveAll(s.dir)
}

// Do sends one command to the server on a connection of its own and
// returns the reply as text (RESP decoded: an array's elements one per
// line, an error as an error): for tests' checks and set-up, without a
// client library.
func (s *Server) Do(args ...string) (string, error) {
	return do(s.Addr(), args...)
}

func do(addr string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	var out strings.Builder
	if err := readReply(bufio.NewReader(c), &out); err != nil {
		return "", err
	}
	return strings.TrimSuffix(out.String(), "\n"), nil
}

// readReply reads one RESP2 reply into out.
func readReply(r *bufio.Reader, out *strings.Builder) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return errors.New("redistest: empty reply line")
	}
	switch line[0] {
	case '+', ':':
		out.WriteString(line[1:] + "\n")
	case '-':
		return errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return err
		}
		if n < 0 {
			out.WriteString("\n")
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		out.Write(buf[:n])
		out.WriteString("\n")
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return err
		}
		for range n {
			if err := readReply(r, out); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("redistest: unexpected reply %q", line)
	}
	return nil
}

// Monitor is a MONITOR of a server: every command its clients send, as
// the server logs it, scripts' own commands left out.
type Monitor struct {
	s      *Server
	c      net.Conn
	mu     sync.Mutex
	lines  []string
	marked chan struct{} // closed when the end marker is seen
	done   chan struct{}
	once   sync.Once
}

// monitorEnd is the command Stop sends to know the monitor has seen
// everything sent before it.
const monitorEnd = "sluice-redistest-monitor-end"

// Monitor starts watching s's commands; Stop ends it and returns them.
// It returns once the server has begun to report, so that every command
// sent after it is seen.
func (s *Server) Monitor(t testing.TB) *Monitor {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatalf("redistest: monitor: %v", err)
	}
	if _, err := io.WriteString(c, "*1\r\n$7\r\nMONITOR\r\n"); err != nil {
		t.Fatalf("redistest: monitor: %v", err)
	}
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("redistest: monitor: %q, %v", line, err)
	}
	m := &Monitor{s: s, c: c, marked: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			// +1733600000.123456 [0 127.0.0.1:50000] "evalsha" "…" …;
			// a script's own commands say [0 lua].
			line = strings.TrimSuffix(strings.TrimPrefix(line, "+"), "\r\n")
			_, rest, ok := strings.Cut(line, "] ")
			if !ok || strings.Contains(line, " lua] ") {
				continue
			}
			if strings.Contains(rest, monitorEnd) {
				close(m.marked)
				continue
			}
			m.mu.Lock()
			m.lines = append(m.lines, rest)
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() { m.Stop() })
	return m
}

// Stop ends the monitor and returns the commands it saw, each as the
// server quoted it ("evalsha" "…" …), in order.
func (m *Monitor) Stop() []string {
	m.once.Do(func() {
		// A command sent now is reported after every one sent before it:
		// once the monitor sees it, it has seen them all.
		if _, err := m.s.Do("ECHO", monitorEnd); err == nil {
			select {
			case <-m.marked:
			case <-time.After(30 * time.Second):
			}
		}
		m.c.Close()
		<-m.done
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lines
}
