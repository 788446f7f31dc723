package tlsserve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicegw/sluice/internal/testtls"
)

// TestRotation: certificates and client CAs replaced on disk, by rename
// or by a Kubernetes ..data swap, serve the next connection on the same
// listener; a connection made before keeps working.
func TestRotation(t *testing.T) {
	for _, l := range []layout{renamed, kube} {
		t.Run(string(l), func(t *testing.T) {
			ctx := deadline(t)
			oldCA, newCA := testtls.NewCA(t, "old server CA"), testtls.NewCA(t, "new server CA")
			oldClientCA, newClientCA := testtls.NewCA(t, "old client CA"), testtls.NewCA(t, "new client CA")
			oldClient := clientCert(t, oldClientCA, []string{allowedURI}, nil, nil)
			newClient := clientCert(t, newClientCA, []string{allowedURI}, nil, nil)
			f := newFiles(t, l)
			f.write(oldCA.Issue(t, serverName), oldClientCA)
			h := start(t, Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca, AllowedURIs: []string{allowedURI}})
			h.run()

			before, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(oldCA, &oldClient))))
			if err != nil {
				t.Fatal(err)
			}
			defer before.Close()
			health := healthpb.NewHealthClient(before)
			if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatalf("call before rotation: %v", err)
			}

			// The server certificate, from another CA.
			next := newCA.Issue(t, serverName)
			f.write(next, nil)
			waitFor(t, ctx, "the new certificate served", func() bool {
				_, err := h.call(ctx, clientTLS(newCA, &oldClient))
				return err == nil
			})
			if _, err := h.call(ctx, clientTLS(oldCA, &oldClient)); status.Code(err) != codes.Unavailable {
				t.Errorf("new connection trusting the old CA only: %v, want Unavailable", err)
			}
			if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				t.Errorf("call on the connection made before rotation: %v", err)
			}
			if ok, failed := h.reloads(resultOK), h.reloads(resultFailed); ok < 1 || failed != 0 {
				t.Errorf("reloads ok %v, failed %v; want at least 1 and 0 (a pair caught half-replaced is retried, not reported)", ok, failed)
			}
			if got, want := h.expiry(), float64(next.Leaf.NotAfter.Unix()); got != want {
				t.Errorf("expiry gauge %v, want %v", got, want)
			}
			lines := h.logLines("TLS files reloaded; new connections use them")
			if len(lines) == 0 || lines[len(lines)-1]["subject"] != next.Leaf.Subject.String() || lines[len(lines)-1]["issuer"] != newCA.Cert.Subject.String() {
				t.Errorf("reload lines %v, want the last naming subject %q issued by %q", lines, next.Leaf.Subject, newCA.Cert.Subject)
			}
			if strings.Contains(h.logs.String(), "PRIVATE KEY") {
				t.Error("key material logged")
			}

			// The client CA.
			f.write(next, newClientCA)
			waitFor(t, ctx, "a client of the new client CA admitted", func() bool {
				_, err := h.call(ctx, clientTLS(newCA, &newClient))
				return err == nil
			})
			untrusted := h.refused(reasonUntrusted)
			if _, err := h.call(ctx, clientTLS(newCA, &oldClient)); status.Code(err) != codes.Unavailable {
				t.Errorf("client of the old client CA: %v, want Unavailable", err)
			}
			if got := h.refused(reasonUntrusted); got <= untrusted {
				t.Errorf("refused{untrusted} %v, want more than %v", got, untrusted)
			}
		})
	}
}

// TestBadReload: a set that does not load is logged at warn naming the
// file, counted as failed, and the last good certificate keeps serving
// until a good set replaces it.
func TestBadReload(t *testing.T) {
	serverCA, nextCA, clientCA := testtls.NewCA(t, "server CA"), testtls.NewCA(t, "next CA"), testtls.NewCA(t, "client CA")
	client := clientCert(t, clientCA, []string{allowedURI}, nil, nil)
	tests := []struct {
		name   string
		damage func(t *testing.T, f *tlsFiles)
		file   func(f *tlsFiles) string
		error  string
	}{
		{"truncated certificate", func(t *testing.T, f *tlsFiles) {
			certPEM, keyPEM := pemOf(t, nextCA.Issue(t, serverName))
			f.writeRaw(certPEM[:len(certPEM)/2], keyPEM, nil)
		}, func(f *tlsFiles) string { return f.cert }, "cut short"},
		{"key of another certificate", func(t *testing.T, f *tlsFiles) {
			certPEM, _ := pemOf(t, nextCA.Issue(t, serverName))
			_, keyPEM := pemOf(t, nextCA.Issue(t, serverName))
			f.writeRaw(certPEM, keyPEM, nil)
		}, func(f *tlsFiles) string { return f.key }, "does not match"},
		{"key file removed", func(t *testing.T, f *tlsFiles) {
			must(t, os.Remove(f.key))
		}, func(f *tlsFiles) string { return f.key }, "no such file"},
		{"client CA file not PEM", func(t *testing.T, f *tlsFiles) {
			f.writeRaw(nil, nil, []byte("not a certificate\n"))
		}, func(f *tlsFiles) string { return f.ca }, "no PEM CERTIFICATE block"},
		{"expired certificate", func(t *testing.T, f *tlsFiles) {
			f.write(nextCA.IssueWith(t, func(c *x509.Certificate) { c.NotAfter = c.NotBefore.Add(30 * time.Minute) }, serverName), nil)
		}, func(f *tlsFiles) string { return f.cert }, "expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := deadline(t)
			f := newFiles(t, renamed)
			first := serverCA.Issue(t, serverName)
			f.write(first, clientCA)
			h := start(t, Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca})
			h.run()

			tt.damage(t, f)
			f.age() // settled: reported at the next poll
			waitFor(t, ctx, "the failed reload counted", func() bool { return h.reloads(resultFailed) > 0 })
			if _, err := h.call(ctx, clientTLS(serverCA, &client)); err != nil {
				t.Errorf("call trusting the first certificate's CA: %v", err)
			}
			if got, want := h.expiry(), float64(first.Leaf.NotAfter.Unix()); got != want {
				t.Errorf("expiry gauge %v, want the first certificate's %v", got, want)
			}
			lines := h.logLines("TLS reload failed; still serving the previous certificate")
			if len(lines) != 1 {
				t.Fatalf("%d failure lines, want 1; logs:\n%s", len(lines), h.logs.String())
			}
			if l := lines[0]; l["level"] != "WARN" || l["file"] != tt.file(f) || !strings.Contains(l["error"].(string), tt.error) {
				t.Errorf("failure line %v, want level WARN, file %s, an error saying %q", l, tt.file(f), tt.error)
			}

			f.write(nextCA.Issue(t, serverName), clientCA)
			waitFor(t, ctx, "the repaired set served", func() bool {
				_, err := h.call(ctx, clientTLS(nextCA, &client))
				return err == nil
			})
			if ok, failed := h.reloads(resultOK), h.reloads(resultFailed); ok != 1 || failed != 1 {
				t.Errorf("reloads ok %v, failed %v; want 1 and 1", ok, failed)
			}
		})
	}
}

// TestHalfWritten: files rewritten in place, the certificate before the
// key, raise no failure while they are fresh; a touch reloads nothing; a
// damaged file that stays is reported once, when it has settled.
func TestHalfWritten(t *testing.T) {
	ctx := deadline(t)
	serverCA, nextCA := testtls.NewCA(t, "server CA"), testtls.NewCA(t, "next CA")
	f := newFiles(t, renamed)
	f.write(serverCA.Issue(t, serverName), nil)
	h := start(t, Options{CertFile: f.cert, KeyFile: f.key}) // polled by hand below
	certPEM, keyPEM := pemOf(t, nextCA.Issue(t, serverName))
	counts := func(step string, ok, failed float64) {
		t.Helper()
		if gotOK, gotFailed := h.reloads(resultOK), h.reloads(resultFailed); gotOK != ok || gotFailed != failed {
			t.Errorf("%s: reloads ok %v, failed %v; want %v, %v", step, gotOK, gotFailed, ok, failed)
		}
	}

	must(t, os.WriteFile(f.cert, certPEM[:len(certPEM)/2], 0o600))
	h.r.poll()
	counts("half the certificate", 0, 0)
	must(t, os.WriteFile(f.cert, certPEM, 0o600))
	h.r.poll()
	counts("the certificate, not yet the key", 0, 0)
	must(t, os.WriteFile(f.key, keyPEM, 0o600))
	h.r.poll()
	counts("both", 1, 0)
	if _, err := h.call(ctx, clientTLS(nextCA, nil)); err != nil {
		t.Errorf("call trusting the new CA: %v", err)
	}

	f.age()
	h.r.poll()
	counts("a touch", 1, 0)

	must(t, os.WriteFile(f.cert, certPEM[:len(certPEM)/2], 0o600))
	h.r.poll()
	counts("a fresh damaged certificate", 1, 0)
	f.age()
	h.r.poll()
	h.r.poll()
	counts("a settled damaged certificate", 1, 1)
	if _, err := h.call(ctx, clientTLS(nextCA, nil)); err != nil {
		t.Errorf("call after the damaged certificate: %v", err)
	}
	if n := len(h.logLines("TLS reload failed; still serving the previous certificate")); n != 1 {
		t.Errorf("%d failure lines, want 1", n)
	}
}

// TestRunReturns: Run returns nil once its context ends, leaving no
// goroutine behind.
func TestRunReturns(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	ca := testtls.NewCA(t, "CA")
	f := newFiles(t, renamed)
	f.write(ca.Issue(t, serverName), nil)
	r, err := New(Options{CertFile: f.cert, KeyFile: f.key, Server: "xds", Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(deadline(t))
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-deadline(t).Done():
		t.Fatal("Run did not return after its context ended")
	}
	goleak.VerifyNone(t, ignore)
}

// TestResumedSessionVerifiedAgain: a TLS session resumed after the client
// CA rotated is verified against the CAs in force then, not admitted on
// the strength of its first handshake.
func TestResumedSessionVerifiedAgain(t *testing.T) {
	ctx := deadline(t)
	serverCA, clientCA, nextClientCA := testtls.NewCA(t, "server CA"), testtls.NewCA(t, "client CA"), testtls.NewCA(t, "next client CA")
	client := clientCert(t, clientCA, []string{allowedURI}, nil, nil)
	f := newFiles(t, renamed)
	f.write(serverCA.Issue(t, serverName), clientCA)
	h := start(t, Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca}) // polled by hand below

	cfg := clientTLS(serverCA, &client)
	cfg.NextProtos = []string{"h2"}
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
	// handshake connects, reads the server's first bytes (its HTTP/2
	// SETTINGS; a TLS 1.3 server's refusal and session ticket arrive
	// with them), and reports whether the session was resumed.
	handshake := func() (resumed bool, err error) {
		d := tls.Dialer{Config: cfg}
		c, err := d.DialContext(ctx, "tcp", h.addr)
		if err != nil {
			return false, err
		}
		defer c.Close()
		if dl, ok := ctx.Deadline(); ok {
			must(t, c.SetReadDeadline(dl))
		}
		if _, err := c.Read(make([]byte, 1)); err != nil {
			return false, err
		}
		return c.(*tls.Conn).ConnectionState().DidResume, nil
	}
	if _, err := handshake(); err != nil {
		t.Fatalf("first handshake: %v", err)
	}
	if resumed, err := handshake(); err != nil || !resumed {
		t.Fatalf("second handshake: resumed %v, error %v; want a resumed session", resumed, err)
	}

	f.writeRaw(nil, nil, nextClientCA.PEM()) // the server's certificate unchanged
	h.r.poll()
	if h.reloads(resultOK) != 1 {
		t.Fatalf("reloads ok %v, want 1", h.reloads(resultOK))
	}
	if _, err := handshake(); err == nil {
		t.Error("a session of a client of the old client CA resumed, want refused")
	}
	if n := h.refused(reasonUntrusted); n != 1 {
		t.Errorf("refused{untrusted} %v, want 1", n)
	}
}
